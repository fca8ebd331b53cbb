package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/examples/orders-go/workload"
	"github.com/effectively-io/effectively/internal/apitest"
	"github.com/effectively-io/effectively/internal/kafkatest"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/internal/proctest"
)

// TestOrdersOnTheRealStack runs the orders binary as a team would: its own
// schema migrated by `orders migrate`, a topic of 8 partitions, a workload
// with duplicates and disorder plus poison, produced while three `orders
// run` processes in one group are SIGKILLed and restarted. The end state is
// compared with what the generator computed from the events alone; then the
// operator commands (dlq list, replay dry run, audit, parked list, verify)
// are run against the example's tables with the example's binary.
//
// EFFECTIVELY_ORDERS_SEED reproduces a run; EFFECTIVELY_ORDERS_EVENTS sizes
// it (default 24,000 records).
func TestOrdersOnTheRealStack(t *testing.T) {
	t.Parallel()
	began := time.Now()
	seed := envUint(t, "EFFECTIVELY_ORDERS_SEED", uint64(time.Now().UnixNano()))
	events := int(envUint(t, "EFFECTIVELY_ORDERS_EVENTS", 24_000))
	t.Logf("seed %d (EFFECTIVELY_ORDERS_SEED=%d reproduces the workload and the kill schedule)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 11))

	bin := buildOrders(t)
	db := pgtest.NewEmpty(t)
	topic := kafkatest.NewTopic(t, 8)
	group := kafkatest.NewGroup(t)
	kafkatest.DeleteOnCleanup(t, topic+".dlq") // the dead-letter relay's topic
	wh := apitest.NewReceiver(t, "/reservations", http.StatusCreated)
	env := []string{
		"EFFECTIVELY_KAFKA_BROKERS=" + strings.Join(kafkatest.Brokers(t), ","),
		"EFFECTIVELY_KAFKA_GROUP=" + group,
		"EFFECTIVELY_KAFKA_TOPICS=" + topic,
		"EFFECTIVELY_POSTGRES_URL=" + db.URL,
		"EFFECTIVELY_HTTP_ADDR=",
		"EFFECTIVELY_TARGETS_WAREHOUSE_URL=" + wh.URL,
		// Short sessions, so a killed member's partitions move on quickly;
		// short outbox leases, so a reservation caught mid-call by a kill
		// is retried soon (with the same idempotency key).
		"EFFECTIVELY_KAFKA_SESSION_TIMEOUT=6s",
		"EFFECTIVELY_KAFKA_REBALANCE_TIMEOUT=20s",
		"EFFECTIVELY_OUTBOX_CALL_TIMEOUT=2s",
		"EFFECTIVELY_OUTBOX_LEASE_GRACE=2s",
	}

	// The example's own migrations, applied by its binary after the engine's.
	out := mustRun(t, bin, env, "migrate")
	require.Contains(t, out, "orders migrations at version 1")
	require.EqualValues(t, 1, db.Count(t, `SELECT count(*) FROM orders_schema_version WHERE version_id = 1 AND is_applied`))

	recs, exp, err := workload.Generate(workload.Config{Orders: max(events/30, 1), Events: events, Duplicates: 0.1, OutOfOrder: 0.1, Orphans: 2, Seed: seed})
	require.NoError(t, err)
	stream, poison := withPoison(t, rng, topic, recs)
	t.Logf("workload: %d records (%d distinct events, %d re-sent, %d swapped, %d lines before their order, %d stale, %d orphans) + %d poison",
		exp.Records, exp.Distinct, exp.Duplicates, exp.OutOfOrder, exp.LinesEarly, exp.Stale, len(exp.Parked), len(poison))

	// Three members; a supervisor restarts any that ends.
	f := newFleet(t, bin, env, 3)
	stopWatch := watchPositions(t, db, group, topic)

	// Produce at a pace, so the kills land while there is work in flight.
	produced := make(chan []*kgo.Record, 1)
	go func() { produced <- producePaced(t, stream) }()
	kills := 0
	var sent []*kgo.Record
	for sent == nil || kills < 6 {
		select {
		case sent = <-produced:
		case <-time.After(time.Duration(1500+rng.IntN(1500)) * time.Millisecond):
			if f.killRandom(rng) {
				kills++
			}
		}
		require.Less(t, time.Since(began), 5*time.Minute, "hang guard: producing and killing")
	}
	require.Len(t, sent, len(stream), "every record acknowledged")
	pos := poisonOrigins(poison)

	// Caught up: the stored positions (offsets start at 0 and a
	// non-transactional topic has no gaps) add up to every record.
	waitUntil(t, "every record processed", 4*time.Minute, func() bool {
		return db.Count(t, `SELECT coalesce(sum(next_offset), 0) FROM consumer_offsets WHERE consumer_group = $1 AND topic = $2`, group, topic) == int64(len(stream))
	})
	waitUntil(t, "every reservation sent", 2*time.Minute, func() bool {
		return db.Count(t, `SELECT count(*) FROM outbox WHERE state = 'sent'`) == int64(exp.Placed)
	})
	f.stop()
	samples := stopWatch()

	// Exactly one effect per event, against the generator's state.
	keyed := int64(0)
	for _, p := range poison {
		if p.claimed {
			keyed++
		}
	}
	rep, err := workload.Verify(context.Background(), db.Pool, exp, workload.Options{
		DeadLetters: int64(len(poison)), DeadLetteredClaims: keyed, Intents: true})
	require.NoError(t, err)
	require.Empty(t, rep.Problems, "the database differs from the expected effects")
	require.EqualValues(t, exp.Placed, db.Count(t, `SELECT count(*) FROM outbox WHERE operation = $1 AND state = 'sent'`, OpReserve))
	// The warehouse saw every reservation, each under one idempotency key
	// (a repeat after a kill reuses it).
	require.Equal(t, exp.Placed, wh.DistinctKeys())

	// Every poison record is a dead letter at its origin with its reason:
	// `orders dlq list --json`.
	var dls []struct {
		Topic     string `json:"topic"`
		Partition int32  `json:"partition"`
		Offset    int64  `json:"offset"`
		Reason    string `json:"reason"`
		Error     string `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(mustRun(t, bin, env, "dlq", "list", "--json")), &dls))
	got := map[string]string{}
	for _, d := range dls {
		require.Equal(t, topic, d.Topic)
		require.NotEmpty(t, d.Error)
		got[fmt.Sprintf("%d@%d", d.Partition, d.Offset)] = d.Reason
	}
	require.Equal(t, pos, got, "dead letters by origin: one per poison record, with its reason")

	// `orders audit`: every record of the topic accounted for, exit 0.
	var audit struct {
		Records           int64            `json:"records"`
		Counts            map[string]int64 `json:"counts"`
		DeadLetterReasons map[string]int64 `json:"dead_letter_reasons"`
	}
	require.NoError(t, json.Unmarshal([]byte(mustRun(t, bin, env, "audit", "--topic", topic, "--json")), &audit))
	require.EqualValues(t, len(stream), audit.Records)
	require.Zero(t, audit.Counts["unaccounted"])
	require.Zero(t, audit.Counts["not_processed"])
	require.EqualValues(t, exp.Applied(), audit.Counts["applied"])
	require.EqualValues(t, exp.Stale, audit.Counts["stale"])
	require.EqualValues(t, len(exp.Parked), audit.Counts["parked"])
	require.EqualValues(t, exp.Duplicates, audit.Counts["duplicate"])
	require.EqualValues(t, len(poison), audit.Counts["dead_lettered"])
	wantReasons := map[string]int64{}
	for _, p := range poison {
		wantReasons[p.reason]++
	}
	require.Equal(t, wantReasons, audit.DeadLetterReasons)

	// `orders parked list`: the orphan lines, whose orders never came.
	var parked []struct {
		Resource string `json:"resource"`
		Type     string `json:"type"`
	}
	require.NoError(t, json.Unmarshal([]byte(mustRun(t, bin, env, "parked", "list", "--json")), &parked))
	var orphans, listed []string
	for _, l := range exp.Parked {
		orphans = append(orphans, l.OrderID)
	}
	for _, p := range parked {
		require.Equal(t, TypeLineAdded, p.Type)
		listed = append(listed, p.Resource)
	}
	sort.Strings(orphans)
	sort.Strings(listed)
	require.Equal(t, orphans, listed)
	require.Contains(t, mustRun(t, bin, env, "parked", "list"), exp.Parked[sortedKeys(exp.Parked)[0]].OrderID)

	// `orders replay` without --execute: a plan to read every record again,
	// and nothing changed.
	before := db.Count(t, `SELECT sum(next_offset) FROM consumer_offsets WHERE consumer_group = $1`, group)
	var plan struct {
		Records int64 `json:"records"`
		DryRun  bool  `json:"dry_run"`
	}
	require.NoError(t, json.Unmarshal([]byte(mustRun(t, bin, env, "replay", "--topic", topic, "--from-start", "--json")), &plan))
	require.True(t, plan.DryRun)
	require.EqualValues(t, len(stream), plan.Records)
	require.Contains(t, mustRun(t, bin, env, "replay", "--topic", topic, "--from-start"), "dry run: nothing was changed")
	require.Equal(t, before, db.Count(t, `SELECT sum(next_offset) FROM consumer_offsets WHERE consumer_group = $1`, group))

	// `orders verify`: the same check from the command line.
	expPath := filepath.Join(t.TempDir(), "expected.json")
	require.NoError(t, exp.WriteFile(expPath))
	require.Contains(t, mustRun(t, bin, env, "verify", "--expect", expPath,
		"--dead-letters", strconv.Itoa(len(poison)), "--dead-lettered-claims", strconv.FormatInt(keyed, 10)), "check             OK")

	t.Logf("figures: %d records (%d distinct, %d duplicates, %d swapped, %d stale, %d lines early, %d poison), 3 workers, %d SIGKILLs, %d restarts, %d position samples never backwards, claims %v, %d reservations (%d warehouse calls), %s",
		len(stream), exp.Distinct, exp.Duplicates, exp.OutOfOrder, exp.Stale, exp.LinesEarly, len(poison), kills, f.restarts(), samples,
		rep.Claims, rep.Intents, wh.Calls(), time.Since(began).Round(time.Second))
}

// poisonRecord is a bad record injected into the stream and the dead-letter
// reason it must get.
type poisonRecord struct {
	rec     *kgo.Record
	reason  string
	claimed bool // decodable: its claim says dead_lettered
}

// withPoison inserts two records of each kind of bad input at random places
// in the second half of recs. Each is keyed by an order whose first order
// event comes earlier (so it shares that order's partition, and a bad line
// is judged, not parked); a conflict re-sends an earlier event's id with
// other data.
func withPoison(t *testing.T, rng *rand.Rand, topic string, recs []workload.Record) ([]*kgo.Record, []poisonRecord) {
	t.Helper()
	type ce = map[string]any
	var out []*kgo.Record
	var poison []poisonRecord
	created := map[string]bool{}
	var ready []string // orders created so far, in order
	var lines []workload.Record
	half := len(recs) / 2
	at := map[int]bool{}
	for len(at) < 12 {
		at[half+rng.IntN(len(recs)-half)] = true
	}
	n := 0
	for i, r := range recs {
		out = append(out, kafkaRecord(topic, r))
		if r.Type != workload.TypeLineAdded && !created[string(r.Key)] {
			created[string(r.Key)] = true
			ready = append(ready, string(r.Key))
		}
		if r.Type == workload.TypeLineAdded && !r.Resend && created[string(r.Key)] {
			lines = append(lines, r)
		}
		if !at[i] {
			continue
		}
		order := ready[rng.IntN(len(ready))]
		id := fmt.Sprintf("poison-%d", n)
		event := func(typ string, version int64, data any) []byte {
			e := ce{"specversion": "1.0", "id": id, "source": "urn:orders:poison", "type": typ, "subject": order, "data": data}
			if version > 0 {
				e["resourceversion"] = version
			}
			b, err := json.Marshal(e)
			require.NoError(t, err)
			return b
		}
		var p poisonRecord
		switch n % 6 {
		case 0:
			p = poisonRecord{reason: "not_json", rec: &kgo.Record{Value: []byte(`{"specversion":"1.0","id":`)}}
		case 1:
			p = poisonRecord{reason: string(ReasonInvalidOrder), claimed: true,
				rec: &kgo.Record{Value: event(TypePlaced, 1<<40, ce{"customer": "", "total_cents": 100})}}
		case 2:
			p = poisonRecord{reason: string(ReasonInvalidLine), claimed: true,
				rec: &kgo.Record{Value: event(TypeLineAdded, 0, ce{"line_id": id, "sku": "SKU-1", "quantity": 0, "unit_price_cents": 1})}}
		case 3:
			p = poisonRecord{reason: string(ReasonMissingVersion), claimed: true,
				rec: &kgo.Record{Value: event(TypeUpdated, 0, ce{"customer": "c", "total_cents": 1})}}
		case 4:
			p = poisonRecord{reason: "unknown_type", claimed: true,
				rec: &kgo.Record{Value: event("order.shipped", 0, ce{"carrier": "x"})}}
		case 5:
			// Same id as an earlier line, other data: a conflict, not a duplicate.
			orig := lines[rng.IntN(len(lines))]
			var e ce
			require.NoError(t, json.Unmarshal(orig.Value, &e))
			e["data"].(ce)["quantity"] = 1000
			b, err := json.Marshal(e)
			require.NoError(t, err)
			order = string(orig.Key)
			p = poisonRecord{reason: "conflict", rec: &kgo.Record{Value: b}}
		}
		p.rec.Topic, p.rec.Key = topic, []byte(order)
		p.rec.Headers = []kgo.RecordHeader{{Key: "content-type", Value: []byte(workload.ContentType)}}
		out = append(out, p.rec)
		poison = append(poison, p)
		n++
	}
	require.Len(t, poison, 12, "every kind of poison injected twice")
	return out, poison
}

// poisonOrigins maps each poison record's origin (partition@offset, which
// the producer filled in) to its reason.
func poisonOrigins(poison []poisonRecord) map[string]string {
	out := map[string]string{}
	for _, p := range poison {
		out[fmt.Sprintf("%d@%d", p.rec.Partition, p.rec.Offset)] = p.reason
	}
	return out
}

// producePaced sends the stream in chunks of 250 every 150 ms (about
// 1,600 records a second) and returns the acknowledged records. The
// client's default partitioner hashes keys with murmur2, as Java's does.
func producePaced(t *testing.T, stream []*kgo.Record) []*kgo.Record {
	cl := kafkatest.Producer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for i := 0; i < len(stream); i += 250 {
		if err := cl.ProduceSync(ctx, stream[i:min(i+250, len(stream))]...).FirstErr(); err != nil {
			t.Errorf("producing: %v", err)
			return stream[:i]
		}
		time.Sleep(150 * time.Millisecond)
	}
	return stream
}

// fleet is n `orders run` processes; a supervisor restarts any that ends.
type fleet struct {
	t        *testing.T
	bin      string
	env      []string
	mu       sync.Mutex
	slot     []*proc
	started  int
	stopped  bool
	done     chan struct{}
	finished sync.WaitGroup
}

func newFleet(t *testing.T, bin string, env []string, n int) *fleet {
	f := &fleet{t: t, bin: bin, env: env, slot: make([]*proc, n), done: make(chan struct{})}
	for i := range n {
		f.slot[i] = f.start()
	}
	f.finished.Add(1)
	go f.supervise()
	t.Cleanup(f.stop)
	return f
}

func (f *fleet) start() *proc {
	f.started++
	return start(f.t, f.bin, f.env, "run")
}

func (f *fleet) supervise() {
	defer f.finished.Done()
	for {
		select {
		case <-f.done:
			return
		case <-time.After(200 * time.Millisecond):
		}
		f.mu.Lock()
		for i, p := range f.slot {
			if p.Exited() && !f.stopped {
				f.slot[i] = f.start()
			}
		}
		f.mu.Unlock()
	}
}

// killRandom SIGKILLs a running member; false when none was running.
func (f *fleet) killRandom(rng *rand.Rand) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	var live []*proc
	for _, p := range f.slot {
		if !p.Exited() {
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		return false
	}
	return live[rng.IntN(len(live))].Cmd.Process.Signal(syscall.SIGKILL) == nil
}

func (f *fleet) restarts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.started - len(f.slot)
}

// stop ends supervision and stops every member cleanly (SIGTERM: drain,
// commit, leave the group).
func (f *fleet) stop() {
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return
	}
	f.stopped = true
	close(f.done)
	procs := slices.Clone(f.slot)
	f.mu.Unlock()
	f.finished.Wait()
	for _, p := range procs {
		if !p.Exited() {
			_ = p.Cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range procs {
		p.Wait(f.t, time.Minute)
	}
}

// watchPositions samples the stored positions every 50 ms until stopped,
// and fails the test if any partition's position ever moves backwards.
func watchPositions(t *testing.T, db pgtest.DB, group, topic string) (stop func() int) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	samples := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		last := map[int32]int64{}
		for ctx.Err() == nil {
			rows, err := db.Pool.Query(ctx, `SELECT "partition", next_offset FROM consumer_offsets WHERE consumer_group = $1 AND topic = $2`, group, topic)
			if err == nil {
				for rows.Next() {
					var p int32
					var o int64
					if rows.Scan(&p, &o) == nil {
						if o < last[p] {
							t.Errorf("partition %d's stored position moved backwards: %d → %d", p, last[p], o)
						}
						last[p] = o
					}
				}
				rows.Close()
				samples++
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() int {
		cancel()
		wg.Wait()
		return samples
	}
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// buildOrders builds this module's binary once per test binary.
func buildOrders(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "orders-e2e-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "orders")
		out, err := exec.Command("go", "build", "-o", builtBin, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("building orders: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Dir(builtBin)) })
	return builtBin
}

// proc is a running orders process.
type proc = proctest.Proc

// start runs bin with args on a clean environment (PATH and HOME, then
// env), so a developer's EFFECTIVELY_* variables never leak in.
func start(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	return proctest.Start(t, bin, env, args...)
}

// mustRun runs a command to completion, requires exit code 0 and returns
// its stdout.
func mustRun(t *testing.T, bin string, env []string, args ...string) string {
	t.Helper()
	code, stdout, stderr := proctest.Run(t, bin, env, args...)
	if code != 0 {
		t.Fatalf("orders %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, proctest.Tail(stdout, 40), proctest.Tail(stderr, 40))
	}
	return stdout
}

func waitUntil(t *testing.T, what string, guard time.Duration, cond func() bool) {
	t.Helper()
	proctest.WaitUntil(t, what, guard, func(context.Context) bool { return cond() })
}

func envUint(t *testing.T, name string, def uint64) uint64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: want a non-negative integer", name, v)
	}
	return n
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
