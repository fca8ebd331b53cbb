package tracing

import (
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// WrapTransport wraps an HTTP client's transport (the outbox dispatcher's,
// the prefetchers') with otelhttp: a client span per call, whose context
// the request carries on as traceparent. A request that arrives with a
// traceparent header and no span in its context (the outbox sends the
// causing event's) is that span's child, so the call continues the event's
// trace. Off, it returns next itself.
func (t *Tracing) WrapTransport(next http.RoundTripper) http.RoundTripper {
	if !t.Enabled() {
		return next
	}
	ot := otelhttp.NewTransport(next,
		otelhttp.WithTracerProvider(t.tp), otelhttp.WithPropagators(t.prop),
		otelhttp.WithMeterProvider(noop.NewMeterProvider())) // metrics are Prometheus's
	return transportFunc(func(r *http.Request) (*http.Response, error) {
		if r.Header.Get("traceparent") != "" && !trace.SpanContextFromContext(r.Context()).IsValid() {
			r = r.WithContext(t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
		}
		return ot.RoundTrip(r)
	})
}

type transportFunc func(*http.Request) (*http.Response, error)

func (f transportFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
