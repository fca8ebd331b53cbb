package test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/examples/accounts"
	"github.com/effectively-io/effectively/examples/accounts/workload"
	"github.com/effectively-io/effectively/internal/kafkatest"
	"github.com/effectively-io/effectively/internal/pgtest"
)

// rig is one end-to-end setup: a schema, a topic, a group, and the
// environment a worker process needs to use them.
type rig struct {
	db    pgtest.DB
	topic string
	group string
	env   []string
	// brokers, when set, is a broker of the test's own; otherwise the
	// shared test broker.
	brokers []string
}

func newRig(t *testing.T, partitions int32, extraEnv ...string) *rig {
	t.Helper()
	r := &rig{db: pgtest.New(t, accounts.Migrations()), topic: kafkatest.NewTopic(t, partitions), group: kafkatest.NewGroup(t)}
	r.env = append([]string{
		"EFFECTIVELY_KAFKA_BROKERS=" + strings.Join(kafkatest.Brokers(t), ","),
		"EFFECTIVELY_KAFKA_GROUP=" + r.group,
		"EFFECTIVELY_KAFKA_TOPICS=" + r.topic,
		"EFFECTIVELY_POSTGRES_URL=" + r.db.URL,
		"EFFECTIVELY_HTTP_ADDR=",
		// Short sessions so a killed member's partitions move on quickly.
		"EFFECTIVELY_KAFKA_SESSION_TIMEOUT=6s",
		"EFFECTIVELY_KAFKA_REBALANCE_TIMEOUT=20s",
	}, extraEnv...)
	return r
}

// produce sends a generated workload to the rig's topic and returns what a
// correct worker ends with.
func (r *rig) produce(t *testing.T, cfg workload.Config) workload.Expected {
	t.Helper()
	opts := []kgo.Opt{kgo.DefaultProduceTopic(r.topic)}
	if r.brokers != nil {
		opts = append(opts, kgo.SeedBrokers(r.brokers...))
	}
	cl := kafkatest.Producer(t, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	recs, exp := r.records(t, cfg)
	for i := 0; i < len(recs); i += 1000 {
		require.NoError(t, cl.ProduceSync(ctx, recs[i:min(i+1000, len(recs))]...).FirstErr())
	}
	return exp
}

// records generates cfg's workload as records for the rig's topic.
func (r *rig) records(t *testing.T, cfg workload.Config) ([]*kgo.Record, workload.Expected) {
	t.Helper()
	return workloadRecords(t, r.topic, cfg)
}

// workloadRecords generates cfg's workload as records for topic.
func workloadRecords(t *testing.T, topic string, cfg workload.Config) ([]*kgo.Record, workload.Expected) {
	t.Helper()
	var recs []*kgo.Record
	exp, err := workload.Generate(cfg, func(rec workload.Record) error {
		recs = append(recs, workloadRecord(topic, rec))
		return nil
	})
	require.NoError(t, err)
	return recs, exp
}

// workloadRecord is one generated record as the producer contract has it.
func workloadRecord(topic string, rec workload.Record) *kgo.Record {
	return &kgo.Record{Topic: topic, Key: rec.Key, Value: rec.Value, Timestamp: rec.Timestamp,
		Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte(workload.ContentType)}}}
}

// worker starts a worker process with the rig's environment plus extra.
func (r *rig) worker(t *testing.T, extra ...string) *proc {
	t.Helper()
	return start(t, append(append([]string{}, r.env...), extra...), "run")
}

// startedWorker starts a worker and waits until it has started (its signal
// handling is in place), so a SIGTERM right after is a graceful stop, not
// the default action of a process still starting up.
func (r *rig) startedWorker(t *testing.T, extra ...string) *proc {
	t.Helper()
	w := r.worker(t, extra...)
	waitUntil(t, "the worker started", time.Minute, func(context.Context) bool {
		return strings.Contains(w.stderr.String(), "worker started") || w.exited()
	})
	return w
}

// applied is the sum of the stored positions: the records the group has
// gone past (offsets start at 0 and the workload has no gaps).
func (r *rig) applied(t *testing.T) int64 {
	return r.db.Count(t, `SELECT coalesce(sum(next_offset), 0) FROM consumer_offsets WHERE consumer_group = $1 AND topic = $2`, r.group, r.topic)
}

// positions reads every stored position.
func (r *rig) positions(ctx context.Context) (map[int32]int64, error) {
	rows, err := r.db.Pool.Query(ctx, `SELECT "partition", next_offset FROM consumer_offsets WHERE consumer_group = $1 AND topic = $2`, r.group, r.topic)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int32]int64{}
	for rows.Next() {
		var p int32
		var o int64
		if err := rows.Scan(&p, &o); err != nil {
			return nil, err
		}
		out[p] = o
	}
	return out, rows.Err()
}

// watchPositions samples the stored positions every 50 ms until stop is
// called, and fails the test if any partition's position ever moves
// backwards: a stale commit would show up here during the run, not only at
// the end.
func (r *rig) watchPositions(t *testing.T) (stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	samples := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		last := map[int32]int64{}
		for ctx.Err() == nil {
			pos, err := r.positions(ctx)
			if err == nil {
				samples++
				for p, o := range pos {
					if o < last[p] {
						t.Errorf("partition %d's stored position moved backwards: %d → %d", p, last[p], o)
					}
					last[p] = o
				}
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

// verify compares the database with the state computed from the produced
// events alone (workload.Verify): every event exactly one effect, every
// account at its latest version, every balance, no dead letters.
func (r *rig) verify(t *testing.T, exp workload.Expected) {
	t.Helper()
	rep, err := workload.Verify(context.Background(), r.db.Pool, exp, 0)
	require.NoError(t, err)
	require.Empty(t, rep.Problems, "the database differs from the expected effects")
	require.Equal(t, int64(exp.Distinct), rep.Claims["applied"]+rep.Claims["stale"])
}

func testWorkload(events, accounts int, seed uint64) workload.Config {
	return workload.Config{Accounts: accounts, Events: events, Duplicates: 0.1, OutOfOrder: 0.1, Seed: seed}
}

// waitApplied waits (a hang guard) until the group has gone past n records,
// restarting workers that exited (killed at a crash point) via restart.
func (r *rig) waitApplied(t *testing.T, n int, guard time.Duration) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%d records applied", n), guard, func(context.Context) bool { return r.applied(t) >= int64(n) })
}
