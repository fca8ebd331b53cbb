package tracing_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/consumer"
	"github.com/effectively-io/effectively/internal/tracing"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/testcontainers/testcontainers-go.(*Reaper).connect.func1"))
}

// env is a process environment for tracing.New.
func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

type nopApplier struct{ consumer.Applier }

// Off unless an exporter variable asks: then nothing is wrapped (each
// wrapper returns its input, so the hot path is the same code as without
// tracing), no hook or tracer is installed, and a span is neither recorded
// nor valid.
func TestOffByDefault(t *testing.T) {
	t.Parallel()
	for name, lookup := range map[string]func(string) (string, bool){
		"no variables":       env(),
		"only resource vars": env("OTEL_SERVICE_NAME", "x", "OTEL_RESOURCE_ATTRIBUTES", "a=b"),
		"exporter none":      env(tracing.EnvEndpoint, "http://127.0.0.1:1", tracing.EnvTracesExporter, "none"),
		"sdk disabled":       env(tracing.EnvEndpoint, "http://127.0.0.1:1", tracing.EnvSDKDisabled, "true"),
		"empty endpoint":     env(tracing.EnvEndpoint, ""),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tr, err := tracing.New(context.Background(), tracing.Options{ServiceName: "effectively", LookupEnvFunc: lookup})
			require.NoError(t, err)
			require.False(t, tr.Enabled())
			next := &nopApplier{}
			require.Same(t, next, tr.Applier(next).(*nopApplier), "the applier is not wrapped")
			rt := &http.Transport{}
			require.Same(t, rt, tr.WrapTransport(rt).(*http.Transport), "the transport is not wrapped")
			require.Nil(t, tr.KafkaHooks("g"))
			require.Nil(t, tr.PostgresTracer())
			require.Nil(t, tr.Settled())
			_, span := tr.TracerProvider().Tracer("t").Start(context.Background(), "s")
			require.False(t, span.IsRecording())
			require.False(t, span.SpanContext().IsValid())
			span.End()
			require.NoError(t, tr.Shutdown(context.Background()))
		})
	}
}

func TestOnWhenAnExporterVariableIsSet(t *testing.T) {
	t.Parallel()
	for name, lookup := range map[string]func(string) (string, bool){
		"endpoint":        env(tracing.EnvEndpoint, "http://127.0.0.1:1"),
		"traces endpoint": env(tracing.EnvTracesEndpoint, "http://127.0.0.1:1/v1/traces"),
		"exporter otlp":   env(tracing.EnvTracesExporter, "otlp"),
		"traces protocol wins": env(tracing.EnvEndpoint, "http://127.0.0.1:1",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tr, err := tracing.New(context.Background(), tracing.Options{ServiceName: "effectively", LookupEnvFunc: lookup})
			require.NoError(t, err)
			require.True(t, tr.Enabled())
			require.NotNil(t, tr.PostgresTracer())
			require.NotEmpty(t, tr.KafkaHooks("g"))
			_, span := tr.TracerProvider().Tracer("t").Start(context.Background(), "s")
			require.True(t, span.IsRecording())
			// Not ended: nothing is exported to the closed port on shutdown.
			require.NoError(t, tr.Shutdown(context.Background()))
		})
	}
}

// What this build cannot do is refused, naming the variable and the fix.
func TestUnsupportedExporterSettings(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		lookup func(string) (string, bool)
		want   string
	}{
		"console exporter": {env(tracing.EnvTracesExporter, "console"), "OTEL_TRACES_EXPORTER=console: this build exports traces over OTLP only; fix: set OTEL_TRACES_EXPORTER=otlp"},
		"grpc":             {env(tracing.EnvEndpoint, "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"), "OTEL_EXPORTER_OTLP_PROTOCOL=grpc: this build exports OTLP over HTTP (protobuf) only; fix: set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"},
		"http/json traces": {env(tracing.EnvEndpoint, "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"), "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := tracing.New(context.Background(), tracing.Options{LookupEnvFunc: tc.lookup})
			require.ErrorContains(t, err, tc.want)
		})
	}
}

type prefetching struct{ handlers.HandlerFunc }

func (prefetching) Prefetch(_ context.Context, _ handlers.Env, ev event.Event) (event.Event, error) {
	return ev, nil
}

// A wrapped prefetcher is still a prefetcher (the pipeline asks).
func TestWrapHandlerKeepsPrefetcher(t *testing.T) {
	t.Parallel()
	tr, err := tracing.New(context.Background(), tracing.Options{LookupEnvFunc: env(tracing.EnvTracesExporter, "otlp")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tr.Shutdown(context.Background())) })
	_, ok := tr.WrapHandler("t", prefetching{}).(handlers.Prefetcher)
	require.True(t, ok)
	_, ok = tr.WrapHandler("t", handlers.HandlerFunc(nil)).(handlers.Prefetcher)
	require.False(t, ok)
}

// The pgx tracer keeps every tracer interface pgx and pgxpool look for.
func TestPostgresTracerInterfaces(t *testing.T) {
	t.Parallel()
	tr, err := tracing.New(context.Background(), tracing.Options{LookupEnvFunc: env(tracing.EnvTracesExporter, "otlp")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tr.Shutdown(context.Background())) })
	pt := tr.PostgresTracer()
	require.Implements(t, (*pgx.BatchTracer)(nil), pt)
	require.Implements(t, (*pgx.PrepareTracer)(nil), pt)
	require.Implements(t, (*pgx.ConnectTracer)(nil), pt)
	require.Implements(t, (*pgxpool.AcquireTracer)(nil), pt)
}
