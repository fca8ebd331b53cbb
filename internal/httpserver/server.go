// Package httpserver serves the worker's operational endpoints: /metrics
// (Prometheus), /healthz (the process is alive), /readyz (the worker is a
// working member: checked at most once a second; advisory checks are
// reported without making it unready), /status (the worker's own view of
// its partitions, JSON, when [Options.Status] is set), when
// [Options.Pprof] turns it on, /debug/pprof (Go profiles,
// unauthenticated), and when [Options.Console] is set, the operations
// console under /console/ (authenticated by the console itself). Nothing
// else it serves changes the worker's state.
package httpserver

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
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
	// Advisory checks are reported in /readyz's body but do not make the
	// worker unready (a database blip must not take every pod out at once).
	Advisory bool
}

// Server is the HTTP server.
type Server struct {
	srv *http.Server
	ln  net.Listener
	log *zap.Logger
}

// New listens on addr (so a port conflict fails at start-up) and prepares the
// handlers.
func New(addr string, gatherer prometheus.Gatherer, checks []Check, log *zap.Logger, opts Options) (*Server, error) {
	opts = opts.withDefaults()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	Mount(mux, gatherer, checks, opts)
	return &Server{
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: opts.ReadHeaderTimeout,
			ReadTimeout:       opts.ReadTimeout,
			// WriteTimeout stays 0: net/http/pprof refuses a profile at least
			// as long as the server's WriteTimeout (the default 30 s one
			// included). Every route sets its own write deadline instead
			// (writeDeadline), the profiles a longer one.
			IdleTimeout:    opts.IdleTimeout,
			MaxHeaderBytes: opts.MaxHeaderBytes,
		},
		ln:  ln,
		log: log,
	}, nil
}

// Mount registers the routes on mux (a program's own, when it embeds the
// worker): GET /metrics, /healthz, /readyz, and as opts say /status,
// /debug/pprof/ and /console/. A route mux already has panics, as
// http.ServeMux does.
func Mount(mux *http.ServeMux, gatherer prometheus.Gatherer, checks []Check, opts Options) {
	opts = opts.withDefaults()
	route := func(pattern string, h http.Handler) {
		mux.Handle(pattern, writeDeadline(opts.WriteTimeout, 0, h))
	}
	route("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	if opts.Pprof {
		// Profiles, for finding where a worker's time goes. Unauthenticated,
		// hence off unless http.pprof turns them on. /debug/pprof/cmdline is
		// left out: the command line can carry a postgres URL.
		profile := func(pattern string, h http.HandlerFunc) {
			mux.Handle(pattern, writeDeadline(opts.WriteTimeout, profileSecondsDefault*time.Second, h))
		}
		profile("GET /debug/pprof/", pprof.Index)
		profile("GET /debug/pprof/profile", pprof.Profile)
		profile("GET /debug/pprof/trace", pprof.Trace)
		profile("GET /debug/pprof/symbol", pprof.Symbol)
	}
	route("GET /healthz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	}))
	ready := newReadiness(checks, ReadyMaxAge)
	route("GET /readyz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok, status := ready.get(r.Context())
		w.Header().Set("Content-Type", "application/json")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ready": ok, "checks": status})
	}))
	if opts.Status != nil {
		route("GET /status", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(opts.Status(r.Context()))
		}))
	}
	if opts.Console != nil {
		route("/console/", opts.Console)
	}
}

// writeDeadline serves h with the connection's write deadline d from now;
// for a profile route (profileDefault > 0) d plus the profile's duration:
// its seconds parameter, or profileDefault when there is none.
func writeDeadline(d, profileDefault time.Duration, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := d // per request: a profile's extra time must not accumulate
		if profileDefault > 0 {
			extra := profileDefault
			if sec, err := strconv.ParseInt(r.URL.Query().Get("seconds"), 10, 64); err == nil && sec > 0 && sec < math.MaxInt64/int64(time.Second) {
				extra = time.Duration(sec) * time.Second
			}
			d += extra
		}
		// An error means the connection cannot take deadlines (only in
		// tests with a recorder); the handler runs without one.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d))
		h.ServeHTTP(w, r)
	})
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
