package httpserver

import (
	"context"
	"net/http"
	"time"
)

// Defaults of [Options]: a zero field takes its default.
const (
	// ReadHeaderTimeoutDefault bounds reading a request's headers.
	ReadHeaderTimeoutDefault = 5 * time.Second
	// ReadTimeoutDefault bounds reading a whole request.
	ReadTimeoutDefault = 10 * time.Second
	// WriteTimeoutDefault bounds writing a response (a slow reader holds a
	// connection no longer than this). A profile gets its duration on top.
	WriteTimeoutDefault = 15 * time.Second
	// IdleTimeoutDefault bounds how long a keep-alive connection waits for
	// its next request.
	IdleTimeoutDefault = time.Minute
	// MaxHeaderBytesDefault caps a request's headers; probes and scrapers
	// send a few hundred bytes.
	MaxHeaderBytesDefault = 64 << 10
)

// ReadyMaxAge is how old a /readyz answer can be: the checks run at most
// once per ReadyMaxAge, however many probes arrive, so probes cannot hammer
// the database pool.
const ReadyMaxAge = time.Second

// profileSecondsDefault is net/http/pprof's CPU profile duration when the
// request names none.
const profileSecondsDefault = 30

// Options tune the server. The zero value serves no profiles and takes the
// *Default timeouts.
type Options struct {
	// Pprof mounts Go's profiling endpoints under /debug/pprof/ (config key
	// http.pprof). They are unauthenticated.
	Pprof bool
	// Status, when set, is served as JSON at /status: the worker's own view
	// of its partitions, for `effectively status`.
	Status func(ctx context.Context) any
	// Console, when set, is served under /console/ (the operations console,
	// when console.enabled turns it on; it authenticates its own requests).
	// Nil mounts nothing.
	Console http.Handler
	// ReadHeaderTimeout bounds reading a request's headers; 0 means
	// [ReadHeaderTimeoutDefault].
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request; 0 means
	// [ReadTimeoutDefault].
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a response; 0 means [WriteTimeoutDefault].
	// The /debug/pprof/ routes get the profile's duration (its seconds
	// parameter, 30 s when absent) on top.
	WriteTimeout time.Duration
	// IdleTimeout bounds a keep-alive connection's wait for its next
	// request; 0 means [IdleTimeoutDefault].
	IdleTimeout time.Duration
	// MaxHeaderBytes caps a request's headers; 0 means
	// [MaxHeaderBytesDefault].
	MaxHeaderBytes int
}

// withDefaults returns o with its zero (or negative) fields set to their
// defaults.
func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.ReadHeaderTimeout, ReadHeaderTimeoutDefault)
	def(&o.ReadTimeout, ReadTimeoutDefault)
	def(&o.WriteTimeout, WriteTimeoutDefault)
	def(&o.IdleTimeout, IdleTimeoutDefault)
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = MaxHeaderBytesDefault
	}
	return o
}
