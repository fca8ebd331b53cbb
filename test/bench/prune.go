package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/effectively-io/effectively/dedupe"
)

// The pruning measurement (-prune-claims N): does deleting N expired claims
// slow the worker down? Two runs of the worker on the benchmark topic, each
// on a fresh schema that already holds N claims a month old (inserted with
// generate_series, then vacuumed, like claims long settled):
//
//   - base: dedupe.prune_interval 24h, so the pruner never runs;
//   - prune: dedupe.prune_interval 1s, so the pruner starts a second in and
//     deletes the N claims (5,000 per transaction) while the worker applies
//     the topic.
//
// The stored positions and the pruner's row counter are sampled every
// 100 ms. The comparison is over the same stretch of the topic: the records
// the prune run applied while the pruner was deleting, and the time the base
// run took for that same stretch.

// pruneSample is one sample of a run.
type pruneSample struct {
	at      time.Time
	applied int64 // sum of the stored positions
	pruned  int64 // claims the pruner deleted so far
}

// pruneRun is one run of the measurement.
type pruneRun struct {
	insertTook time.Duration
	samples    []pruneSample
	problems   []string
}

// pruneResult is what -prune-claims prints.
type pruneResult struct {
	claims     int64
	events     int64
	base, with pruneRun
	// Whole-run steady rates (first record applied → done).
	baseRate, withRate float64
	// The stretch the pruner overlapped: applied offsets [from, to) in the
	// prune run, and each run's rate over it.
	from, to                 int64
	windowWith, windowBase   float64
	prunedDuringRun          int64
	pruneTook                time.Duration // first to last pruned claim
	pruneDone                bool
	pruneRowsPerSec          float64
	workerDoneBeforePruneEnd bool
}

// expiredClaimsSQL inserts $1 claims a month or two old on a topic the
// worker does not read, into the open claims generation (which
// expireClaims then closes and ages).
const expiredClaimsSQL = `
INSERT INTO effectively_claims
    (event_key, key_strategy, payload_hash, event_type, subject, disposition, consumer_group, topic, "partition", "offset", claimed_at, updated_at, generation)
SELECT 'ce:20:urn:bench:expired:' || lpad(i::text, 10, '0'), 'cloudevents', sha256(int8send(i)), 'account.opened',
       'acct-' || (i % 100000), 'applied', 'bench-expired', 'bench.expired', (i % 8)::int, i / 8,
       now() - interval '60 days' + i * interval '1 millisecond', now() - interval '60 days' + i * interval '1 millisecond',
       (SELECT generation FROM claim_generations WHERE opened_at IS NOT NULL AND closed_at IS NULL)
FROM generate_series(1, $1::bigint) AS i`

// expireClaims closes the open claims generation (the pruner's rotation)
// and makes every closed generation look 60 days old, so the worker's
// pruner drops them at its first pass.
func expireClaims(ctx context.Context, d *db) error {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := dedupe.MaintainGenerations(ctx, conn.Conn(), time.Now(), dedupe.GenerationPolicy{Interval: time.Nanosecond, Retention: 100 * 365 * 24 * time.Hour}, false); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, `UPDATE claim_generations SET opened_at = opened_at - interval '60 days', closed_at = closed_at - interval '60 days' WHERE closed_at IS NOT NULL`)
	return err
}

const prunedClaimsSQL = `SELECT coalesce((SELECT rows_pruned FROM prune_watermarks WHERE table_name = 'effectively_claims'), 0)`

// runPrune runs the pruning measurement on the benchmark topic (producing
// it first when no other measurement did): -runs pairs of a base run and a
// run with pruning, alternating, so a noisy neighbour hurts both alike.
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
		progress("prune pair %d/%d: base run (%d expired claims, pruner off)", i+1, b.opts.runs, claims)
		if res.base, err = b.pruneOnce(ctx, "prune-base", claims, false); err != nil {
			return nil, fmt.Errorf("prune base run: %w", err)
		}
		progress("prune pair %d/%d: run with the pruner deleting %d expired claims", i+1, b.opts.runs, claims)
		if res.with, err = b.pruneOnce(ctx, "prune-with", claims, true); err != nil {
			return nil, fmt.Errorf("prune run: %w", err)
		}
		res.compute()
		progress("prune pair %d/%d: while pruning base %.0f ev/s, with pruning %.0f ev/s (drop %.1f%%); all claims pruned in %s",
			i+1, b.opts.runs, res.windowBase, res.windowWith, drop(res.windowWith, res.windowBase), res.pruneTook.Round(time.Millisecond))
		out = append(out, res)
	}
	return out, nil
}

// printPrune prints every pair and the median drop.
func printPrune(out io.Writer, rs []*pruneResult) {
	var drops []float64
	for i, r := range rs {
		fmt.Fprintf(out, "\npair %d of %d", i+1, len(rs))
		r.print(out)
		if r.to > r.from {
			drops = append(drops, drop(r.windowWith, r.windowBase))
		}
	}
	if len(drops) > 0 {
		slices.Sort(drops)
		fmt.Fprintf(out, "\npruning: median throughput drop while pruning %.1f%% over %d pairs (%s); target < 5%%\n", drops[len(drops)/2], len(drops), fmtDrops(drops))
	}
}

func fmtDrops(ds []float64) string {
	var parts []string
	for _, d := range ds {
		parts = append(parts, fmt.Sprintf("%.1f%%", d))
	}
	return strings.Join(parts, ", ")
}

// pruneOnce runs the worker on a fresh schema holding claims expired
// claims until it has applied the topic (and, pruning, until the pruner
// has deleted them all).
func (b *bench) pruneOnce(ctx context.Context, kind string, claims int, prune bool) (pruneRun, error) {
	var r pruneRun
	d, err := b.newDB(ctx, kind, migrateWorker)
	if err != nil {
		return r, err
	}
	defer d.drop(context.WithoutCancel(ctx))
	start := time.Now()
	if _, err := d.pool.Exec(ctx, expiredClaimsSQL, claims); err != nil {
		return r, fmt.Errorf("inserting %d expired claims: %w", claims, err)
	}
	if _, err := d.pool.Exec(ctx, `VACUUM ANALYZE effectively_claims`); err != nil {
		return r, fmt.Errorf("vacuuming the expired claims: %w", err)
	}
	if err := expireClaims(ctx, d); err != nil {
		return r, fmt.Errorf("closing and ageing the expired claims' generation: %w", err)
	}
	r.insertTook = time.Since(start)
	progress("prune: %d expired claims inserted and vacuumed in %s", claims, r.insertTook.Round(time.Millisecond))

	interval := "24h"
	if prune {
		interval = "1s"
	}
	group := b.name(kind)
	w, err := b.startWorker(d, group, b.topic, "EFFECTIVELY_DEDUPE_PRUNE_INTERVAL="+interval)
	if err != nil {
		return r, err
	}
	defer w.stop(time.Minute)
	target := int64(b.opts.events)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastMove, last := time.Now(), pruneSample{}
	for {
		if w.exited() {
			return r, w.failed(errors.New("the worker exited"))
		}
		s := pruneSample{at: time.Now()}
		if s.applied, err = d.applied(ctx, group, b.topic); err != nil {
			return r, fmt.Errorf("reading positions: %w", err)
		}
		if err := d.pool.QueryRow(ctx, prunedClaimsSQL).Scan(&s.pruned); err != nil {
			return r, fmt.Errorf("reading the pruner's count: %w", err)
		}
		r.samples = append(r.samples, s)
		if s.applied >= target && (!prune || s.pruned >= int64(claims)) {
			break
		}
		if s.applied != last.applied || s.pruned != last.pruned {
			lastMove, last = s.at, s
		} else if time.Since(lastMove) > progressWait {
			return r, w.failed(fmt.Errorf("%w for %s at %d of %d records, %d of %d claims pruned", errStalled, progressWait, s.applied, target, s.pruned, claims))
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-tick.C:
		}
	}
	if code := w.stop(time.Minute); code != 0 {
		progress("warning: the worker exited with code %d after SIGTERM", code)
	}
	b.deleteGroup(ctx, group)
	// One claim per distinct event of the topic, whatever the pruner did
	// to the expired ones.
	var got int64
	if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM effectively_claims WHERE topic = $1`, b.topic).Scan(&got); err != nil {
		return r, fmt.Errorf("counting claims: %w", err)
	}
	if got != int64(b.exp.Distinct) {
		r.problems = append(r.problems, fmt.Sprintf("%s: %d claims of the topic, want %d", kind, got, b.exp.Distinct))
	}
	return r, nil
}

// firstAt returns the first sample at which f holds (ok false: none).
func firstAt(ss []pruneSample, f func(pruneSample) bool) (pruneSample, bool) {
	for _, s := range ss {
		if f(s) {
			return s, true
		}
	}
	return pruneSample{}, false
}

// steadyRate is records over the time from the first record applied to
// the topic applied.
func steadyRate(ss []pruneSample, events int64) float64 {
	first, ok1 := firstAt(ss, func(s pruneSample) bool { return s.applied > 0 })
	done, ok2 := firstAt(ss, func(s pruneSample) bool { return s.applied >= events })
	if !ok1 || !ok2 || !done.at.After(first.at) {
		return 0
	}
	return float64(done.applied-first.applied) / done.at.Sub(first.at).Seconds()
}

// rateOver is the rate of a run over the applied range [from, to).
func rateOver(ss []pruneSample, from, to int64) float64 {
	a, ok1 := firstAt(ss, func(s pruneSample) bool { return s.applied >= from })
	z, ok2 := firstAt(ss, func(s pruneSample) bool { return s.applied >= to })
	if !ok1 || !ok2 || !z.at.After(a.at) {
		return 0
	}
	return float64(z.applied-a.applied) / z.at.Sub(a.at).Seconds()
}

func (r *pruneResult) compute() {
	r.baseRate = steadyRate(r.base.samples, r.events)
	r.withRate = steadyRate(r.with.samples, r.events)
	ss := r.with.samples
	start, ok := firstAt(ss, func(s pruneSample) bool { return s.pruned > 0 })
	if !ok {
		return
	}
	end, done := firstAt(ss, func(s pruneSample) bool { return s.pruned >= r.claims })
	r.pruneDone = done
	if done {
		r.pruneTook = end.at.Sub(start.at)
		if secs := r.pruneTook.Seconds(); secs > 0 {
			r.pruneRowsPerSec = float64(end.pruned-start.pruned) / secs
		}
	}
	workerDone, _ := firstAt(ss, func(s pruneSample) bool { return s.applied >= r.events })
	overlapEnd := end
	if !done || workerDone.at.Before(end.at) {
		overlapEnd = workerDone
		r.workerDoneBeforePruneEnd = true
	}
	r.prunedDuringRun = overlapEnd.pruned
	r.from, r.to = start.applied, overlapEnd.applied
	if r.to > r.from {
		r.windowWith = rateOver(ss, r.from, r.to)
		r.windowBase = rateOver(r.base.samples, r.from, r.to)
	}
}

func (r *pruneResult) print(out io.Writer) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, ": pruning while the worker runs (-prune-claims %d)\n", r.claims)
	fmt.Fprintf(w, "method\ttwo runs of the worker on the topic (%d records), each schema holding %d claims 60 days old; base: pruner off (dedupe.prune_interval 24h); with: prune_interval 1s (batches of 5,000, paused between)\n", r.events, r.claims)
	fmt.Fprintf(w, "setup\tinserting + vacuuming the expired claims took %s (base), %s (with)\n", r.base.insertTook.Round(time.Second), r.with.insertTook.Round(time.Second))
	fmt.Fprintf(w, "whole run\tbase %.0f ev/s, with pruning %.0f ev/s, ratio %.3f (drop %.1f%%)\n", r.baseRate, r.withRate, ratio(r.withRate, r.baseRate), drop(r.withRate, r.baseRate))
	if r.to > r.from {
		fmt.Fprintf(w, "while pruning\trecords %d → %d of the topic: base %.0f ev/s, with pruning %.0f ev/s, ratio %.3f, drop %.1f%% (target < 5%%)\n",
			r.from, r.to, r.windowBase, r.windowWith, ratio(r.windowWith, r.windowBase), drop(r.windowWith, r.windowBase))
	} else {
		fmt.Fprintf(w, "while pruning\tno overlap measured (the pruner started after the worker was done?)\n")
	}
	fmt.Fprintf(w, "pruned\t%d claims while the worker was applying the topic", r.prunedDuringRun)
	if r.workerDoneBeforePruneEnd {
		fmt.Fprintf(w, " (the worker finished first; pruning went on alone)")
	}
	fmt.Fprintln(w)
	if r.pruneDone {
		fmt.Fprintf(w, "pruning time\tall %d claims in %s (%.0f rows/s)\n", r.claims, r.pruneTook.Round(time.Millisecond), r.pruneRowsPerSec)
	} else {
		fmt.Fprintf(w, "pruning time\tnot finished\n")
	}
	for _, p := range append(r.base.problems, r.with.problems...) {
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
