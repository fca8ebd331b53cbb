package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/effectively-io/effectively/internal/redact"
)

// redactingExporter hides the credentials of every URL in what leaves for
// the collector: otelhttp's url.full keeps a call's query (an api_key, a
// signature), and an error recorded on a span holds the URL the HTTP
// client failed on. Attributes, event attributes and status descriptions
// pass through redact.Text (by the process's policy); everything else of
// a span is its own.
type redactingExporter struct{ sdktrace.SpanExporter }

func (e redactingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	out := make([]sdktrace.ReadOnlySpan, len(spans))
	for i, s := range spans {
		out[i] = redactedSpan{s}
	}
	return e.SpanExporter.ExportSpans(ctx, out)
}

// redactedSpan is a span whose texts are redacted as they are read.
type redactedSpan struct{ sdktrace.ReadOnlySpan }

func (s redactedSpan) Attributes() []attribute.KeyValue {
	return redactAttributes(s.ReadOnlySpan.Attributes())
}

func (s redactedSpan) Events() []sdktrace.Event {
	evs := s.ReadOnlySpan.Events()
	out := make([]sdktrace.Event, len(evs))
	for i, ev := range evs {
		ev.Attributes = redactAttributes(ev.Attributes)
		out[i] = ev
	}
	return out
}

func (s redactedSpan) Status() sdktrace.Status {
	st := s.ReadOnlySpan.Status()
	st.Description = redact.Text(st.Description)
	return st
}

func redactAttributes(attrs []attribute.KeyValue) []attribute.KeyValue {
	out := make([]attribute.KeyValue, len(attrs))
	for i, a := range attrs {
		switch a.Value.Type() {
		case attribute.STRING:
			a.Value = attribute.StringValue(redact.Text(a.Value.AsString()))
		case attribute.STRINGSLICE:
			vs := a.Value.AsStringSlice()
			for j, v := range vs {
				vs[j] = redact.Text(v)
			}
			a.Value = attribute.StringSliceValue(vs)
		}
		out[i] = a
	}
	return out
}
