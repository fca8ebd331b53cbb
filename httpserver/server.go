// Package httpserver serves the worker's operational endpoints: /metrics
// (Prometheus), /healthz (the process is alive), /readyz (the worker can do
// its job: database reachable, group joined, no partition retrying) and
// /debug/pprof (Go profiles).
package httpserver

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// Check reports why the worker is not ready, or nil.
type Check struct {
	// Name identifies the check in /readyz output.
	Name string
	// Func returns nil when ready.
	Func func(ctx context.Context) error
}

// Server is the HTTP server.
type Server struct {
	srv *http.Server
	ln  net.Listener
	log *zap.Logger
}

// New listens on addr (so a port conflict fails at start-up) and prepares the
// handlers.
func New(addr string, gatherer prometheus.Gatherer, checks []Check, log *zap.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	// Profiles, for finding where a worker's time goes (http.addr is
	// localhost unless configured otherwise).
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		status := map[string]string{}
		ready := true
		for _, c := range checks {
			if err := c.Func(ctx); err != nil {
				status[c.Name] = err.Error()
				ready = false
			} else {
				status[c.Name] = "ok"
			}
		}
		w.Header().Set("Content-Type", "application/json")
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ready": ready, "checks": status})
	})
	return &Server{
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second},
		ln:  ln,
		log: log,
	}, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Start serves in the background.
func (s *Server) Start() {
	go func() {
		if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server stopped", zap.Error(err))
		}
	}()
}

// Stop shuts the server down, waiting for in-flight requests until ctx ends.
func (s *Server) Stop(ctx context.Context) error { return s.srv.Shutdown(ctx) }
