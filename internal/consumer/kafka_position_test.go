package consumer_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"

	"github.com/effectively-io/effectively/internal/consumer"
)

// positionStack is a kfake cluster with topic "t" of two partitions, ten
// records in each, and an admin client; commits lists every offset a member
// of group "g" committed, per partition, in the order the cluster received
// them.
type positionStack struct {
	cluster *kfake.Cluster
	adm     *kadm.Client
	reg     *prometheus.Registry

	mu      sync.Mutex
	commits map[int32][]int64
}

func newPositionStack(t *testing.T) *positionStack {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic("t"))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	for p := int32(0); p < 2; p++ {
		recs := make([]*kgo.Record, 10)
		for i := range recs {
			recs[i] = &kgo.Record{Partition: p, Value: []byte(fmt.Sprint(i))}
		}
		require.NoError(t, cl.ProduceSync(context.Background(), recs...).FirstErr())
	}
	s := &positionStack{cluster: cluster, adm: kadm.NewClient(cl), reg: prometheus.NewRegistry(), commits: map[int32][]int64{}}
	// Observe, not fault: every commit request proceeds as sent. When runs
	// for each entity a request names; a request is recorded once.
	var last kmsg.Request
	cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Count: -1, Observe: true, When: func(req kmsg.Request) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		commit := req.(*kmsg.OffsetCommitRequest)
		if req == last || commit.MemberID == "" { // outsiders' commits are the test's own
			return true
		}
		last = req
		for _, topic := range commit.Topics {
			for _, p := range topic.Partitions {
				s.commits[p.Partition] = append(s.commits[p.Partition], p.Offset)
			}
		}
		return true
	}})
	return s
}

// commitAsOutsider commits offsets for the group while it has no member (as
// `kafka-consumer-groups --reset-offsets` or a rewind's Kafka step would).
func (s *positionStack) commitAsOutsider(t *testing.T, offsets map[int32]int64) {
	t.Helper()
	os := kadm.Offsets{}
	for p, o := range offsets {
		os.Add(kadm.Offset{Topic: "t", Partition: p, At: o, LeaderEpoch: -1})
	}
	resp, err := s.adm.CommitOffsets(context.Background(), "g", os)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
}

// committed reads the group's committed offset of p through Kafka's own
// offset API (-1: none).
func (s *positionStack) committed(t *testing.T, p int32) int64 {
	t.Helper()
	offs, err := s.adm.FetchOffsets(context.Background(), "g")
	require.NoError(t, err)
	if o, ok := offs.Lookup("t", p); ok && o.Err == nil {
		return o.At
	}
	return -1
}

func (s *positionStack) sent(p int32) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.commits[p])
}

func (s *positionStack) start(t *testing.T, a consumer.Applier, tune func(*consumer.Options)) (stop func()) {
	t.Helper()
	opts := consumer.Options{
		Brokers: s.cluster.ListenAddrs(), Group: "g", Topics: []string{"t"}, BatchMaxRecords: 100,
		SessionTimeout: 6 * time.Second, RebalanceTimeout: 5 * time.Second,
		RetryInitial: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond,
		Logger: zaptest.NewLogger(t), Metrics: consumer.NewMetrics(s.reg),
	}
	if tune != nil {
		tune(&opts)
	}
	c, err := consumer.New(withDefaults(opts), a)
	require.NoError(t, err)
	c.Topics(map[string]int{"t": 2}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return func() {
		cancel()
		require.NoError(t, <-done)
	}
}

// counter sums the counter name's series.
func (s *positionStack) counter(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := s.reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// A partition fully applied to PostgreSQL whose Kafka commit was missed (the
// previous owner crashed between its database commit and Kafka's) gets the
// stored position committed to Kafka when it is assigned, with no record to
// apply; a partition whose Kafka commit matches is not committed again until
// it applies. (kfake: fast and deterministic.)
func TestAssignedPartitionCommitsStoredPositionWithoutRecords(t *testing.T) {
	t.Parallel()
	s := newPositionStack(t)
	s.commitAsOutsider(t, map[int32]int64{1: 4})
	a := newMemApplier()
	a.positions["t"] = map[int32]int64{0: 10, 1: 4} // 0: all applied, Kafka knows nothing; 1: Kafka agrees
	stop := s.start(t, a, nil)
	defer stop()

	waitFor(t, "Kafka's commits to reach the stored positions", func() bool {
		return s.committed(t, 0) == 10 && s.committed(t, 1) == 10
	})
	a.mu.Lock()
	require.Empty(t, a.applied[0], "partition 0 was already applied: its commit came without a batch")
	require.Equal(t, []int64{4, 5, 6, 7, 8, 9}, a.applied[1])
	a.mu.Unlock()
	require.Equal(t, []int64{10}, s.sent(0), "one commit of the stored position")
	require.Equal(t, int64(10), slices.Max(s.sent(1)))
	require.Equal(t, 1.0, s.counter(t, "effectively_kafka_position_commits_total"), "only partition 0 needed a commit without a batch")
}

// A rewind whose Kafka step failed leaves Kafka's commit ahead of the
// stored position: the member commits the stored position (where it
// resumes) before it applies anything, then only ever moves forward.
func TestRewoundPositionReachesKafkaBeforeAnyBatch(t *testing.T) {
	t.Parallel()
	s := newPositionStack(t)
	s.commitAsOutsider(t, map[int32]int64{0: 8})
	a := &blockingApplier{memApplier: newMemApplier(), blocked: 0, release: make(chan struct{})}
	a.positions["t"] = map[int32]int64{0: 3}
	stop := s.start(t, a, nil)
	defer stop()

	waitFor(t, "Kafka's commit to reach the rewound position", func() bool { return s.committed(t, 0) == 3 })
	a.mu.Lock()
	require.Empty(t, a.applied[0], "the batch is still held")
	a.mu.Unlock()
	close(a.release)
	waitFor(t, "the partition applied and committed", func() bool { return s.committed(t, 0) == 10 })
	sent := s.sent(0)
	require.Equal(t, int64(3), sent[0], "the first commit is the stored position")
	require.True(t, slices.IsSorted(sent), "commits never move backwards: %v", sent)
	a.mu.Lock()
	require.Equal(t, []int64{3, 4, 5, 6, 7, 8, 9}, a.applied[0])
	a.mu.Unlock()
}

// A Kafka commit that fails after the batch committed to PostgreSQL is
// retried with backoff, though no record follows: the partition does not
// show lag in Kafka's tools until its next record.
func TestFailedCommitIsRetriedWithoutNewRecords(t *testing.T) {
	t.Parallel()
	s := newPositionStack(t)
	failing := s.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: "g", Err: kerr.GroupAuthorizationFailed, Count: -1})
	a := newMemApplier()
	stop := s.start(t, a, nil)
	defer stop()

	// Each partition's commit failed at least once (two requests at least).
	waitFor(t, "both partitions applied, their commits failing", func() bool { return a.total() == 20 && failing.Hits() >= 2 })
	require.Equal(t, int64(-1), s.committed(t, 0))
	failing.Remove() // the ACL is fixed; nothing more is produced
	waitFor(t, "the commits retried", func() bool { return s.committed(t, 0) == 10 && s.committed(t, 1) == 10 })
	require.GreaterOrEqual(t, s.counter(t, "effectively_kafka_commit_failures_total"), 2.0)
	a.mu.Lock()
	require.Len(t, a.applied[0], 10, "nothing applied twice")
	require.Len(t, a.applied[1], 10, "nothing applied twice")
	a.mu.Unlock()
}

// Kafka's committed offset found behind what the member committed (a stale
// member's late commit rewinds the new owner's, which a real broker
// accepts) is committed again within a lag interval, with no record to
// apply. Here the cluster rewrites the member's own last commit to offset
// 2 before storing it, so the member believes Kafka holds 10 while Kafka
// holds 2.
func TestRewoundKafkaCommitIsRepaired(t *testing.T) {
	t.Parallel()
	s := newPositionStack(t)
	var once sync.Once
	s.cluster.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		for ti, topic := range req.(*kmsg.OffsetCommitRequest).Topics {
			for pi, p := range topic.Partitions {
				if p.Partition == 0 && p.Offset == 10 {
					once.Do(func() { req.(*kmsg.OffsetCommitRequest).Topics[ti].Partitions[pi].Offset = 2 })
				}
			}
		}
		s.cluster.KeepControl()
		return nil, nil, false // the cluster handles the (rewritten) request
	})
	a := newMemApplier()
	stop := s.start(t, a, func(o *consumer.Options) { o.LagInterval = 200 * time.Millisecond })
	defer stop()

	waitFor(t, "both partitions applied", func() bool { return a.total() == 20 })
	waitFor(t, "Kafka's commit repaired", func() bool { return s.committed(t, 0) == 10 })
	require.GreaterOrEqual(t, len(s.sent(0)), 2, "the member committed 10 again: %v", s.sent(0))
	require.Equal(t, 1.0, s.counter(t, "effectively_kafka_position_commits_total"))
}
