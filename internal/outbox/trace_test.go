package outbox

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/internal/pgtest"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// An intent's trace context is sent as the traceparent and tracestate
// headers (one without none sends none), and every call goes through
// WrapTransportFunc's transport when it is set.
func TestTraceContextHeadersAndWrappedTransport(t *testing.T) {
	t.Parallel()
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	var (
		mu  sync.Mutex
		got = map[string][2]string{} // path → traceparent, tracestate
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.URL.Path] = [2]string{r.Header.Get("traceparent"), r.Header.Get("tracestate")}
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	var wrapped atomic.Int64
	db := pgtest.New(t)
	d := NewDispatcher(db.Pool, Options{Timeout: 2 * time.Second, RetryInitial: time.Millisecond, RetryMax: 5 * time.Millisecond,
		WrapTransportFunc: func(next http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				wrapped.Add(1)
				return next.RoundTrip(r)
			})
		}})
	b := &bundle{db: db, d: d, ctx: t.Context()}
	traced := crmIntent(srv.URL, "ev-1", "acct-1")
	traced.TraceParent, traced.TraceState = parent, "k=v"
	b.record(t, traced, crmIntent(srv.URL, "ev-2", "acct-2"))
	require.EqualValues(t, 1, db.Count(t, `SELECT count(*) FROM outbox WHERE trace_parent IS NULL AND trace_state IS NULL`),
		"no trace context is stored as NULL")
	b.deliverUntil(t, 5*time.Second)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string][2]string{"/contacts/acct-1": {parent, "k=v"}, "/contacts/acct-2": {"", ""}}, got)
	require.EqualValues(t, 2, wrapped.Load(), "both calls went through the wrapped transport")
}
