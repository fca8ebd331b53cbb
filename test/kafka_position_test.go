package test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/internal/cetest"
	"github.com/effectively-io/effectively/internal/crashpoint"
	"github.com/effectively-io/effectively/internal/kafkatest"
)

// Kafka sees the true position. Worker A applies a batch of partition a to
// PostgreSQL and is SIGKILLed before its Kafka commit (the after_db_commit
// crash point), so partition a is fully applied while Kafka has no commit
// for it. The rebalance moves a to worker B, which is already running, and
// no record is produced after: B commits PostgreSQL's position to Kafka on
// its own. Checked through Kafka's offset API, not the worker's bookkeeping;
// without the commit, kafka-consumer-groups, Burrow and KEDA would read the
// batch as lag forever.
func TestMovedIdlePartitionCommitsItsStoredPosition(t *testing.T) {
	t.Parallel()
	const records = 40
	r := newRig(t, 2)
	wa := r.startedWorker(t, crashpoint.EnvVar+"="+crashpoint.AfterDBCommit)
	waitUntil(t, "A owns both partitions", time.Minute, func(context.Context) bool { return len(ownedPartitions(wa.stderr.String())) == 2 })
	wb := r.startedWorker(t)
	waitUntil(t, "A and B own one partition each", 2*time.Minute, func(context.Context) bool {
		return len(ownedPartitions(wa.stderr.String())) == 1 && len(ownedPartitions(wb.stderr.String())) == 1
	})
	a := ownedPartitions(wa.stderr.String())[0]

	// One producer batch (linger) of accounts keyed into partition a, so A
	// fetches and applies them as one batch.
	recs := make([]*kgo.Record, 0, records)
	part := kgo.StickyKeyPartitioner(nil).ForTopic(r.topic)
	for i := 0; len(recs) < records; i++ {
		id := fmt.Sprintf("acct-%03d", i)
		rec := cetest.Account(r.topic, "open-"+id, "account.opened", id, 1, "n-"+id)
		if int32(part.Partition(rec, 2)) == a {
			recs = append(recs, rec)
		}
	}
	prod := kafkatest.Producer(t, kgo.ProducerLinger(time.Second))
	require.NoError(t, prod.ProduceSync(context.Background(), recs...).FirstErr())

	require.Equal(t, -1, wa.wait(t, 2*time.Minute), "A is killed at its crash point")
	require.Contains(t, wa.stderr.String(), "crashpoint: killing the process at "+crashpoint.AfterDBCommit)
	killed := time.Now()
	// The state the issue describes: PostgreSQL holds the whole partition,
	// Kafka's commit is missing.
	stored, err := r.positions(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(records), stored[a], "setup: A applied all of partition %d in its one batch", a)
	committed := r.kafkaCommitted(t, r.group)
	_, has := committed[a]
	require.False(t, has, "setup: A died before its Kafka commit, yet Kafka holds %d", committed[a])

	waitUntil(t, "Kafka's commit of the moved partition to reach PostgreSQL's position", 90*time.Second, func(context.Context) bool {
		return r.kafkaCommitted(t, r.group)[a] == stored[a]
	})
	caughtUp := time.Since(killed)
	require.Equal(t, []int32{0, 1}, ownedPartitions(wb.stderr.String()), "B owns both partitions now")
	// B logs the commit once the broker has acknowledged it, which can be
	// just after this test read it from the broker.
	waitUntil(t, "B to log its commit of the stored position", 30*time.Second, func(context.Context) bool {
		return strings.Contains(wb.stderr.String(), "committed the position stored in PostgreSQL to Kafka")
	})
	t.Logf("Kafka's commit of partition %d reached the stored position %d %s after A was killed (kafka.session_timeout 6 s)", a, stored[a], caughtUp.Round(100*time.Millisecond))

	// Nothing was produced to get there: the end offsets are where A left
	// them, and `effectively status` shows PostgreSQL's and Kafka's
	// positions equal, with no lag.
	ends, err := kafkatest.Admin(t).ListEndOffsets(context.Background(), r.topic)
	require.NoError(t, err)
	end, ok := ends.Lookup(r.topic, a)
	require.True(t, ok)
	require.Equal(t, int64(records), end.Offset)
	requireStatusInLine(t, r, map[int32]int64{a: records, 1 - a: -1})

	wb.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, wb.wait(t, time.Minute))
	require.Equal(t, stored[a], r.kafkaCommitted(t, r.group)[a], "still there after B left")
	require.Equal(t, int64(records), r.db.Count(t, `SELECT count(*) FROM effectively_claims`), "each record applied once")
}

// Kafka's commits rewound with Kafka's own tools (as `kafka-consumer-groups
// --reset-offsets --to-earliest` would) do not rewind the worker, and no
// longer leave Kafka wrong either: a member that starts with nothing new to
// apply commits PostgreSQL's positions, under both group protocols.
func TestKafkaRewoundWithItsOwnToolsFollowsPostgres(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"classic", "consumer"} {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, 3, "EFFECTIVELY_KAFKA_GROUP_PROTOCOL="+protocol)
			exp := r.produce(t, testWorkload(300, 30, 71))
			r.fullPass(t, exp.Records)
			stored, err := r.positions(context.Background())
			require.NoError(t, err)
			require.Equal(t, stored, r.kafkaCommitted(t, r.group), "setup: a graceful stop leaves Kafka in line")

			rewind := kadm.Offsets{}
			for p := range stored {
				rewind.Add(kadm.Offset{Topic: r.topic, Partition: p, At: 0, LeaderEpoch: -1})
			}
			resp, err := kafkatest.Admin(t).CommitOffsets(context.Background(), r.group, rewind)
			require.NoError(t, err)
			require.NoError(t, resp.Error())
			require.NotEqual(t, stored, r.kafkaCommitted(t, r.group), "setup: Kafka rewound")

			w := r.startedWorker(t)
			waitUntil(t, "Kafka's commits to reach PostgreSQL's positions", 90*time.Second, func(context.Context) bool {
				return maps.Equal(stored, r.kafkaCommitted(t, r.group))
			})
			requireStatusInLine(t, r, stored)
			w.signal(t, syscall.SIGTERM)
			require.Equal(t, 0, w.wait(t, time.Minute))
			after, err := r.positions(context.Background())
			require.NoError(t, err)
			require.Equal(t, stored, after, "nothing was applied again: the worker resumed from PostgreSQL")
			require.Contains(t, w.stderr.String(), "committed the position stored in PostgreSQL to Kafka")
		})
	}
}

// requireStatusInLine checks `effectively status --json`: each partition in
// want shows STORED and COMMITTED equal to its value (-1: neither exists)
// and no lag.
func requireStatusInLine(t *testing.T, r *rig, want map[int32]int64) {
	t.Helper()
	st := r.status(t)
	require.Equal(t, "ok", st.Kafka)
	require.Equal(t, "ok", st.Postgres)
	seen := map[int32]bool{}
	for _, p := range st.Partitions {
		o, ok := want[p.Partition]
		if !ok {
			continue
		}
		seen[p.Partition] = true
		if o < 0 {
			require.Nil(t, p.Stored, "partition %d", p.Partition)
			require.Nil(t, p.Committed, "partition %d", p.Partition)
			continue
		}
		require.NotNil(t, p.Stored, "partition %d", p.Partition)
		require.NotNil(t, p.Committed, "partition %d", p.Partition)
		require.Equal(t, o, *p.Stored, "partition %d: STORED", p.Partition)
		require.Equal(t, o, *p.Committed, "partition %d: COMMITTED", p.Partition)
		require.NotNil(t, p.Lag)
		require.Zero(t, *p.Lag, "partition %d: LAG", p.Partition)
	}
	require.Len(t, seen, len(want), "status shows every partition")
}
