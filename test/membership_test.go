package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/examples/accounts/workload"
	"github.com/effectively-io/effectively/internal/kafkatest"
)

// Shape of the membership measurement.
const (
	stallPartitions   = 6
	stallWorkers      = 3
	stallVictim       = 1   // the worker that is SIGKILLed and restarted
	stallRate         = 500 // records per second, for the whole scenario
	stallSampleEvery  = 50 * time.Millisecond
	stallSteadyFor    = 3 * time.Second // all members consuming this long before the kill
	stallThreshold    = time.Second     // a partition "stalled" when it resumed later than this
	stallWorkloadSpan = 10 * time.Minute
)

// stallResult is one scenario's measurement.
type stallResult struct {
	scenario         string
	sessionTimeout   time.Duration
	rebalanceTimeout time.Duration
	killed           []int32                 // the victim's partitions when it was killed
	stalls           map[int32]time.Duration // kill → the partition's stored position next advances
	assigned         time.Duration           // kill → the restarted worker's first assignment
	records          int
}

// With three workers and the default 45 s session timeout, a SIGKILLed
// member that restarts at once still leaves its partitions idle until the
// group rebalances them. A dynamic member restarts as a new member: the
// coordinator cannot finish the join until the dead member's session expires
// (it waits for every known member), so the stall is about the session
// timeout. A static member (kafka.instance_id) restarts as the same member:
// the coordinator hands it its old assignment without a rebalance, so the
// stall is the restart. The test measures both and asserts only correctness
// (every partition resumes; every event has exactly one effect); the times
// are printed, not asserted.
//
// It runs the two scenarios one after the other and is not parallel with the
// other tests of the package: they would share two cores and blur the
// numbers.
func TestStaticMembershipStall(t *testing.T) {
	if os.Getenv("EFFECTIVELY_BENCH_MEMBERSHIP") != "1" {
		t.Skip("measurement; runs in make bench (EFFECTIVELY_BENCH_MEMBERSHIP=1)")
	}
	var results []stallResult
	for i, static := range []bool{false, true} {
		name := map[bool]string{false: "dynamic", true: "static"}[static]
		t.Run(name, func(t *testing.T) {
			results = append(results, measureStall(t, name, static, uint64(41+i)))
		})
	}
	table := stallTable(results)
	t.Logf("\n%s", table)
	fmt.Printf("\nSIGKILL + immediate restart of 1 of %d workers, %d partitions, %d records/s, classic protocol, cooperative-sticky\n"+
		"(stall: kill → the partition's stored position next advances; floor ≈ 150 ms: baseline read 100 ms after the kill, %s sampling)\n%s\n",
		stallWorkers, stallPartitions, stallRate, stallSampleEvery, table)
}

func measureStall(t *testing.T, scenario string, static bool, seed uint64) stallResult {
	defaults := config.Default().Kafka
	res := stallResult{scenario: scenario, sessionTimeout: defaults.SessionTimeout, rebalanceTimeout: defaults.RebalanceTimeout}

	r := newRig(t, stallPartitions)
	// The rig shortens the session (6 s) and rebalance (20 s) timeouts for
	// the fault tests; this measurement is about the defaults. os/exec keeps
	// the last of duplicate keys, but dropping them says what is meant.
	env := withoutEnv(r.env, "EFFECTIVELY_KAFKA_SESSION_TIMEOUT", "EFFECTIVELY_KAFKA_REBALANCE_TIMEOUT")
	workerEnv := func(i int) []string {
		e := slices.Clone(env)
		if static {
			e = append(e, fmt.Sprintf("EFFECTIVELY_KAFKA_INSTANCE_ID=w%d", i))
		}
		return e
	}

	stopWatch := r.watchPositions(t)
	stopProducing := producePaced(t, r.topic, workload.Config{
		Accounts: 2000, Events: int(stallRate * stallWorkloadSpan.Seconds()),
		Duplicates: 0.1, OutOfOrder: 0.1, Seed: seed,
	}, stallRate)
	tr := trackPositions(t, r)

	workers := make([]*proc, stallWorkers)
	for i := range workers {
		workers[i] = start(t, workerEnv(i), "run")
	}

	// Steady state: every member owns its share and every partition's
	// position has been moving, for stallSteadyFor without interruption.
	var steadySince time.Time
	waitUntil(t, "all members consuming all partitions", 2*time.Minute, func(context.Context) bool {
		ok := tr.allAdvancedWithin(stallPartitions, time.Second)
		for _, w := range workers {
			ok = ok && len(ownedPartitions(w.stderr.String())) == stallPartitions/stallWorkers
		}
		switch {
		case !ok:
			steadySince = time.Time{}
		case steadySince.IsZero():
			steadySince = time.Now()
		}
		return ok && time.Since(steadySince) >= stallSteadyFor
	})

	victim := workers[stallVictim]
	res.killed = ownedPartitions(victim.stderr.String())
	require.NotEmpty(t, res.killed, "the killed worker must own partitions")
	killAt := time.Now()
	victim.signal(t, syscall.SIGKILL)
	victim.wait(t, time.Minute)
	// What Kubernetes does when a pod's container dies: the same pod (and
	// name, the instance ID) comes back; without static membership it joins
	// as a new member.
	workers[stallVictim] = start(t, workerEnv(stallVictim), "run")
	restarted := workers[stallVictim]

	// The baseline is read after the victim is gone (plus a moment for a
	// COMMIT it sent just before dying), so that its last batch is not
	// mistaken for a resumption. The restarted process cannot have applied
	// anything yet: it has not even joined.
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	baseline, err := r.positions(ctx)
	cancel()
	require.NoError(t, err)
	tr.arm(killAt, baseline)

	guard := res.sessionTimeout + res.rebalanceTimeout + 2*time.Minute
	waitUntil(t, "every partition's position to advance after the kill", guard, func(context.Context) bool {
		if res.assigned == 0 && len(ownedPartitions(restarted.stderr.String())) > 0 {
			res.assigned = time.Since(killAt)
		}
		return tr.allResumed(stallPartitions)
	})
	res.stalls = tr.stalls()
	if res.assigned == 0 {
		res.assigned = time.Since(killAt) // assigned between the last poll and the resumption
	}
	logGroupEvents(t, "restarted worker", restarted.stderr.String(), killAt)
	logGroupEvents(t, "surviving worker", workers[(stallVictim+1)%stallWorkers].stderr.String(), killAt)

	exp := stopProducing()
	res.records = exp.Records
	r.waitApplied(t, exp.Records, 3*time.Minute)
	for _, w := range workers {
		w.signal(t, syscall.SIGTERM)
	}
	for _, w := range workers {
		require.Equal(t, 0, w.wait(t, time.Minute), "a SIGTERMed worker exits cleanly")
	}
	samples := stopWatch()
	t.Logf("%s: %d records, %d position samples, stalls %v", scenario, exp.Records, samples, res.stalls)
	r.verify(t, exp)
	return res
}

// withoutEnv returns env without the entries for the given keys.
func withoutEnv(env []string, keys ...string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(keys, k)
	})
}

// producePaced sends cfg's stream to topic at rate records per second until
// the returned stop is called, then flushes and returns the Expected state
// of exactly what was sent.
func producePaced(t *testing.T, topic string, cfg workload.Config, rate int) (stop func() workload.Expected) {
	t.Helper()
	gen, err := workload.NewGenerator(cfg)
	require.NoError(t, err)
	cl := kafkatest.Producer(t, kgo.DefaultProduceTopic(topic))
	var (
		mu       sync.Mutex
		firstErr error
	)
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			if firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
		}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	begin := time.Now()
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		sent := 0
		for {
			// Catch up to the rate rather than sending a fixed amount per
			// tick, so a slow tick (two busy cores) does not lower it.
			for due := int(time.Since(begin).Seconds() * float64(rate)); sent < due; sent++ {
				rec, ok := gen.Next()
				if !ok {
					return
				}
				cl.Produce(context.Background(), workloadRecord(topic, rec), promise)
			}
			select {
			case <-quit:
				return
			case <-tick.C:
			}
		}
	}()
	return func() workload.Expected {
		close(quit)
		<-done
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, cl.Flush(ctx))
		mu.Lock()
		defer mu.Unlock()
		require.NoError(t, firstErr, "producing")
		exp := gen.Expected()
		t.Logf("produced %d records in %s (%.0f/s)", exp.Records, time.Since(begin).Round(time.Second), float64(exp.Records)/time.Since(begin).Seconds())
		return exp
	}
}

// positionTracker samples the stored positions every stallSampleEvery and
// remembers when each partition last advanced and, once armed at a kill,
// when each first advanced past its position at the kill.
type positionTracker struct {
	mu       sync.Mutex
	last     map[int32]int64
	advanced map[int32]time.Time
	killAt   time.Time
	baseline map[int32]int64     // nil until armed
	resumed  map[int32]time.Time // first sample past the baseline
}

func trackPositions(t *testing.T, r *rig) *positionTracker {
	t.Helper()
	tr := &positionTracker{last: map[int32]int64{}, advanced: map[int32]time.Time{}, resumed: map[int32]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			// The query's snapshot is taken when it starts: an advance it
			// sees happened before now.
			at := time.Now()
			if pos, err := r.positions(ctx); err == nil {
				tr.observe(at, pos)
			}
			select {
			case <-ctx.Done():
			case <-time.After(stallSampleEvery):
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return tr
}

func (tr *positionTracker) observe(at time.Time, pos map[int32]int64) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for p, o := range pos {
		if o > tr.last[p] {
			tr.advanced[p] = at
		}
		tr.last[p] = o
		if tr.baseline != nil && o > tr.baseline[p] {
			if _, ok := tr.resumed[p]; !ok {
				tr.resumed[p] = at
			}
		}
	}
}

// allAdvancedWithin reports whether n partitions each advanced within d.
func (tr *positionTracker) allAdvancedWithin(n int, d time.Duration) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	fresh := 0
	for _, at := range tr.advanced {
		if time.Since(at) <= d {
			fresh++
		}
	}
	return fresh >= n
}

// arm starts the stall measurement: from killAt, until each partition's
// position exceeds its baseline.
func (tr *positionTracker) arm(killAt time.Time, baseline map[int32]int64) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.killAt, tr.baseline = killAt, baseline
}

func (tr *positionTracker) allResumed(n int) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.resumed) >= n
}

func (tr *positionTracker) stalls() map[int32]time.Duration {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := make(map[int32]time.Duration, len(tr.resumed))
	for p, at := range tr.resumed {
		out[p] = at.Sub(tr.killAt)
	}
	return out
}

// workerLogLine is the part of a worker's JSON log line the measurement
// reads.
type workerLogLine struct {
	Time      time.Time `json:"time"`
	Logger    string    `json:"logger"`
	Msg       string    `json:"msg"`
	Partition *int32    `json:"partition"`
	Fenced    int       `json:"fenced"`
}

func parseLogLines(stderr string) []workerLogLine {
	var out []workerLogLine
	for _, line := range strings.Split(stderr, "\n") {
		var l workerLogLine
		if json.Unmarshal([]byte(line), &l) == nil {
			out = append(out, l)
		}
	}
	return out
}

// ownedPartitions reads a worker's log for the partitions it owns now:
// assigned and not revoked since (one topic per rig).
func ownedPartitions(stderr string) []int32 {
	owned := map[int32]bool{}
	for _, l := range parseLogLines(stderr) {
		if l.Partition == nil {
			continue
		}
		switch l.Msg {
		case "partition assigned":
			owned[*l.Partition] = true
		case "partition revoked":
			delete(owned, *l.Partition)
		}
	}
	out := make([]int32, 0, len(owned))
	for p := range owned {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// logGroupEvents logs a worker's franz-go and assignment lines since a
// moment, relative to it: the timeline of the rejoin.
func logGroupEvents(t *testing.T, who, stderr string, since time.Time) {
	t.Helper()
	var b strings.Builder
	n := 0
	for _, line := range strings.Split(stderr, "\n") {
		var l workerLogLine
		if json.Unmarshal([]byte(line), &l) != nil || l.Time.Before(since) {
			continue
		}
		if !strings.HasSuffix(l.Logger, "kafka") && l.Msg != "partition assigned" && l.Msg != "partition revoked" {
			continue
		}
		if n++; n > 40 {
			b.WriteString("  …\n")
			break
		}
		fmt.Fprintf(&b, "  +%6.2fs %s\n", l.Time.Sub(since).Seconds(), line)
	}
	t.Logf("%s, group events after the kill:\n%s", who, b.String())
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func stallTable(results []stallResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-9s %-9s %-11s %-10s %-10s %-14s %-12s %-13s %-15s %s\n",
		"scenario", "session", "rebalance", "killed", "max stall", "median killed", "max others", "restart→own", "stalled >1s", "records")
	for _, r := range results {
		var killed, others []time.Duration
		var stalled []int32
		var maxAll time.Duration
		for p, d := range r.stalls {
			maxAll = max(maxAll, d)
			if slices.Contains(r.killed, p) {
				killed = append(killed, d)
			} else {
				others = append(others, d)
			}
			if d > stallThreshold {
				stalled = append(stalled, p)
			}
		}
		slices.Sort(stalled)
		var maxOthers time.Duration
		for _, d := range others {
			maxOthers = max(maxOthers, d)
		}
		fmt.Fprintf(&b, "%-9s %-9s %-11s %-10s %-10s %-14s %-12s %-13s %-15s %d\n",
			r.scenario, r.sessionTimeout, r.rebalanceTimeout, fmt.Sprint(r.killed),
			maxAll.Round(10*time.Millisecond), median(killed).Round(10*time.Millisecond),
			maxOthers.Round(10*time.Millisecond), r.assigned.Round(10*time.Millisecond),
			fmt.Sprint(stalled), r.records)
	}
	return b.String()
}
