package pipeline

import (
	"time"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/internal/dedupe"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count what became of events.
type Metrics struct {
	events       *prometheus.CounterVec
	deadLetters  *prometheus.CounterVec
	isolated     *prometheus.CounterVec
	fenced       *prometheus.CounterVec
	parked       prometheus.Gauge
	parkedOldest prometheus.Gauge
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "effectively_events_total",
			Help: "Records by topic and disposition (applied, stale, duplicate, dead_lettered, parked, skipped: a record that is no event, such as a change-data-capture tombstone).",
		}, []string{"topic", "disposition"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "effectively_dead_letters_total",
			Help: "Dead-lettered records by topic and reason.",
		}, []string{"topic", "reason"}),
		isolated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "effectively_isolated_batches_total",
			Help: "Batches redone one event at a time because a statement failed.",
		}, []string{"topic"}),
		fenced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "effectively_fenced_records_total",
			Help: "Records a batch held that were already applied (the partition's stored position was past them), not applied again: another member's work (a zombie's late batch, refused) or an earlier attempt of the same batch whose COMMIT answer was lost.",
		}, []string{"topic"}),
	}
	m.parked = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "effectively_parked_events",
		Help: "Events waiting for a prerequisite (as of the last sweep).",
	})
	m.parkedOldest = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "effectively_parked_oldest_seconds",
		Help: "Age of the oldest event waiting for a prerequisite, as of the last sweep (0 when none is parked).",
	})
	reg.MustRegister(m.events, m.deadLetters, m.isolated, m.fenced, m.parked, m.parkedOldest)
	return m
}

// InitTopic exports topic's counters at zero, for every disposition and
// every given dead-letter reason, so they exist in a scrape before their
// first increment: alerts and dashboards can name them, and rate() sees
// the first dead letter.
func (m *Metrics) InitTopic(topic string, reasons []event.Reason) {
	if m == nil {
		return
	}
	for _, d := range []dedupe.Disposition{dedupe.Applied, dedupe.Stale, dedupe.Parked, dedupe.DeadLettered, dedupe.Duplicate, dedupe.Skipped} {
		m.events.WithLabelValues(topic, string(d))
	}
	for _, r := range reasons {
		m.deadLetters.WithLabelValues(topic, string(r))
	}
	m.isolated.WithLabelValues(topic)
	m.fenced.WithLabelValues(topic)
}

func (m *Metrics) record(topic string, r Result) {
	if m == nil {
		return
	}
	for d, n := range r.Counts {
		m.events.WithLabelValues(topic, string(d)).Add(float64(n))
	}
	for reason, n := range r.DeadLetters {
		m.deadLetters.WithLabelValues(topic, string(reason)).Add(float64(n))
	}
	if r.Isolated {
		m.isolated.WithLabelValues(topic).Inc()
	}
	if r.Fenced > 0 {
		m.fenced.WithLabelValues(topic).Add(float64(r.Fenced))
	}
}

func (m *Metrics) setParked(n int64, oldest time.Duration) {
	if m == nil {
		return
	}
	m.parked.Set(float64(n))
	m.parkedOldest.Set(oldest.Seconds())
}
