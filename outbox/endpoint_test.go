package outbox

import (
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/test/pgtest"
)

// An intent to a named target stores the target's name and the path, never
// its URL or credentials; the dispatcher resolves both at each delivery, so
// a token rotated while intents wait is the one they are sent with, and an
// intent whose target has no URL waits instead of being lost.
func TestNamedTargetsAreResolvedAtDelivery(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var auth, keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		keys = append(keys, r.URL.Path+" "+r.Header.Get("X-Api-Key"))
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	token, key := filepath.Join(dir, "token"), filepath.Join(dir, "key")
	require.NoError(t, os.WriteFile(token, []byte("tok-1\n"), 0o600))
	require.NoError(t, os.WriteFile(key, []byte("key-1"), 0o600))

	db := pgtest.New(t)
	targets := map[string]Endpoint{}
	b := &bundle{db: db, ctx: t.Context(), d: NewDispatcher(db.Pool, Options{Timeout: 2 * time.Second,
		RetryInitial: time.Millisecond, RetryMax: 5 * time.Millisecond, Targets: targets})}
	intent := func(key, path string) Intent {
		return Intent{EventKey: key, Operation: "warehouse.reserve", Resource: "order:" + key, Method: http.MethodPost,
			TargetName: "warehouse", Target: path, Request: json.RawMessage(`{}`), Idempotent: true}
	}

	// Not configured: the intent waits, with the fix in its error.
	b.record(t, intent("e1", "/reservations"))
	_, err := b.d.DeliverOnce(b.ctx)
	require.NoError(t, err)
	state, _, _, lastErr := b.state(t, "e1", "warehouse.reserve")
	require.Equal(t, "pending", state)
	require.Contains(t, *lastErr, "targets.warehouse.url")

	// Configured: sent to the URL joined with the path, with the credentials.
	targets["warehouse"] = Endpoint{URL: srv.URL + "/v1/", BearerTokenFile: token, HeaderFiles: map[string]string{"X-Api-Key": key}}
	_, err = db.Pool.Exec(b.ctx, `UPDATE outbox SET next_attempt_at = now()`)
	require.NoError(t, err)
	b.deliverUntil(t, 10*time.Second)

	// Rotated while the next intent waits: the new token is the one sent.
	require.NoError(t, os.WriteFile(token, []byte("tok-2"), 0o600))
	b.record(t, intent("e2", "reservations/2"))
	b.deliverUntil(t, 10*time.Second)

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"Bearer tok-1", "Bearer tok-2"}, auth)
	require.Equal(t, []string{"/v1/reservations key-1", "/v1/reservations/2 key-1"}, keys)
	require.Equal(t, int64(0), db.Count(t, `SELECT count(*) FROM outbox WHERE target LIKE '%tok%' OR target LIKE '%key%' OR target LIKE '%http%'`),
		"rows hold no URL and no credential")
	require.Equal(t, int64(2), db.Count(t, `SELECT count(*) FROM outbox WHERE target_name = 'warehouse' AND state = 'sent'`))
}

// A target with a CA of its own is reached over TLS verified against it;
// without it, the same server is refused (the intent waits, nothing sent).
func TestTargetCAFile(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls.Add(1) }))
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))

	db := pgtest.New(t)
	targets := map[string]Endpoint{"secure": {URL: srv.URL}}
	b := &bundle{db: db, ctx: t.Context(), d: NewDispatcher(db.Pool, Options{Timeout: 2 * time.Second,
		RetryInitial: time.Millisecond, RetryMax: 5 * time.Millisecond, Targets: targets})}
	b.record(t, Intent{EventKey: "e1", Operation: "secure.call", Resource: "r", Method: http.MethodPost,
		TargetName: "secure", Target: "/x", Request: json.RawMessage(`{}`), Idempotent: true})
	_, err := b.d.DeliverOnce(b.ctx)
	require.NoError(t, err)
	state, _, _, lastErr := b.state(t, "e1", "secure.call")
	require.Equal(t, "pending", state)
	require.Contains(t, *lastErr, "certificate")
	require.Zero(t, calls.Load())

	b.d = NewDispatcher(db.Pool, Options{Timeout: 2 * time.Second, RetryInitial: time.Millisecond, RetryMax: 5 * time.Millisecond,
		Targets: map[string]Endpoint{"secure": {URL: srv.URL, CAFile: ca}}})
	_, err = db.Pool.Exec(b.ctx, `UPDATE outbox SET next_attempt_at = now()`)
	require.NoError(t, err)
	b.deliverUntil(t, 10*time.Second)
	require.Equal(t, int64(1), calls.Load())
}
