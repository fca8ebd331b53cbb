package consumer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	"github.com/effectively-io/effectively/internal/consumer"
)

// blockingApplier blocks every batch of one partition until released.
type blockingApplier struct {
	*memApplier
	blocked int32
	release chan struct{}
}

func (b *blockingApplier) Apply(ctx context.Context, batch consumer.Batch) error {
	if batch.Partition == b.blocked {
		select {
		case <-b.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return b.memApplier.Apply(ctx, batch)
}

// A slow partition is paused, not waited for: the poll loop keeps serving
// the other partitions, and the slow one resumes and catches up once its
// queue drains. (kfake: fast and deterministic.)
func TestSlowPartitionIsPausedNotBlockingThePollLoop(t *testing.T) {
	t.Parallel()
	// The queue bound binds by records, or by bytes (large records).
	for _, bound := range []struct {
		name           string
		records, bytes int
	}{{"records", 30, 0}, {"bytes", 100000, 200}} {
		t.Run(bound.name, func(t *testing.T) {
			t.Parallel()
			testSlowPartition(t, bound.records, bound.bytes)
		})
	}
}

func testSlowPartition(t *testing.T, maxRecords, maxBytes int) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	require.NoError(t, err)
	defer cluster.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic("t"))
	require.NoError(t, err)
	defer prod.Close()
	const perPartition = 500
	for p := int32(0); p < 2; p++ {
		recs := make([]*kgo.Record, perPartition)
		for i := range recs {
			recs[i] = &kgo.Record{Partition: p, Value: []byte(fmt.Sprint(i))}
		}
		require.NoError(t, prod.ProduceSync(context.Background(), recs...).FirstErr())
	}

	reg := prometheus.NewRegistry()
	a := &blockingApplier{memApplier: newMemApplier(), blocked: 0, release: make(chan struct{})}
	c, err := consumer.New(withDefaults(consumer.Options{
		Brokers: cluster.ListenAddrs(), Group: "g", Topics: []string{"t"},
		BatchMaxRecords: 10, MaxBufferedRecords: maxRecords, MaxBufferedBytes: maxBytes, SessionTimeout: 6 * time.Second, RebalanceTimeout: 5 * time.Second,
		FetchMaxPartitionBytes: 1 << 10, // small fetches: the queue fills in steps
		Logger:                 zaptest.NewLogger(t), Metrics: consumer.NewMetrics(reg),
	}), a)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	// Partition 1 is applied completely while partition 0 is stuck.
	applied := func(p int32) int {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.applied[p])
	}
	waitFor(t, "partition 1 applied while partition 0 is stuck", func() bool { return applied(1) == perPartition })
	require.Zero(t, applied(0))
	paused := func() float64 {
		return testutil.ToFloat64(pausedGauge(t, reg, "0"))
	}
	waitFor(t, "partition 0 paused", func() bool { return paused() == 1 })
	buffered := func(unit string) float64 {
		return testutil.ToFloat64(gaugeCollector{reg: reg, name: "effectively_partition_buffered_" + unit, partition: "0"})
	}
	if maxBytes > 0 {
		require.GreaterOrEqual(t, buffered("bytes"), float64(maxBytes), "paused at the byte bound")
	} else {
		require.GreaterOrEqual(t, buffered("records"), float64(maxRecords), "paused at the record bound")
	}
	require.Less(t, buffered("records"), float64(perPartition-10), "held at the bound: neither the whole partition nor the blocked batch")
	require.Greater(t, buffered("bytes"), 0.0)

	close(a.release)
	waitFor(t, "partition 0 caught up", func() bool { return applied(0) == perPartition })
	waitFor(t, "partition 0 resumed", func() bool { return paused() == 0 })
	require.Zero(t, buffered("records"), "nothing waits once it caught up")
	require.Zero(t, buffered("bytes"))
	a.mu.Lock()
	for i, o := range a.applied[0] {
		require.Equal(t, int64(i), o, "after resuming, nothing skipped or repeated")
	}
	a.mu.Unlock()
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("consumer did not stop")
	}
}

// pausedGauge finds effectively_partition_state{partition=p,state="paused"}
// (backpressure).
func pausedGauge(t *testing.T, reg *prometheus.Registry, p string) prometheus.Collector {
	t.Helper()
	return gaugeCollector{reg: reg, name: "effectively_partition_state", partition: p, state: "paused"}
}

type gaugeCollector struct {
	reg       *prometheus.Registry
	name      string
	partition string
	state     string
}

func (g gaugeCollector) Describe(chan<- *prometheus.Desc) {}

func (g gaugeCollector) Collect(ch chan<- prometheus.Metric) {
	mfs, _ := g.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != g.name {
			continue
		}
		for _, m := range mf.GetMetric() {
			partition, state := false, g.state == ""
			for _, l := range m.GetLabel() {
				partition = partition || (l.GetName() == "partition" && l.GetValue() == g.partition)
				state = state || (l.GetName() == "state" && l.GetValue() == g.state)
			}
			if partition && state {
				ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(g.name, "", nil, nil), prometheus.GaugeValue, m.GetGauge().GetValue())
			}
		}
	}
}

// gateApplier blocks every batch until open is closed, and counts the
// batches waiting.
type gateApplier struct {
	*memApplier
	open    chan struct{}
	waiting atomic.Int32
}

func (g *gateApplier) Apply(ctx context.Context, batch consumer.Batch) error {
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	select {
	case <-g.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	return g.memApplier.Apply(ctx, batch)
}

// Many partitions together stay within the member's byte budget: while no
// batch can finish, every partition pauses once the bytes held (queued or
// in the batch being applied) reach consumer.max_inflight_bytes, far below
// what the partitions' own bounds would let them hold; once batches
// finish, all resume and every record is applied once, in order.
func TestPartitionsTogetherStayWithinTheByteBudget(t *testing.T) {
	t.Parallel()
	const (
		partitions   = 8
		perPartition = 200
		recordSize   = 1 << 10
		budget       = 16 << 10 // 16 records' worth, across 8 partitions
		batchMax     = 4
	)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "t"))
	require.NoError(t, err)
	defer cluster.Close()
	produceSized(t, cluster, partitions, perPartition, recordSize)

	reg := prometheus.NewRegistry()
	a := &gateApplier{memApplier: newMemApplier(), open: make(chan struct{})}
	c, err := consumer.New(withDefaults(consumer.Options{
		Brokers: cluster.ListenAddrs(), Group: "g", Topics: []string{"t"},
		// Each partition alone may hold the whole topic's bytes: only the
		// budget bounds them.
		BatchMaxRecords: batchMax, MaxBufferedRecords: 10 * perPartition, MaxBufferedBytes: 10 * perPartition * recordSize,
		MaxInflightBytes: budget, FetchMaxPartitionBytes: recordSize,
		SessionTimeout: 6 * time.Second, RebalanceTimeout: 5 * time.Second,
		Logger: zaptest.NewLogger(t), Metrics: consumer.NewMetrics(reg),
	}), a)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	inflight := func() float64 { return gaugeValue(t, reg, "effectively_consumer_inflight_bytes") }
	allPaused := func() bool {
		for p := 0; p < partitions; p++ {
			if testutil.ToFloat64(pausedGauge(t, reg, fmt.Sprint(p))) != 1 {
				return false
			}
		}
		return true
	}
	waitFor(t, "every partition paused by the budget", func() bool { return inflight() >= budget && allPaused() })
	// Settled: nothing more arrives while everything is paused.
	time.Sleep(time.Second)
	held := inflight()
	require.GreaterOrEqual(t, held, float64(budget))
	// Each poll takes what the budget has room for at the records' mean
	// size, so it is passed by about one record, not by a poll of them.
	require.LessOrEqual(t, held, float64(budget+2*recordSize), "held past the budget by a record at most")
	var queued float64
	for p := 0; p < partitions; p++ {
		queued += testutil.ToFloat64(gaugeCollector{reg: reg, name: "effectively_partition_buffered_bytes", partition: fmt.Sprint(p)})
	}
	require.LessOrEqual(t, queued, held, "the budget counts the queues and the batches being applied")

	close(a.open)
	applied := func() int {
		a.mu.Lock()
		defer a.mu.Unlock()
		n := 0
		for _, offs := range a.applied {
			n += len(offs)
		}
		return n
	}
	waitFor(t, "every record applied", func() bool { return applied() == partitions*perPartition })
	waitFor(t, "the budget given back", func() bool { return inflight() == 0 })
	a.mu.Lock()
	for p, offs := range a.applied {
		for i, o := range offs {
			require.Equal(t, int64(i), o, "partition %d: nothing skipped or repeated", p)
		}
	}
	a.mu.Unlock()
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("consumer did not stop")
	}
}

// gaugeValue reads an unlabelled gauge.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}

// failingApplier fails every batch of one partition (a transient fault
// that lasts) and applies the others.
type failingApplier struct {
	*memApplier
	failing int32
}

func (f failingApplier) Apply(ctx context.Context, b consumer.Batch) error {
	if b.Partition == f.failing {
		return errors.New("transient: partition 0's rows are locked")
	}
	return f.memApplier.Apply(ctx, b)
}

// A partition whose batch is retried holds its bytes for as long as the
// fault lasts; they do not count towards the budget's exhaustion, so a
// failing partition holding most of the budget does not stall the healthy
// one. (Before, partition 1 applied nothing while partition 0 retried.)
func TestARetryingPartitionDoesNotStallTheOthers(t *testing.T) {
	t.Parallel()
	const (
		partitions   = 2
		perPartition = 200
		recordSize   = 1 << 10
	)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "t"))
	require.NoError(t, err)
	defer cluster.Close()
	produceSized(t, cluster, partitions, perPartition, recordSize)
	reg := prometheus.NewRegistry()
	a := failingApplier{memApplier: newMemApplier(), failing: 0}
	c, err := consumer.New(withDefaults(consumer.Options{
		Brokers: cluster.ListenAddrs(), Group: "g", Topics: []string{"t"},
		// Partition 0 alone may hold 12 KiB of the 16 KiB budget.
		BatchMaxRecords: 4, MaxBufferedRecords: 10 * perPartition, MaxBufferedBytes: 12 * recordSize,
		MaxInflightBytes: 16 * recordSize, FetchMaxPartitionBytes: 16 * recordSize,
		SessionTimeout: 6 * time.Second, RebalanceTimeout: 5 * time.Second,
		RetryInitial: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond,
		Logger: zaptest.NewLogger(t), Metrics: consumer.NewMetrics(reg),
	}), a)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	applied := func(p int32) int {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.applied[p])
	}
	waitFor(t, "partition 1 applied while partition 0 retries", func() bool { return applied(1) == perPartition })
	require.Zero(t, applied(0))
	require.Greater(t, gaugeValue(t, reg, "effectively_consumer_inflight_bytes"), 0.0, "partition 0's batch is still held")
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("consumer did not stop")
	}
}

// produceSized writes perPartition records of size bytes to each partition
// of topic t, one record per record batch, so that fetches can stop at any
// record.
func produceSized(t *testing.T, cluster *kfake.Cluster, partitions, perPartition, size int) {
	t.Helper()
	prod, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic("t"),
		kgo.ProducerBatchMaxBytes(int32(size)+512))
	require.NoError(t, err)
	defer prod.Close()
	for p := range int32(partitions) {
		recs := make([]*kgo.Record, perPartition)
		for i := range recs {
			recs[i] = &kgo.Record{Partition: p, Value: bytes.Repeat([]byte{'x'}, size)}
		}
		require.NoError(t, prod.ProduceSync(context.Background(), recs...).FirstErr())
	}
}
