package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/effectively-io/effectively/internal/dedupe"
)

// The retention measurement (-prune-claims N): what does expiring claims
// cost the worker? Three runs of the worker on the benchmark topic, each
// on a fresh schema that already holds N claims of another topic:
//
//   - base: the N claims in the open generation, the pruner off
//     (dedupe.prune_interval 24h): a claims table that never expires
//     anything, as large as the one retention keeps;
//   - with: the N claims in two closed generations — half closed 60 days
//     ago (expired: the pruner drops it at its first pass, a second in),
//     half closed a day ago (live: every claim of the run probes it) — the
//     pruner every second, no rotation within the run: the steady cost of
//     retention (the probe of the closed generations) and a drop;
//   - rotating: the same, with a new generation every 5 s, so the run goes
//     through rotations: their cost, per rotation (a rotation waits for the
//     claims in flight and each partition redoes one batch), which a real
//     dedupe.generation_interval (default retention / 2: days) spreads
//     over days.
//
// The whole-run rates are compared. The time the drop took comes from the
// pruner's own log line.

// pruneRun is one run of the measurement.
type pruneRun struct {
	insertTook time.Duration
	rate       float64 // first record applied → the topic applied
	rotations  int64   // generations opened during the run
	dropTook   time.Duration
	dropRows   int64 // the pruner's estimate of the dropped claims
	problems   []string
}

// pruneResult is one round of the three runs.
type pruneResult struct {
	claims               int64
	events               int64
	base, with, rotating pruneRun
}

// perRotation is the time one rotation cost: the rotating run's extra time
// over the with run's for the same records, divided by its rotations.
func (r *pruneResult) perRotation() time.Duration {
	if r.rotating.rotations == 0 || r.rotating.rate == 0 || r.with.rate == 0 {
		return 0
	}
	extra := float64(r.events)/r.rotating.rate - float64(r.events)/r.with.rate
	return time.Duration(extra / float64(r.rotating.rotations) * float64(time.Second))
}

// expiredClaimsSQL inserts $2 claims (numbered from $1) on a topic the
// worker does not read, into the open claims generation.
const expiredClaimsSQL = `
INSERT INTO effectively_claims
    (event_key, key_strategy, payload_hash, event_type, subject, disposition, consumer_group, topic, "partition", "offset", claimed_at, updated_at, generation)
SELECT 'ce:20:urn:bench:expired:' || lpad(i::text, 10, '0'), 'cloudevents', sha256(int8send(i)), 'account.opened',
       'acct-' || (i % 100000), 'applied', 'bench-expired', 'bench.expired', (i % 8)::int, i / 8,
       now() - interval '60 days', now() - interval '60 days',
       (SELECT generation FROM claim_generations WHERE opened_at IS NOT NULL AND closed_at IS NULL)
FROM generate_series($1::bigint, $1::bigint + $2::bigint - 1) AS i`

// rotateClaims closes the open claims generation and opens the next (the
// pruner's rotation).
func rotateClaims(ctx context.Context, d *db) error {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	_, err = dedupe.MaintainGenerations(ctx, conn.Conn(), time.Now(), dedupe.GenerationPolicy{Interval: time.Nanosecond, Retention: 100 * 365 * 24 * time.Hour}, false)
	return err
}

// seedClaims fills d: base, claims in the open generation; with, half in a
// generation closed 60 days ago and half in one closed a day ago.
func seedClaims(ctx context.Context, d *db, claims int, with bool) error {
	if !with {
		if _, err := d.pool.Exec(ctx, expiredClaimsSQL, 1, claims); err != nil {
			return err
		}
	} else {
		half := claims / 2
		for i, n := range []int{half, claims - half} {
			if _, err := d.pool.Exec(ctx, expiredClaimsSQL, 1+i*half, n); err != nil {
				return err
			}
			if err := rotateClaims(ctx, d); err != nil {
				return err
			}
		}
		// The older closed generation 60 days ago, the newer a day ago.
		if _, err := d.pool.Exec(ctx, `
UPDATE claim_generations g SET opened_at = g.opened_at - a.age, closed_at = g.closed_at - a.age
FROM (SELECT generation, CASE WHEN row_number() OVER (ORDER BY generation) = 1 THEN interval '60 days' ELSE interval '1 day' END AS age
      FROM claim_generations WHERE closed_at IS NOT NULL AND dropped_at IS NULL) a
WHERE g.generation = a.generation`); err != nil {
			return err
		}
	}
	_, err := d.pool.Exec(ctx, `VACUUM ANALYZE effectively_claims`)
	return err
}

// runPrune runs the measurement on the benchmark topic (producing it first
// when no other measurement did): -runs pairs of a base run and a run with
// retention, alternating, so a noisy neighbour hurts both alike.
func (b *bench) runPrune(ctx context.Context, claims int) ([]*pruneResult, error) {
	if b.topic == "" {
		if err := b.produceMain(ctx); err != nil {
			return nil, err
		}
	}
	var out []*pruneResult
	for i := range b.opts.runs {
		res := &pruneResult{claims: int64(claims), events: int64(b.opts.events)}
		var err error
		progress("retention round %d/%d: base run (%d claims in the open generation, pruner off)", i+1, b.opts.runs, claims)
		if res.base, err = b.pruneOnce(ctx, "prune-base", claims, false, false); err != nil {
			return nil, fmt.Errorf("retention base run: %w", err)
		}
		progress("retention round %d/%d: run with %d claims in two closed generations, dropping one", i+1, b.opts.runs, claims)
		if res.with, err = b.pruneOnce(ctx, "prune-with", claims, true, false); err != nil {
			return nil, fmt.Errorf("retention run: %w", err)
		}
		progress("retention round %d/%d: the same, rotating every 5 s", i+1, b.opts.runs)
		if res.rotating, err = b.pruneOnce(ctx, "prune-rot", claims, true, true); err != nil {
			return nil, fmt.Errorf("retention run with rotations: %w", err)
		}
		progress("retention round %d/%d: base %.0f ev/s, with retention %.0f ev/s (drop %.1f%%), rotating %.0f ev/s (%d rotations, %s each); a generation of ~%d claims dropped in %s",
			i+1, b.opts.runs, res.base.rate, res.with.rate, drop(res.with.rate, res.base.rate), res.rotating.rate, res.rotating.rotations,
			res.perRotation().Round(time.Millisecond), res.with.dropRows, res.with.dropTook.Round(time.Millisecond))
		out = append(out, res)
	}
	return out, nil
}

// printPrune prints every round, the median drop and the median cost of a
// rotation.
func printPrune(out io.Writer, rs []*pruneResult) {
	var drops []float64
	var rots []time.Duration
	for i, r := range rs {
		fmt.Fprintf(out, "\nround %d of %d", i+1, len(rs))
		r.print(out)
		if r.base.rate > 0 && r.with.rate > 0 {
			drops = append(drops, drop(r.with.rate, r.base.rate))
		}
		if d := r.perRotation(); d != 0 {
			rots = append(rots, d)
		}
	}
	if len(drops) > 0 {
		slices.Sort(drops)
		fmt.Fprintf(out, "\nretention: median throughput drop %.1f%% over %d rounds (%s); target < 5%%\n", drops[len(drops)/2], len(drops), fmtDrops(drops))
	}
	if len(rots) > 0 {
		slices.Sort(rots)
		fmt.Fprintf(out, "rotation: median cost %s of throughput per rotation over %d rounds; at the default dedupe.generation_interval (7 days with the default retention) that is %.6f%% of the time\n",
			rots[len(rots)/2].Round(time.Millisecond), len(rots), 100*rots[len(rots)/2].Seconds()/(7*24*3600))
	}
}

func fmtDrops(ds []float64) string {
	var parts []string
	for _, d := range ds {
		parts = append(parts, fmt.Sprintf("%.1f%%", d))
	}
	return strings.Join(parts, ", ")
}

// pruneOnce runs the worker on a fresh schema seeded by seedClaims until it
// has applied the topic (and, with retention, the expired generation is
// dropped).
func (b *bench) pruneOnce(ctx context.Context, kind string, claims int, with, rotating bool) (pruneRun, error) {
	var r pruneRun
	d, err := b.newDB(ctx, kind, migrateWorker)
	if err != nil {
		return r, err
	}
	defer d.drop(context.WithoutCancel(ctx))
	start := time.Now()
	if err := seedClaims(ctx, d, claims, with); err != nil {
		return r, fmt.Errorf("seeding %d claims: %w", claims, err)
	}
	r.insertTook = time.Since(start)
	progress("retention: %d claims inserted and vacuumed in %s", claims, r.insertTook.Round(time.Millisecond))
	var opened0 int64
	if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM claim_generations WHERE opened_at IS NOT NULL`).Scan(&opened0); err != nil {
		return r, err
	}

	env := []string{"EFFECTIVELY_DEDUPE_PRUNE_INTERVAL=24h"}
	switch {
	case rotating:
		env = []string{"EFFECTIVELY_DEDUPE_PRUNE_INTERVAL=1s", "EFFECTIVELY_DEDUPE_GENERATION_INTERVAL=5s"}
	case with:
		env = []string{"EFFECTIVELY_DEDUPE_PRUNE_INTERVAL=1s", "EFFECTIVELY_DEDUPE_GENERATION_INTERVAL=24h"}
	}
	group := b.name(kind)
	w, err := b.startWorker(d, group, b.topic, env...)
	if err != nil {
		return r, err
	}
	defer w.stop(time.Minute)
	first, done, n, err := w.waitApplied(ctx, d, group, b.topic, int64(b.opts.events))
	if err != nil {
		return r, err
	}
	if secs := done.Sub(first).Seconds(); secs > 0 {
		r.rate = float64(n) / secs
	}
	if with {
		// The drop happened at the pruner's first pass, a second in.
		for deadline := time.Now().Add(time.Minute); r.dropTook == 0 && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			r.dropTook, r.dropRows = droppedInLog(w)
		}
		if r.dropTook == 0 {
			r.problems = append(r.problems, kind+": the pruner logged no dropped claims generation")
		}
	}
	var opened int64
	if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM claim_generations WHERE opened_at IS NOT NULL`).Scan(&opened); err != nil {
		return r, err
	}
	r.rotations = opened - opened0
	if code := w.stop(time.Minute); code != 0 {
		progress("warning: the worker exited with code %d after SIGTERM", code)
	}
	b.deleteGroup(ctx, group)
	// One claim per distinct event of the topic.
	var got int64
	if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM effectively_claims WHERE topic = $1`, b.topic).Scan(&got); err != nil {
		return r, fmt.Errorf("counting claims: %w", err)
	}
	if got != int64(b.exp.Distinct) {
		r.problems = append(r.problems, fmt.Sprintf("%s: %d claims of the topic, want %d", kind, got, b.exp.Distinct))
	}
	return r, nil
}

// droppedInLog finds the pruner's line for the claims table in the
// worker's log: the pass's time and its estimate of the dropped claims.
func droppedInLog(w *worker) (time.Duration, int64) {
	if w.log == nil {
		return 0, 0
	}
	f, err := os.Open(w.log.Name())
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l struct {
			Msg   string  `json:"msg"`
			Table string  `json:"table"`
			Rows  int64   `json:"rows"`
			Took  float64 `json:"took"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "pruned" && l.Table == dedupe.ClaimsTable && l.Rows > 0 {
			return time.Duration(l.Took * float64(time.Second)), l.Rows
		}
	}
	return 0, 0
}

func (r *pruneResult) print(out io.Writer) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, ": retention's cost while the worker runs (-prune-claims %d)\n", r.claims)
	fmt.Fprintf(w, "method\tthree runs of the worker on the topic (%d records), each schema holding %d claims of another topic; base: all in the open generation, pruner off; with: half in a generation closed 60 days ago (dropped at the first pass), half in one closed a day ago (probed by every claim), pruner every 1 s, no rotation; rotating: the same, a new generation every 5 s\n", r.events, r.claims)
	fmt.Fprintf(w, "setup\tinserting + vacuuming the claims took %s (base), %s (with), %s (rotating)\n", r.base.insertTook.Round(time.Second), r.with.insertTook.Round(time.Second), r.rotating.insertTook.Round(time.Second))
	fmt.Fprintf(w, "throughput\tbase %.0f ev/s, with retention %.0f ev/s, ratio %.3f, drop %.1f%% (target < 5%%)\n", r.base.rate, r.with.rate, ratio(r.with.rate, r.base.rate), drop(r.with.rate, r.base.rate))
	fmt.Fprintf(w, "drop\tthe expired generation (~%d claims) dropped in a pruner pass of %s\n", r.with.dropRows, r.with.dropTook.Round(time.Millisecond))
	fmt.Fprintf(w, "rotations\trotating %.0f ev/s with %d rotations: %s of throughput each\n", r.rotating.rate, r.rotating.rotations, r.perRotation().Round(time.Millisecond))
	for _, p := range append(append(r.base.problems, r.with.problems...), r.rotating.problems...) {
		fmt.Fprintf(w, "PROBLEM\t%s\n", p)
	}
	w.Flush()
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func drop(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * (1 - a/b)
}
