package tracing_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/effectively-io/effectively/internal/tracing"
)

// otelhttp records a call's whole URL (url.full) and an error recorded on
// a span holds the URL the client failed on: neither leaves for the
// collector with a credential in it, while the rest of the span does.
func TestExportedSpansHoldNoSecret(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tr, err := tracing.New(context.Background(), tracing.Options{ServiceName: "test", Exporter: exp, Syncer: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tr.Shutdown(context.Background())) })
	checkNoSecret(t, tr, exp)
}

// The same with a program's own tracer provider (an embedded worker): the
// exporter is the program's, and the texts are redacted as they are set.
func TestAProgramsProviderGetsNoSecret(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	tr := tracing.WithProvider(tp)
	require.True(t, tr.Enabled())
	checkNoSecret(t, tr, exp)
	require.NoError(t, tr.Shutdown(context.Background()))
	_, span := tp.Tracer("after").Start(context.Background(), "the program's provider still runs")
	span.End()
	require.Len(t, exp.GetSpans(), 4, "Shutdown left the program's provider running")
}

func checkNoSecret(t *testing.T, tr *tracing.Tracing, exp *tracetest.InMemoryExporter) {
	const secret = "Tr4ceSecretValue"
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(srv.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := ln.Addr().String()
	require.NoError(t, ln.Close())

	client := &http.Client{Transport: tr.WrapTransport(http.DefaultTransport)}
	resp, err := client.Get(srv.URL + "/v1/x?api_key=" + secret + "&page=2")
	require.NoError(t, err)
	resp.Body.Close()
	_, callErr := client.Get("http://" + refused + "/v1?token=" + secret)
	require.ErrorContains(t, callErr, secret, "the client's error holds it: the case is real")

	// A span recording that error, as the prefetch and batch spans do.
	_, span := tr.TracerProvider().Tracer("test").Start(context.Background(), "prefetch test",
		trace.WithAttributes(attribute.String("url", "http://u:"+secret+"@example.com/")))
	span.AddEvent("called", trace.WithAttributes(attribute.String("url.full", "http://example.com/?token="+secret)))
	span.RecordError(callErr)
	span.SetStatus(codes.Error, callErr.Error())
	span.End()

	spans := exp.GetSpans()
	require.Len(t, spans, 3)
	all := fmt.Sprintf("%+v", spans)
	require.NotContains(t, all, secret)
	require.Contains(t, all, "api_key=xxxxx&page=2", "url.full is kept, redacted")
	require.Contains(t, all, "token=xxxxx", "the error is kept, redacted")
}
