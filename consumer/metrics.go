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
	paused     *prometheus.GaugeVec
	retrying   *prometheus.GaugeVec
	lag        *prometheus.GaugeVec
	mismatches *prometheus.CounterVec
	stopped    *prometheus.GaugeVec
	skipped    *prometheus.CounterVec
	commitErrs *prometheus.CounterVec
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
		paused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "effectively_partition_paused",
			Help: "1 while a partition's fetching is paused (backpressure or retry).",
		}, []string{"topic", "partition"}),
		retrying: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "effectively_partition_retrying",
			Help: "1 while a partition retries a failing batch.",
		}, []string{"topic", "partition"}),
	}
	m.lag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "effectively_consumer_lag",
		Help: "Records between a partition's high watermark (at the last fetch) and its applied position.",
	}, []string{"topic", "partition"})
	m.mismatches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "effectively_partitioner_mismatches_total",
		Help: "Records whose partition is not murmur2 of their key (a producer uses another partitioner).",
	}, []string{"topic"})
	m.stopped = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "effectively_partition_stopped",
		Help: "1 while a partition is stopped because its position is outside its log (records deleted unprocessed, or the topic recreated).",
	}, []string{"topic", "partition"})
	m.skipped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "effectively_offsets_skipped_total",
		Help: "Offsets deleted before the group processed them and skipped under kafka.offset_out_of_range: log-start.",
	}, []string{"topic", "partition"})
	m.commitErrs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "effectively_kafka_commit_failures_total",
		Help: "Kafka offset commits that failed after the batch committed to PostgreSQL (harmless: PostgreSQL holds the position; Kafka's lag reads high until the next commit).",
	}, []string{"topic"})
	reg.MustRegister(m.commitErrs, m.stopped, m.skipped, m.mismatches, m.lag, m.records, m.batchSize, m.txLatency, m.endToEnd, m.retries, m.rebalances, m.assigned, m.paused, m.retrying)
	return m
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

func (m *Metrics) setPaused(tp topicPartition, v bool) {
	if m == nil {
		return
	}
	m.paused.WithLabelValues(tp.topic, strconv.Itoa(int(tp.partition))).Set(b2f(v))
}

func (m *Metrics) setRetrying(tp topicPartition, v bool) {
	if m == nil {
		return
	}
	m.retrying.WithLabelValues(tp.topic, strconv.Itoa(int(tp.partition))).Set(b2f(v))
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

// forget drops a revoked partition's series: another member reports it now.
func (m *Metrics) forget(tp topicPartition) {
	if m == nil {
		return
	}
	p := strconv.Itoa(int(tp.partition))
	for _, v := range []*prometheus.GaugeVec{m.lag, m.paused, m.retrying, m.stopped} {
		v.DeleteLabelValues(tp.topic, p)
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

func (m *Metrics) setStopped(tp topicPartition, v bool) {
	if m == nil {
		return
	}
	m.stopped.WithLabelValues(tp.topic, strconv.Itoa(int(tp.partition))).Set(b2f(v))
}

func (m *Metrics) skippedOffsets(tp topicPartition, n int64) {
	if m == nil {
		return
	}
	m.skipped.WithLabelValues(tp.topic, strconv.Itoa(int(tp.partition))).Add(float64(n))
}
