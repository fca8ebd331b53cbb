package consumer

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the consumer's Prometheus metrics. A nil *Metrics records
// nothing, so tests need not register any.
type Metrics struct {
	records    *prometheus.CounterVec
	batchSize  *prometheus.HistogramVec
	txLatency  *prometheus.HistogramVec
	endToEnd   *prometheus.HistogramVec
	retries    *prometheus.CounterVec
	rebalances prometheus.Counter
	assigned   prometheus.Gauge
	state      *prometheus.GaugeVec
	cause      *prometheus.GaugeVec
	lag        *prometheus.GaugeVec
	bufRecords *prometheus.GaugeVec
	bufBytes   *prometheus.GaugeVec
	inflight   prometheus.Gauge
	mismatches *prometheus.CounterVec
	skipped    *prometheus.CounterVec
	commitErrs *prometheus.CounterVec
	syncs      *prometheus.CounterVec
}

// NewMetrics creates the consumer's metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "effectively_records_applied_total",
			Help: "Records whose batch committed to PostgreSQL, by topic (every disposition).",
		}, []string{"topic"}),
		batchSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "effectively_batch_records",
			Help:    "Records per applied batch.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}, []string{"topic"}),
		txLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "effectively_batch_apply_seconds",
			Help:    "Time to apply one batch, retries included (claim, effects, offset, COMMIT).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"topic"}),
		endToEnd: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "effectively_end_to_end_seconds",
			Help: "From a record's timestamp to the commit of its effects.",
			// Fine buckets (about 22% apart): benchmarks read p50/p99 from them.
			Buckets: prometheus.ExponentialBucketsRange(0.0005, 120, 64),
		}, []string{"topic"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "effectively_batch_retries_total",
			Help: "Failed batch attempts retried with backoff (transient faults), by topic and partition.",
		}, []string{"topic", "partition"}),
		rebalances: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "effectively_rebalances_total",
			Help: "Revocations or losses of partitions seen by this member.",
		}),
		assigned: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "effectively_assigned_partitions",
			Help: "Partitions this member owns.",
		}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "effectively_partition_state",
			Help: "1 for an owned partition's current state, 0 for the others: running, paused (backpressure: its queue is full), retrying (a transient fault, see effectively_partition_retry_cause), stopped (its position is outside its log).",
		}, []string{"topic", "partition", "state"}),
		cause: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "effectively_partition_retry_cause",
			Help: "1 for the cause of a retrying partition's failures (postgres_unavailable, postgres_timeout, source_unavailable, schema_registry_unavailable, kafka, other), 0 for the others and while it does not retry.",
		}, []string{"topic", "partition", "cause"}),
	}
	m.lag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "effectively_consumer_lag",
		Help: "Records between an owned partition's end (its last stable offset, listed every 5 s, or the high watermark of the last fetch if larger) and the position applied to PostgreSQL; it keeps rising while the partition cannot apply.",
	}, []string{"topic", "partition"})
	m.inflight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "effectively_consumer_inflight_bytes",
		Help: "Bytes of records (keys and values) this member holds across its partitions, queued or in the batch being applied; at consumer.max_inflight_bytes every partition pauses until half of it is applied.",
	})
	m.bufRecords = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "effectively_partition_buffered_records",
		Help: "Records fetched for an owned partition and waiting for their batch: the partition is paused when they reach 4 × the batch size (at least 10,000) or their bytes 8 MiB, and resumed at half. With the client's buffered fetches (effectively_kafka_buffered_fetch_bytes), most of the worker's memory.",
	}, []string{"topic", "partition"})
	m.bufBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "effectively_partition_buffered_bytes",
		Help: "Bytes of the keys and values of effectively_partition_buffered_records.",
	}, []string{"topic", "partition"})
	m.mismatches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "effectively_partitioner_mismatches_total",
		Help: "Records whose partition is not murmur2 of their key (a producer uses another partitioner).",
	}, []string{"topic"})
	m.skipped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "effectively_offsets_skipped_total",
		Help: "Offsets deleted before the group processed them and skipped under kafka.offset_out_of_range: log-start.",
	}, []string{"topic", "partition"})
	m.commitErrs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "effectively_kafka_commit_failures_total",
		Help: "Kafka offset commits that failed after the batch committed to PostgreSQL (harmless: PostgreSQL holds the position; Kafka's lag reads high until the commit is retried, within seconds, with or without new records).",
	}, []string{"topic"})
	m.syncs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "effectively_kafka_position_commits_total",
		Help: "Commits of the position stored in PostgreSQL to Kafka made without a new batch, because Kafka's committed offset differed: after an assignment (a commit the previous owner missed, a rewind whose Kafka step failed, offsets moved with Kafka's tools), after a failed commit, or after a stale member's commit rewound Kafka.",
	}, []string{"topic"})
	reg.MustRegister(m.inflight, m.syncs, m.commitErrs, m.skipped, m.mismatches, m.lag, m.bufRecords, m.bufBytes, m.records, m.batchSize, m.txLatency, m.endToEnd, m.retries, m.rebalances, m.assigned, m.state, m.cause)
	return m
}

// initTopic exports the topic's counters at zero before their first
// increment.
func (m *Metrics) initTopic(topic string) {
	if m == nil {
		return
	}
	m.records.WithLabelValues(topic)
	m.mismatches.WithLabelValues(topic)
	m.commitErrs.WithLabelValues(topic)
	m.syncs.WithLabelValues(topic)
}

// initPartition exports an owned partition's counters at zero.
func (m *Metrics) initPartition(tp topicPartition) {
	if m == nil {
		return
	}
	p := strconv.Itoa(int(tp.partition))
	m.retries.WithLabelValues(tp.topic, p)
	m.skipped.WithLabelValues(tp.topic, p)
}

func (m *Metrics) applied(b Batch, took time.Duration) {
	if m == nil {
		return
	}
	m.records.WithLabelValues(b.Topic).Add(float64(len(b.Records)))
	m.batchSize.WithLabelValues(b.Topic).Observe(float64(len(b.Records)))
	m.txLatency.WithLabelValues(b.Topic).Observe(took.Seconds())
	now := time.Now()
	e2e := m.endToEnd.WithLabelValues(b.Topic)
	for _, r := range b.Records {
		e2e.Observe(now.Sub(r.Timestamp).Seconds())
	}
}

func (m *Metrics) retried(tp topicPartition) {
	if m == nil {
		return
	}
	m.retries.WithLabelValues(tp.topic, strconv.Itoa(int(tp.partition))).Inc()
}

func (m *Metrics) rebalanced() {
	if m == nil {
		return
	}
	m.rebalances.Inc()
}

func (m *Metrics) setAssigned(n int) {
	if m == nil {
		return
	}
	m.assigned.Set(float64(n))
}

// setState sets the partition's state series (1 for state, 0 for the
// others) and its retry cause series (1 for cause, 0 for the others; all 0
// when cause is empty).
func (m *Metrics) setState(tp topicPartition, state, cause string) {
	if m == nil {
		return
	}
	p := strconv.Itoa(int(tp.partition))
	for _, s := range States {
		m.state.WithLabelValues(tp.topic, p, s).Set(b2f(s == state))
	}
	for _, c := range Causes {
		m.cause.WithLabelValues(tp.topic, p, c).Set(b2f(c == cause))
	}
}

func b2f(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

func (m *Metrics) setLag(tp topicPartition, lag int64) {
	if m == nil {
		return
	}
	m.lag.WithLabelValues(tp.topic, strconv.Itoa(int(tp.partition))).Set(float64(max(lag, 0)))
}

// setBuffered sets the records and bytes waiting in the partition's queue.
func (m *Metrics) setBuffered(tp topicPartition, records, bytes int) {
	if m == nil {
		return
	}
	p := strconv.Itoa(int(tp.partition))
	m.bufRecords.WithLabelValues(tp.topic, p).Set(float64(records))
	m.bufBytes.WithLabelValues(tp.topic, p).Set(float64(bytes))
}

// setInflight sets the bytes held across the partitions.
func (m *Metrics) setInflight(bytes int64) {
	if m == nil {
		return
	}
	m.inflight.Set(float64(bytes))
}

// forget drops a revoked partition's series: another member reports it now.
func (m *Metrics) forget(tp topicPartition) {
	if m == nil {
		return
	}
	p := strconv.Itoa(int(tp.partition))
	for _, v := range []*prometheus.GaugeVec{m.lag, m.bufRecords, m.bufBytes} {
		v.DeleteLabelValues(tp.topic, p)
	}
	for _, v := range []*prometheus.GaugeVec{m.state, m.cause} {
		v.DeletePartialMatch(prometheus.Labels{"topic": tp.topic, "partition": p})
	}
}

func (m *Metrics) partitionerMismatch(topic string, n int) {
	if m == nil {
		return
	}
	m.mismatches.WithLabelValues(topic).Add(float64(n))
}

func (m *Metrics) commitFailed(topic string) {
	if m == nil {
		return
	}
	m.commitErrs.WithLabelValues(topic).Inc()
}

func (m *Metrics) kafkaSynced(topic string) {
	if m == nil {
		return
	}
	m.syncs.WithLabelValues(topic).Inc()
}

func (m *Metrics) skippedOffsets(tp topicPartition, n int64) {
	if m == nil {
		return
	}
	m.skipped.WithLabelValues(tp.topic, strconv.Itoa(int(tp.partition))).Add(float64(n))
}
