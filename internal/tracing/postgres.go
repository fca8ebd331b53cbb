package tracing

import (
	"context"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/metric/noop"
)

// PostgresTracer is the pgx tracer for a pool's connections (otelpgx): a
// client span per query, pipelined batch, prepare and connection acquire,
// when the context already carries a recording span (a batch's, a
// delivery's), so polling and housekeeping make no traces of their own.
// Spans have the statement's text, never its arguments. A batch's
// statements are not a span each (a batch of 500 events sends some 1,500 in
// one round trip, and a span each would cost more than the statements): the
// batch's span has their count, and a statement that fails gets a span with
// its text and error. Off, nil.
func (t *Tracing) PostgresTracer() pgx.QueryTracer {
	if !t.Enabled() {
		return nil
	}
	return pgTracer{otelpgx.NewTracer(otelpgx.WithTracerProvider(t.tp),
		otelpgx.WithMeterProvider(noop.NewMeterProvider()))} // metrics are Prometheus's
}

// pgTracer is otelpgx's tracer (every tracer interface of pgx and pgxpool,
// promoted) with a span only for the failing statements of a batch.
type pgTracer struct{ *otelpgx.Tracer }

func (t pgTracer) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	if data.Err != nil {
		t.Tracer.TraceBatchQuery(ctx, conn, data)
	}
}
