package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/effectively-io/effectively/internal/consumer"
	"github.com/effectively-io/effectively/internal/kafkatest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/testcontainers/testcontainers-go.(*Reaper).connect.func1"))
}

// memApplier keeps positions in memory and records every applied offset, so
// a test can check that each record was applied exactly once, in order.
type memApplier struct {
	mu        sync.Mutex
	positions map[string]map[int32]int64
	applied   map[int32][]int64
	failNext  int // fail this many Apply calls (a transient fault)
	failures  int
}

func newMemApplier() *memApplier {
	return &memApplier{positions: map[string]map[int32]int64{}, applied: map[int32][]int64{}}
}

func (a *memApplier) Apply(_ context.Context, b consumer.Batch) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failNext > 0 {
		a.failNext--
		a.failures++
		return fmt.Errorf("injected transient failure")
	}
	pos := a.positions[b.Topic]
	if pos == nil {
		pos = map[int32]int64{}
		a.positions[b.Topic] = pos
	}
	for _, r := range b.Records {
		if r.Offset < pos[b.Partition] {
			continue // already applied: the stored position says so
		}
		a.applied[b.Partition] = append(a.applied[b.Partition], r.Offset)
	}
	pos[b.Partition] = b.NextOffset()
	return nil
}

func (a *memApplier) Positions(_ context.Context, _, topic string, partitions []int32) (map[int32]consumer.Position, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[int32]consumer.Position{}
	for _, p := range partitions {
		if o, ok := a.positions[topic][p]; ok {
			out[p] = consumer.Position{Next: o}
		}
	}
	return out, nil
}

func (a *memApplier) total() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, offs := range a.applied {
		n += len(offs)
	}
	return n
}

func produce(t *testing.T, topic string, n, from int) {
	t.Helper()
	cl := kafkatest.Producer(t, kgo.DefaultProduceTopic(topic))
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Key: []byte(fmt.Sprintf("key-%d", (from+i)%37)), Value: []byte(fmt.Sprintf(`{"n":%d}`, from+i))}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
}

func startConsumer(t *testing.T, opts consumer.Options, a consumer.Applier) (stop func()) {
	t.Helper()
	opts.Brokers = kafkatest.Brokers(t)
	opts.Logger = zaptest.NewLogger(t)
	opts.RetryInitial = 10 * time.Millisecond
	opts.RetryMax = 50 * time.Millisecond
	c, err := consumer.New(withDefaults(opts), a)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(time.Minute):
			t.Fatal("consumer did not stop within a minute")
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second) // a hang guard, not a performance bound
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Records produced to the real broker are applied once each, in offset order
// per partition; the Kafka commit follows; a restarted member resumes from the
// applier's stored positions, not from Kafka's commit.
func TestConsumeThroughRealBroker(t *testing.T) {
	t.Parallel()
	topic := kafkatest.NewTopic(t, 4)
	group := kafkatest.NewGroup(t)
	produce(t, topic, 1000, 0)

	a := newMemApplier()
	a.failNext = 3 // transient failures are retried, not skipped
	opts := consumer.Options{Group: group, Topics: []string{topic}, BatchMaxRecords: 64, SessionTimeout: 10 * time.Second}
	stop := startConsumer(t, opts, a)
	waitFor(t, "1000 records applied", func() bool { return a.total() == 1000 })
	stop()

	require.Equal(t, 3, a.failures)
	a.mu.Lock()
	for p, offs := range a.applied {
		for i := range offs {
			require.Equal(t, int64(i), offs[i], "partition %d applied out of order or twice", p)
		}
	}
	a.mu.Unlock()

	// The Kafka commit matches the stored positions.
	adm := kafkatest.Admin(t)
	ctx := context.Background()
	committed, err := adm.FetchOffsets(ctx, group)
	require.NoError(t, err)
	for p := int32(0); p < 4; p++ {
		o, ok := committed.Lookup(topic, p)
		require.True(t, ok, "partition %d has no commit", p)
		require.Equal(t, a.positions[topic][p], o.At, "partition %d", p)
	}

	// Rewind Kafka's commit behind the applier's back (as Kafka's own tools
	// would): the stored positions still win, nothing is applied twice.
	rewind := kadm.Offsets{}
	for p := int32(0); p < 4; p++ {
		rewind.Add(kadm.Offset{Topic: topic, Partition: p, At: 0, LeaderEpoch: -1})
	}
	resp, err := adm.CommitOffsets(ctx, group, rewind)
	require.NoError(t, err)
	require.NoError(t, resp.Error())

	produce(t, topic, 200, 1000)
	stop = startConsumer(t, opts, a)
	waitFor(t, "200 more records applied", func() bool { return a.total() == 1200 })
	stop()
	a.mu.Lock()
	defer a.mu.Unlock()
	for p, offs := range a.applied {
		for i := range offs {
			require.Equal(t, int64(i), offs[i], "partition %d applied twice after restart", p)
		}
	}
}

// A new group with start_offset latest skips what was produced before it
// joined.
func TestStartOffsetLatest(t *testing.T) {
	t.Parallel()
	topic := kafkatest.NewTopic(t, 2)
	produce(t, topic, 50, 0)
	ends, err := kafkatest.Admin(t).ListEndOffsets(context.Background(), topic)
	require.NoError(t, err)

	a := newMemApplier()
	stop := startConsumer(t, consumer.Options{Group: kafkatest.NewGroup(t), Topics: []string{topic}, StartOffset: "latest"}, a)
	// The member's start offsets resolve some time after it joins; keep
	// producing until something arrives.
	for i := 0; a.total() == 0; i++ {
		require.Less(t, i, 180, "nothing consumed within 90s")
		produce(t, topic, 4, 50+4*i)
		time.Sleep(500 * time.Millisecond)
	}
	stop()
	a.mu.Lock()
	defer a.mu.Unlock()
	for p, offs := range a.applied {
		end, ok := ends.Lookup(topic, p)
		require.True(t, ok)
		for _, o := range offs {
			require.GreaterOrEqual(t, o, end.Offset, "partition %d: a record produced before the group joined was applied", p)
		}
	}
}

// Records a producer placed with another partitioner than murmur2 are
// counted and warned about; they are still applied.
func TestPartitionerMismatchIsCounted(t *testing.T) {
	t.Parallel()
	topic := kafkatest.NewTopic(t, 4)
	// Every record to partition 3, whatever murmur2 of its key says.
	cl := kafkatest.Producer(t, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	wrong := 0
	for i := 0; i < 40; i++ {
		r := &kgo.Record{Key: []byte(fmt.Sprintf("acct-%d", i)), Value: []byte("{}"), Partition: 3}
		if kgo.StickyKeyPartitioner(nil).ForTopic(topic).Partition(r, 4) != 3 {
			wrong++
		}
		recs = append(recs, r)
	}
	require.NoError(t, cl.ProduceSync(context.Background(), recs...).FirstErr())
	require.Positive(t, wrong)

	reg := prometheus.NewRegistry()
	a := newMemApplier()
	opts := consumer.Options{Brokers: kafkatest.Brokers(t), Group: kafkatest.NewGroup(t), Topics: []string{topic},
		Logger: zaptest.NewLogger(t), Metrics: consumer.NewMetrics(reg)}
	c, err := consumer.New(withDefaults(opts), a)
	require.NoError(t, err)
	c.Topics(map[string]int{topic: 4}, []string{topic})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	waitFor(t, "40 records applied", func() bool { return a.total() == 40 })
	cancel()
	require.NoError(t, <-done)
	n, err := testutil.GatherAndCount(reg, "effectively_partitioner_mismatches_total")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "effectively_partitioner_mismatches_total" {
			require.Equal(t, float64(wrong), mf.GetMetric()[0].GetCounter().GetValue())
		}
	}
}
