// Command embedded runs the worker inside a program of its own: beside the
// program's HTTP server (one mux serves the program's routes and the
// worker's /metrics, /healthz, /readyz and /status), with the program's zap
// logger and Prometheus registry. The handlers are the reference domain's
// (examples/accounts); a team's would be its own.
//
// It reads the worker's configuration as `effectively run` does
// (EFFECTIVELY_* variables, or a file named by EMBEDDED_CONFIG) and listens
// on EMBEDDED_ADDR (default 127.0.0.1:8090). SIGINT or SIGTERM drains the
// worker, then stops the server.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/examples/accounts"
	"github.com/effectively-io/effectively/service"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "embedded:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// The program's own logger and registry.
	log, err := zap.NewProduction()
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // stderr
	log = log.With(zap.String("program", "embedded"))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	hellos := prometheus.NewCounter(prometheus.CounterOpts{Name: "embedded_hello_requests_total", Help: "Requests to /hello."})
	reg.MustRegister(hellos)

	// The build: the worker's handlers and migrations.
	app := service.New("embedded")
	accounts.Register(&app.Registry)
	app.Migrations(accounts.Migrations())
	cfg, err := app.LoadConfig(os.Getenv("EMBEDDED_CONFIG"))
	if err != nil {
		return err
	}

	// The program's routes and the worker's on one mux, one server.
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, _ *http.Request) {
		hellos.Inc()
		fmt.Fprintln(w, "hello from the program that embeds the worker")
	})
	worker, err := service.NewWorker(app, cfg, service.WorkerOptions{
		Logger: log.Named("worker"), Registerer: reg, Mux: mux,
	})
	if err != nil {
		return err
	}
	addr := os.Getenv("EMBEDDED_ADDR")
	if addr == "" {
		addr = "127.0.0.1:8090"
	}
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.ListenAndServe() }()
	log.Info("serving", zap.String("addr", addr))

	werr := worker.Run(ctx) // until SIGINT/SIGTERM, then drained
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("stopping the server", zap.Error(err))
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return errors.Join(werr, fmt.Errorf("serving %s: %w", addr, err))
	}
	return werr
}
