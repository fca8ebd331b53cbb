package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/internal/redact"
)

// WorkerOptions are what a program that embeds the worker gives it beyond
// its configuration. Every field is optional.
type WorkerOptions struct {
	// Logger receives the worker's logs. What the worker logs is redacted
	// (the credentials of URLs, by redact.*) before it reaches the
	// logger's core. Nil: JSON or console logs on stderr as log.* says,
	// as the command line writes them.
	Logger *zap.Logger
	// Registerer is where the worker registers its metrics
	// (effectively_*, effectively_kafka_*). Nil: a registry of the
	// worker's own, with the Go and process collectors, served on
	// /metrics. A registerer takes one worker's metrics: give a second
	// worker in the same process another (or
	// prometheus.WrapRegistererWith a label of its own).
	Registerer prometheus.Registerer
	// Gatherer is what /metrics serves and the console samples. Nil: the
	// Registerer, when it is also a Gatherer (a *prometheus.Registry).
	Gatherer prometheus.Gatherer
	// TracerProvider is where the worker's spans go (one per batch, per
	// event, per outbound call, per statement). Nil: the OTEL_* variables
	// decide, as for the command line (off unless an exporter is set).
	TracerProvider trace.TracerProvider
	// Mux, when set, takes the worker's routes — GET /metrics, /healthz,
	// /readyz, /status, /debug/pprof/ (http.pprof) and /console/
	// (console.enabled) — and http.addr is not listened on: the program
	// serves them on its own server. A route the mux already has panics,
	// as http.ServeMux does.
	Mux *http.ServeMux
	// Migrate applies pending schema migrations before the worker starts
	// (`run --migrate`). Otherwise a schema behind the build's migrations
	// stops the start with the command that fixes it.
	Migrate bool
}

// Worker is one member of the consumer group: it applies the events of the
// configured topics with an App's handlers, exactly once in effect, until
// its context ends. `run` is a Worker; a program embeds one to run it beside
// its own HTTP server, with its own logger, metrics registry and tracer
// provider.
type Worker struct {
	app     *App
	cfg     config.Config
	opts    WorkerOptions
	log     *zap.Logger
	started atomic.Bool
}

// NewWorker returns a worker of app (its handlers, prerequisites, targets
// and migrations; app must not change afterwards) configured by cfg —
// config.Default() with fields set, or App.LoadConfig. cfg is validated
// here: the error names each key that is wrong and its fix. It sets the
// process's redaction rules (redact.*) to cfg's.
func NewWorker(app *App, cfg config.Config, opts WorkerOptions) (*Worker, error) {
	return newWorker(app, cfg, opts, false)
}

// newWorker is NewWorker; cliLogger says opts.Logger is the command
// line's, which redacts on its writer already.
func newWorker(app *App, cfg config.Config, opts WorkerOptions, cliLogger bool) (*Worker, error) {
	if app == nil {
		return nil, errors.New("service: NewWorker needs an App (service.New) with the build's handlers")
	}
	if err := cfg.Validate(); err != nil {
		return nil, UsageError(err)
	}
	if opts.Registerer != nil && opts.Gatherer == nil {
		g, ok := opts.Registerer.(prometheus.Gatherer)
		if !ok {
			return nil, UsageError(errors.New("WorkerOptions.Registerer is not a prometheus.Gatherer: set WorkerOptions.Gatherer to what /metrics should serve"))
		}
		opts.Gatherer = g
	}
	if opts.Gatherer != nil && opts.Registerer == nil {
		return nil, UsageError(errors.New("WorkerOptions.Gatherer is set without a Registerer: set WorkerOptions.Registerer to where the worker's metrics go"))
	}
	redact.SetDefault(cfg.RedactPolicy())
	log := opts.Logger
	switch {
	case log == nil:
		var err error
		if log, err = newLogger(cfg.Log, os.Stderr); err != nil {
			return nil, UsageError(err)
		}
	case !cliLogger:
		log = redactingLogger(log)
	}
	return &Worker{app: app, cfg: cfg, opts: opts, log: log}, nil
}

// Run joins the consumer group and applies events until ctx ends, then
// drains: in-flight batches commit or are cancelled within
// shutdown.drain_timeout, the member leaves the group, and Run returns
// nil. It returns an error at once when a dependency is unreachable or
// misconfigured at start-up (naming the address and the key to fix), and
// when the worker stops on its own. A Worker runs once.
func (w *Worker) Run(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return fmt.Errorf("service: this Worker has run already; make another with NewWorker")
	}
	return w.app.runWorker(ctx, w)
}

// LoadConfig reads the configuration as every command does — path (a YAML
// file; "" for none), then the EFFECTIVELY_* environment variables, over
// the build's defaults (App.Defaults, its targets and aliases) — and
// validates it.
func (a *App) LoadConfig(path string) (config.Config, error) {
	return config.Load(path, nil, a.extension())
}
