package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"
)

// The variables that turn tracing on: an OTLP endpoint, or an exporter
// named explicitly. With none of them set (or OTEL_TRACES_EXPORTER=none, or
// OTEL_SDK_DISABLED=true) tracing is off.
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvTracesExporter = "OTEL_TRACES_EXPORTER"
	EnvSDKDisabled    = "OTEL_SDK_DISABLED"
	envProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
)

// instrumentation is the name of the engine's tracer.
const instrumentation = "github.com/effectively-io/effectively"

// Options describe the process for the traces' resource.
type Options struct {
	// ServiceName is service.name: the build's name (OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES override it).
	ServiceName string
	// Version is service.version.
	Version string
	// InstanceID is service.instance.id (the worker's kafka.instance_id,
	// else its host name).
	InstanceID string
	// Logger hears export failures.
	Logger *zap.Logger
	// LookupEnvFunc reads a variable; nil is os.LookupEnv (tests pass
	// their own).
	LookupEnvFunc func(string) (string, bool)
	// Exporter, when set, replaces the OTLP exporter (tests pass the SDK's
	// in-memory one); tracing is then on whatever the variables say.
	Exporter sdktrace.SpanExporter
	// Syncer exports each span as it ends instead of in batches (tests).
	Syncer bool
}

// Tracing is the process's tracer provider and the instrumentation that
// uses it. The zero value is off; it is safe for concurrent use.
type Tracing struct {
	on     bool
	sdk    *sdktrace.TracerProvider // the process's own; nil when off or a program's
	tp     trace.TracerProvider
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// Off is tracing turned off.
func Off() *Tracing {
	tp := noop.NewTracerProvider()
	return &Tracing{tp: tp, tracer: tp.Tracer(instrumentation), prop: propagation.TraceContext{}}
}

// New reads the OTEL_* variables and returns tracing on (an OTLP/HTTP
// exporter configured by the standard variables, batched) or off. Its
// errors name the variable and the fix.
func New(ctx context.Context, opts Options) (*Tracing, error) {
	lookup := opts.LookupEnvFunc
	if lookup == nil {
		lookup = os.LookupEnv
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	exp := opts.Exporter
	if exp == nil {
		on, err := enabled(lookup)
		if err != nil || !on {
			return Off(), err
		}
		if exp, err = otlptracehttp.New(ctx); err != nil {
			return nil, fmt.Errorf("tracing: the OTLP exporter: %w; fix: correct the OTEL_EXPORTER_OTLP_* variables", err)
		}
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(
			semconv.ServiceName(opts.ServiceName),
			semconv.ServiceVersion(opts.Version),
			semconv.ServiceInstanceID(opts.InstanceID),
		),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: the resource: %w; fix: correct OTEL_RESOURCE_ATTRIBUTES", err)
	}
	// Nothing leaves with a credential of a URL in it (see
	// redactingExporter).
	exp = redactingExporter{exp}
	var export sdktrace.TracerProviderOption
	if opts.Syncer {
		export = sdktrace.WithSyncer(exp)
	} else {
		export = sdktrace.WithBatcher(exp) // OTEL_BSP_* tune it
	}
	// The sampler is the SDK's: OTEL_TRACES_SAMPLER, by default
	// parentbased_always_on.
	sdk := sdktrace.NewTracerProvider(export, sdktrace.WithResource(res))
	log := opts.Logger
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: exporting spans failed; fix: check the collector at OTEL_EXPORTER_OTLP_ENDPOINT", zap.Error(err))
	}))
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	// Global too, so a team's handlers can start spans of their own with
	// otel.Tracer.
	otel.SetTracerProvider(sdk)
	otel.SetTextMapPropagator(prop)
	return &Tracing{on: true, sdk: sdk, tp: sdk, tracer: sdk.Tracer(instrumentation), prop: prop}, nil
}

// enabled decides from the variables whether tracing is on.
func enabled(lookup func(string) (string, bool)) (bool, error) {
	if v, _ := lookup(EnvSDKDisabled); strings.EqualFold(strings.TrimSpace(v), "true") {
		return false, nil
	}
	on := false
	if v, ok := lookup(EnvTracesExporter); ok && strings.TrimSpace(v) != "" {
		for _, name := range strings.Split(v, ",") {
			switch strings.TrimSpace(name) {
			case "none":
				return false, nil
			case "otlp":
				on = true
			default:
				return false, fmt.Errorf("%s=%s: this build exports traces over OTLP only; fix: set %s=otlp (or none to turn tracing off)",
					EnvTracesExporter, v, EnvTracesExporter)
			}
		}
	}
	for _, k := range []string{EnvEndpoint, EnvTracesEndpoint} {
		if v, ok := lookup(k); ok && strings.TrimSpace(v) != "" {
			on = true
		}
	}
	if !on {
		return false, nil
	}
	for _, k := range []string{envTracesProtocol, envProtocol} {
		v, ok := lookup(k)
		if !ok || strings.TrimSpace(v) == "" {
			continue
		}
		if v != "http/protobuf" {
			return false, fmt.Errorf("%s=%s: this build exports OTLP over HTTP (protobuf) only; fix: set %s=http/protobuf and point %s at the collector's OTLP/HTTP port (4318)",
				k, v, k, EnvEndpoint)
		}
		break // the traces-specific variable wins
	}
	return true, nil
}

// Enabled reports whether spans are recorded and exported.
func (t *Tracing) Enabled() bool { return t != nil && t.on }

// TracerProvider is the provider spans come from (a no-op one when off).
func (t *Tracing) TracerProvider() trace.TracerProvider {
	if t == nil || t.tp == nil {
		return noop.NewTracerProvider()
	}
	return t.tp
}

// Shutdown exports the spans still buffered and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.sdk == nil {
		return nil
	}
	return t.sdk.Shutdown(ctx)
}

// remote is the context of a W3C traceparent (and tracestate), or ctx when
// they do not parse.
func (t *Tracing) remote(ctx context.Context, traceParent, traceState string) context.Context {
	if traceParent == "" {
		return ctx
	}
	c := propagation.MapCarrier{"traceparent": traceParent}
	if traceState != "" {
		c["tracestate"] = traceState
	}
	return propagation.TraceContext{}.Extract(ctx, c)
}

// Attribute keys of the engine's own.
const (
	keyDisposition = attribute.Key("effectively.disposition")
	keyReason      = attribute.Key("effectively.dead_letter.reason")
	keyEventKey    = attribute.Key("effectively.event.key")
	keyEventType   = attribute.Key("effectively.event.type")
	keySubject     = attribute.Key("effectively.event.subject")
	keyGroup       = attribute.Key("messaging.consumer.group.name")
)
