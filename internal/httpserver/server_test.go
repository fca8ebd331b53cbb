package httpserver

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newServer prepares a server on a free loopback port; it is stopped when
// the test ends.
func newServer(t *testing.T, checks []Check, opts Options) *Server {
	t.Helper()
	s, err := New("127.0.0.1:0", prometheus.NewRegistry(), checks, zap.NewNop(), opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
		_ = s.ln.Close()
	})
	return s
}

// get serves one request through the server's handler.
func get(s *Server, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	s.srv.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}

// client talks to a started server without keeping connections (goleak).
func client() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
}

func TestPprofOffByDefault(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil, Options{})
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/profile?seconds=1", "/debug/pprof/heap", "/debug/pprof/trace", "/debug/pprof/symbol"} {
		require.Equal(t, http.StatusNotFound, get(s, p).Code, p)
	}
	require.Equal(t, http.StatusOK, get(s, "/metrics").Code)
	require.Equal(t, http.StatusOK, get(s, "/healthz").Code)
}

// With pprof on, a CPU profile longer than the write timeout still comes
// back whole: the profile routes get its duration on top.
func TestPprofOnOutlivesWriteTimeout(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil, Options{Pprof: true, WriteTimeout: 300 * time.Millisecond})
	require.Equal(t, http.StatusOK, get(s, "/debug/pprof/").Code)
	require.Equal(t, http.StatusOK, get(s, "/debug/pprof/heap").Code)
	require.Equal(t, http.StatusNotFound, get(s, "/debug/pprof/cmdline").Code, "the command line can carry secrets")
	s.Start()

	resp, err := client().Get("http://" + s.Addr() + "/debug/pprof/profile?seconds=1")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.NotEmpty(t, body)
}

func TestServerTimeouts(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil, Options{})
	require.Equal(t, ReadHeaderTimeoutDefault, s.srv.ReadHeaderTimeout)
	require.Equal(t, ReadTimeoutDefault, s.srv.ReadTimeout)
	require.Equal(t, IdleTimeoutDefault, s.srv.IdleTimeout)
	require.Equal(t, MaxHeaderBytesDefault, s.srv.MaxHeaderBytes)
	require.Zero(t, s.srv.WriteTimeout, "per route, so that pprof can profile for 30 s")

	s = newServer(t, nil, Options{ReadHeaderTimeout: time.Second, ReadTimeout: 2 * time.Second, IdleTimeout: 3 * time.Second, MaxHeaderBytes: 4096})
	require.Equal(t, time.Second, s.srv.ReadHeaderTimeout)
	require.Equal(t, 2*time.Second, s.srv.ReadTimeout)
	require.Equal(t, 3*time.Second, s.srv.IdleTimeout)
	require.Equal(t, 4096, s.srv.MaxHeaderBytes)
}

// A response not written within the write timeout is cut off: a slow
// client (or a slow handler) cannot hold the connection.
func TestWriteTimeoutCutsResponse(t *testing.T) {
	t.Parallel()
	slow := Check{Name: "slow", Func: func(ctx context.Context) error {
		time.Sleep(500 * time.Millisecond)
		return nil
	}}
	s := newServer(t, []Check{slow}, Options{WriteTimeout: 100 * time.Millisecond})
	s.Start()
	resp, err := client().Get("http://" + s.Addr() + "/readyz")
	if err == nil {
		resp.Body.Close()
	}
	require.Error(t, err, "the response must not arrive after the write deadline")
}

// Many probes within a second run the checks once; concurrent ones share one
// evaluation.
func TestReadyzCached(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	counted := Check{Name: "postgres", Func: func(ctx context.Context) error {
		calls.Add(1)
		time.Sleep(20 * time.Millisecond) // long enough for the probes to overlap
		return nil
	}}
	s := newServer(t, []Check{counted}, Options{})
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			rec := get(s, "/readyz")
			assert.Equal(t, http.StatusOK, rec.Code)
			assert.JSONEq(t, `{"ready":true,"checks":{"postgres":"ok"}}`, rec.Body.String())
		})
	}
	wg.Wait()
	require.Equal(t, int64(1), calls.Load())
}

// The cached answer expires after ReadyMaxAge; a failure is cached too.
func TestReadinessMaxAge(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	fail := atomic.Bool{}
	r := newReadiness([]Check{{Name: "group", Func: func(context.Context) error {
		calls.Add(1)
		if fail.Load() {
			return errors.New("not yet joined")
		}
		return nil
	}}}, ReadyMaxAge)
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }

	ok, _ := r.get(context.Background())
	require.True(t, ok)
	fail.Store(true)
	now = now.Add(ReadyMaxAge - time.Millisecond)
	ok, _ = r.get(context.Background())
	require.True(t, ok, "within ReadyMaxAge the cached answer stands")
	require.Equal(t, int64(1), calls.Load())

	now = now.Add(time.Millisecond)
	ok, status := r.get(context.Background())
	require.False(t, ok)
	require.Equal(t, "not yet joined", status["group"])
	require.Equal(t, int64(2), calls.Load())

	ok, _ = r.get(context.Background())
	require.False(t, ok)
	require.Equal(t, int64(2), calls.Load())
}

// A probe that gives up does not fail the evaluation the others share.
func TestReadinessDetachedFromProbe(t *testing.T) {
	t.Parallel()
	r := newReadiness([]Check{{Name: "postgres", Func: func(ctx context.Context) error { return ctx.Err() }}}, ReadyMaxAge)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ok, status := r.get(ctx)
	require.True(t, ok, "%v", status)
}

// An advisory check's failure is reported but leaves the worker ready; a
// required one's makes it unready.
func TestReadyzAdvisoryChecks(t *testing.T) {
	t.Parallel()
	down := errors.New("postgres down")
	s := newServer(t, []Check{
		{Name: "group", Func: func(context.Context) error { return nil }},
		{Name: "postgres", Advisory: true, Func: func(context.Context) error { return down }},
	}, Options{})
	rec := get(s, "/readyz")
	require.Equal(t, http.StatusOK, rec.Code)
	require.JSONEq(t, `{"ready":true,"checks":{"group":"ok","postgres":"postgres down"}}`, rec.Body.String())

	s = newServer(t, []Check{
		{Name: "group", Func: func(context.Context) error { return errors.New("not yet joined") }},
		{Name: "postgres", Advisory: true, Func: func(context.Context) error { return nil }},
	}, Options{})
	rec = get(s, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.JSONEq(t, `{"ready":false,"checks":{"group":"not yet joined","postgres":"ok"}}`, rec.Body.String())
}

// /status serves the Status function's answer as JSON, and only when set.
func TestStatusRoute(t *testing.T) {
	t.Parallel()
	require.Equal(t, http.StatusNotFound, get(newServer(t, nil, Options{}), "/status").Code)
	s := newServer(t, nil, Options{Status: func(context.Context) any { return map[string]int{"partitions": 3} }})
	rec := get(s, "/status")
	require.Equal(t, http.StatusOK, rec.Code)
	require.JSONEq(t, `{"partitions":3}`, rec.Body.String())
}

// The console is mounted only when given: off (the default), /console/ does
// not exist.
func TestConsoleMountedOnlyWhenOn(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil, Options{})
	for _, p := range []string{"/console/", "/console/login", "/console/dead-letters"} {
		require.Equal(t, http.StatusNotFound, get(s, p).Code, p)
	}
	on := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	s = newServer(t, nil, Options{Console: on})
	require.Equal(t, http.StatusTeapot, get(s, "/console/dead-letters").Code)
	require.Equal(t, http.StatusOK, get(s, "/healthz").Code)
}
