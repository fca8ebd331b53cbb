package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics describe the outbox: deliveries by outcome, and the queue as of
// the dispatcher's last look (depth by state, age of the oldest pending
// intent).
type Metrics struct {
	deliveries *prometheus.CounterVec
	depth      *prometheus.GaugeVec
	oldest     prometheus.Gauge
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "effectively_outbox_deliveries_total",
			Help: "Delivery attempts by operation and outcome (sent, retry, unknown, dead_lettered, released).",
		}, []string{"operation", "outcome"}),
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "effectively_outbox_intents",
			Help: "Intents that are not done, by state (pending, sending, unknown, dead_lettered), as of the dispatcher's last look.",
		}, []string{"state"}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "effectively_outbox_oldest_pending_seconds",
			Help: "Age of the oldest pending or sending intent (0 when none), as of the dispatcher's last look.",
		}),
	}
	reg.MustRegister(m.deliveries, m.depth, m.oldest)
	return m
}

// outcomeLabel names an outcome for the deliveries metric.
func outcomeLabel(o outcome) string {
	switch o.state {
	case Pending:
		if o.released {
			return "released"
		}
		return "retry"
	default:
		return string(o.state)
	}
}

func (m *Metrics) delivered(op string, o outcome) {
	if m == nil {
		return
	}
	m.deliveries.WithLabelValues(op, outcomeLabel(o)).Inc()
}

// Depth is the outbox's queue: intents that are not done.
type Depth struct {
	// ByState counts pending, sending, unknown and dead-lettered intents.
	ByState map[State]int64
	// OldestPending is the age of the oldest pending or sending intent.
	OldestPending time.Duration
}

// The states that are not done. Sent and suppressed intents are only
// history (kept for outbox.retention); the partial indexes cover these.
var openStates = []State{Pending, Sending, Unknown, DeadLettered}

const depthSQL = `
SELECT state, count(*),
       coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE state IN ('pending', 'sending'))), 0)::float8
FROM outbox
WHERE state IN ('pending', 'sending', 'unknown', 'dead_lettered')
GROUP BY state`

// QueueDepth reads the outbox's queue.
func QueueDepth(ctx context.Context, q *pgxpool.Pool) (Depth, error) {
	d := Depth{ByState: make(map[State]int64, len(openStates))}
	for _, s := range openStates {
		d.ByState[s] = 0
	}
	rows, err := q.Query(ctx, depthSQL)
	if err != nil {
		return d, fmt.Errorf("reading the outbox depth: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			state string
			n     int64
			age   float64
		)
		if err := rows.Scan(&state, &n, &age); err != nil {
			return d, fmt.Errorf("reading the outbox depth: %w", err)
		}
		d.ByState[State(state)] = n
		d.OldestPending = max(d.OldestPending, time.Duration(age*float64(time.Second)))
	}
	if err := rows.Err(); err != nil {
		return d, fmt.Errorf("reading the outbox depth: %w", err)
	}
	return d, nil
}

func (m *Metrics) setDepth(d Depth) {
	if m == nil {
		return
	}
	for s, n := range d.ByState {
		m.depth.WithLabelValues(string(s)).Set(float64(n))
	}
	m.oldest.Set(d.OldestPending.Seconds())
}
