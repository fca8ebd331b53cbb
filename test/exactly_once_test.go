package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/internal/crashpoint"
	"github.com/effectively-io/effectively/internal/kafkatest"
)

// A worker SIGKILLed at each named crash point — before the PostgreSQL
// commit, between it and the Kafka commit, after both — and restarted: no
// effect is applied twice and no record is skipped.
func TestCrashAtEachPointLosesAndDoublesNothing(t *testing.T) {
	t.Parallel()
	for _, point := range []string{crashpoint.BeforeDBCommit, crashpoint.AfterDBCommit, crashpoint.AfterKafkaCommit} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			// Static membership: the restarted worker takes its partitions
			// back at once instead of waiting out the dead one's session.
			r := newRig(t, 3, "EFFECTIVELY_KAFKA_INSTANCE_ID=crash-"+point, "EFFECTIVELY_CONSUMER_BATCH_MAX_RECORDS=40")
			exp := r.produce(t, testWorkload(4000, 200, 7))
			rng := rand.New(rand.NewPCG(1, uint64(len(point))))
			kills := 0
			stopWatch := r.watchPositions(t)
			deadline := time.Now().Add(4 * time.Minute) // hang guard
			for r.applied(t) < int64(exp.Records) {
				w := r.startedWorker(t, fmt.Sprintf("%s=%s:%d", crashpoint.EnvVar, point, 1+rng.IntN(8)))
				if untilCrashOrDone(t, w, point, deadline, func() bool { return r.applied(t) >= int64(exp.Records) }) {
					kills++
				}
			}
			samples := stopWatch()
			t.Logf("%s: %d kills, %d position samples", point, kills, samples)
			require.GreaterOrEqual(t, kills, 5, "the test must actually crash the worker")
			r.verify(t, exp)
		})
	}
}

// Three workers in one group while members leave and join over and over
// (SIGTERM and SIGKILL, restarts): every event has exactly one effect and no
// partition's stored position ever moves backwards.
func TestThreeWorkersWithMembersJoiningAndLeaving(t *testing.T) {
	t.Parallel()
	r := newRig(t, 6, "EFFECTIVELY_CONSUMER_BATCH_MAX_RECORDS=50")
	// The records arrive in chunks while members come and go, so a fast
	// worker cannot finish before the churn has happened.
	recs, exp := r.records(t, testWorkload(20000, 1000, 11))
	const chunks = 8
	cl := kafkatest.Producer(t, kgo.DefaultProduceTopic(r.topic))
	produceChunk := func(i int) {
		lo, hi := i*len(recs)/chunks, (i+1)*len(recs)/chunks
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, cl.ProduceSync(ctx, recs[lo:hi]...).FirstErr())
	}
	produceChunk(0)
	stopWatch := r.watchPositions(t)

	workers := []*proc{r.startedWorker(t), r.startedWorker(t), r.startedWorker(t)}
	rng := rand.New(rand.NewPCG(3, 4))
	churn := 0
	deadline := time.Now().Add(4 * time.Minute) // hang guard
	for churn < chunks || (r.applied(t) < int64(exp.Records) && churn < 12) {
		require.True(t, time.Now().Before(deadline))
		if churn+1 < chunks {
			produceChunk(churn + 1)
		}
		time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
		i := rng.IntN(len(workers))
		if rng.IntN(2) == 0 {
			workers[i].signal(t, syscall.SIGTERM)
			require.Equal(t, 0, workers[i].wait(t, time.Minute), "a SIGTERMed worker exits cleanly")
		} else {
			workers[i].signal(t, syscall.SIGKILL)
			workers[i].wait(t, time.Minute)
		}
		workers[i] = r.startedWorker(t)
		churn++
	}
	r.waitApplied(t, exp.Records, 3*time.Minute)
	for _, w := range workers {
		w.signal(t, syscall.SIGTERM)
		require.Equal(t, 0, w.wait(t, time.Minute))
	}
	samples := stopWatch()
	t.Logf("%d membership changes, %d position samples", churn, samples)
	require.GreaterOrEqual(t, churn, 5, "members must actually come and go during the run")
	r.verify(t, exp)
}

// A member that is paused (SIGSTOP) while it owns partitions loses them to
// the others; when it wakes up it still holds fetched records and perhaps a
// batch in flight. It must not apply anything twice, nor rewind the new
// owners.
func TestStaleMemberAfterSIGSTOPDoesNoHarm(t *testing.T) {
	t.Parallel()
	r := newRig(t, 4, "EFFECTIVELY_CONSUMER_BATCH_MAX_RECORDS=50")
	exp := r.produce(t, testWorkload(12000, 600, 13))
	stopWatch := r.watchPositions(t)

	zombie := r.worker(t)
	waitUntil(t, "the first member applies something", time.Minute, func(context.Context) bool { return r.applied(t) > 0 })
	zombie.signal(t, syscall.SIGSTOP)
	stoppedAt := r.applied(t)
	other := r.worker(t)
	// The paused member's session expires (6 s) and the other takes over
	// everything and finishes.
	r.waitApplied(t, exp.Records, 3*time.Minute)
	require.Less(t, stoppedAt, int64(exp.Records), "the zombie must be stopped mid-run")

	zombie.signal(t, syscall.SIGCONT)
	// Give the woken member time to act on what it held: finish its batch,
	// try to commit, learn it was fenced, rejoin.
	time.Sleep(8 * time.Second)
	for _, w := range []*proc{zombie, other} {
		w.signal(t, syscall.SIGTERM)
		require.Equal(t, 0, w.wait(t, time.Minute))
	}
	t.Logf("zombie stopped at %d of %d records; %d position samples", stoppedAt, exp.Records, stopWatch())
	r.verify(t, exp)
}

// Duplicates through the real broker: a workload with re-sent records
// (often in the same batch as their original) and disorder, then the whole
// workload produced again at new offsets. Every event has exactly one
// effect, the second pass changes nothing, and every record is accounted
// for: claims by disposition + duplicates the worker counted = records
// produced.
func TestDuplicatesThroughTheBrokerHaveOneEffect(t *testing.T) {
	t.Parallel()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	r := newRig(t, 4, "EFFECTIVELY_HTTP_ADDR="+addr)
	exp := r.produce(t, testWorkload(5000, 200, 41))
	require.Positive(t, exp.Duplicates)
	w := r.startedWorker(t)
	r.waitApplied(t, exp.Records, 2*time.Minute)
	r.verify(t, exp)
	before := digest(t, r)

	r.produce(t, testWorkload(5000, 200, 41))
	r.waitApplied(t, 2*exp.Records, 2*time.Minute)
	r.verify(t, exp)
	require.Equal(t, before, digest(t, r), "the second pass changed no effect")

	d := dispositions(t, addr)
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
	claims := r.db.Count(t, `SELECT count(*) FROM effectively_claims`)
	require.Equal(t, int64(exp.Distinct), claims)
	require.Equal(t, float64(exp.Duplicates+exp.Records), d["duplicate"], "the first pass's re-sends and every record of the second")
	require.Equal(t, float64(claims), d["applied"]+d["stale"])
	require.Equal(t, float64(2*exp.Records), float64(claims)+d["duplicate"], "every record accounted for")
}

// untilCrashOrDone watches w, a worker started with a crash point: it
// returns true once w has killed itself at point, or false when done()
// holds and w stops on SIGTERM. A worker that is crashing at its point
// just as it finishes (its last batch committed right before) dies by its
// own SIGKILL instead: that is a kill too.
func untilCrashOrDone(t *testing.T, w *proc, point string, deadline time.Time, done func() bool) bool {
	t.Helper()
	for {
		require.True(t, time.Now().Before(deadline), "not done before the hang guard")
		if w.exited() {
			require.Contains(t, w.stderr.String(), "crashpoint: killing the process at "+point)
			return true
		}
		if done() {
			_ = w.cmd.Process.Signal(syscall.SIGTERM)
			if code := w.wait(t, time.Minute); code != 0 {
				require.Contains(t, w.stderr.String(), "crashpoint: killing the process at "+point, "exit %d", code)
				return true
			}
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
