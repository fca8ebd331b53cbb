package tracing

import (
	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/metric/noop"
)

// PostgresTracer is the pgx tracer for a pool's connections (otelpgx): a
// client span per query, batch, prepare and connection acquire, when the
// context already carries a recording span (a batch's, a delivery's), so
// polling and housekeeping make no traces of their own. Spans have the
// statement's text, never its arguments. Off, nil.
func (t *Tracing) PostgresTracer() pgx.QueryTracer {
	if !t.Enabled() {
		return nil
	}
	return otelpgx.NewTracer(otelpgx.WithTracerProvider(t.tp),
		otelpgx.WithMeterProvider(noop.NewMeterProvider())) // metrics are Prometheus's
}
