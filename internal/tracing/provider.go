package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/effectively-io/effectively/internal/redact"
)

// WithProvider is tracing on with a program's own tracer provider (a
// worker embedded in a program that already exports traces): the engine's
// spans come from tp, through the program's exporters and sampler, with
// W3C trace context propagation. The process does not own tp: Shutdown
// leaves it running. The engine's texts are redacted as they are set on a
// span (the exporter is the program's, so redactingExporter cannot be
// put in front of it).
func WithProvider(tp trace.TracerProvider) *Tracing {
	rtp := redactingProvider{tp}
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	return &Tracing{on: true, tp: rtp, tracer: rtp.Tracer(instrumentation), prop: prop}
}

// redactingProvider hides the credentials of every URL the engine's
// instrumentation puts on a span: attributes, event attributes, recorded
// errors and status descriptions pass through redact.Text.
type redactingProvider struct{ trace.TracerProvider }

func (p redactingProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return redactingTracer{p.TracerProvider.Tracer(name, opts...)}
}

type redactingTracer struct{ trace.Tracer }

func (t redactingTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	start := []trace.SpanStartOption{trace.WithAttributes(redactAttributes(cfg.Attributes())...), trace.WithSpanKind(cfg.SpanKind())}
	if links := cfg.Links(); len(links) > 0 {
		start = append(start, trace.WithLinks(links...))
	}
	if ts := cfg.Timestamp(); !ts.IsZero() {
		start = append(start, trace.WithTimestamp(ts))
	}
	if cfg.NewRoot() {
		start = append(start, trace.WithNewRoot())
	}
	ctx, span := t.Tracer.Start(ctx, name, start...)
	rs := redactingSpan{span}
	return trace.ContextWithSpan(ctx, rs), rs
}

type redactingSpan struct{ trace.Span }

func (s redactingSpan) SetAttributes(kv ...attribute.KeyValue) {
	s.Span.SetAttributes(redactAttributes(kv)...)
}

func (s redactingSpan) AddEvent(name string, opts ...trace.EventOption) {
	s.Span.AddEvent(name, redactEvent(opts)...)
}

func (s redactingSpan) RecordError(err error, opts ...trace.EventOption) {
	s.Span.RecordError(redact.Error(err), redactEvent(opts)...)
}

func (s redactingSpan) SetStatus(code codes.Code, description string) {
	s.Span.SetStatus(code, redact.Text(description))
}

// redactEvent is an event's options with its attributes redacted.
func redactEvent(opts []trace.EventOption) []trace.EventOption {
	cfg := trace.NewEventConfig(opts...)
	out := []trace.EventOption{trace.WithAttributes(redactAttributes(cfg.Attributes())...), trace.WithStackTrace(cfg.StackTrace())}
	if ts := cfg.Timestamp(); !ts.IsZero() {
		out = append(out, trace.WithTimestamp(ts))
	}
	return out
}
