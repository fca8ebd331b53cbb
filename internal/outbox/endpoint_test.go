package outbox

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/effectively-io/effectively/internal/pgtest"
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

// JoinURL keeps what a handler escaped escaped, and no path a handler
// makes from an event's content can reach beyond its target's URL: no
// other scheme, host, port or userinfo, no dot segment however it is
// spelled, no replaced credential in the query.
func TestJoinURL(t *testing.T) {
	t.Parallel()
	const base = "https://api.example.com:8443/api/v1/?api_key=K1"
	for _, tc := range []struct {
		name, base, path, want string
	}{
		{"plain", base, "contacts/42", "https://api.example.com:8443/api/v1/contacts/42?api_key=K1"},
		{"leading slash", base, "/contacts/42", "https://api.example.com:8443/api/v1/contacts/42?api_key=K1"},
		{"empty path", base, "", "https://api.example.com:8443/api/v1/?api_key=K1"},
		{"trailing slash kept", "https://h/v1", "reservations/", "https://h/v1/reservations/"},
		{"escaped slash stays escaped", base, "/contacts/" + url.PathEscape("x/../../../admin/users/1"), ""},
		{"escaped slash of an ordinary ID", "https://h/v1", "/contacts/" + url.PathEscape("a/b"), "https://h/v1/contacts/a%2Fb"},
		{"escaped space and unicode", "https://h/v1", "/contacts/" + url.PathEscape("Zoë Ann"), "https://h/v1/contacts/Zo%C3%AB%20Ann"},
		{"base path escapes kept", "https://h/v1/a%2Fb/", "c", "https://h/v1/a%2Fb/c"},
		{"@ in a segment is a path", "https://h/v1", "@evil.com/x", "https://h/v1/@evil.com/x"},
		{"an address with @ as an ID", "https://h/v1", "/contacts/ann@example.com", "https://h/v1/contacts/ann@example.com"},
		{"a query of its own merges", base, "/contacts?page=2", "https://api.example.com:8443/api/v1/contacts?api_key=K1&page=2"},
		{"a query, base without one", "https://h/v1", "/contacts?page=2&q=a%26b", "https://h/v1/contacts?page=2&q=a%26b"},
		{"dot segment", base, "/contacts/../admin", ""},
		{"dot segment alone", base, "..", ""},
		{"single dot", base, "/./contacts", ""},
		{"encoded dots", base, "/contacts/%2e%2e/admin", ""},
		{"mixed-case encoded dots", base, "/contacts/.%2E/admin", ""},
		{"dots behind an encoded slash", base, "/contacts/x%2F..%2F..%2Fadmin", ""},
		{"servlet path parameter", base, "/contacts/..;/admin", ""},
		{"backslash", base, "/contacts/..\\admin", ""},
		{"encoded backslash", base, "/contacts/%5C..%5Cadmin", ""},
		{"replaces the base's credential", base, "/contacts?api_key=attacker", ""},
		{"replaces it in another case", base, "/contacts?API_KEY=attacker", ""},
		{"replaces it encoded", base, "/contacts?api%5Fkey=attacker", ""},
		{"network path", base, "//evil.com/x", ""},
		{"network path, three slashes", base, "///evil.com/x", ""},
		{"absolute URL", base, "https://evil.com/x", ""},
		{"scheme without slashes", base, "http:evil.com", ""},
		{"host and port as a first segment", base, "evil.com:80/x", ""},
		{"userinfo and host", base, "//user@evil.com/", ""},
		{"fragment", base, "/contacts#x", ""},
		{"control character", base, "/contacts/%0d%0aHost:evil", ""},
		{"NUL", base, "/contacts/a%00b", ""},
		{"overlong UTF-8 dot", base, "/contacts/%c0%ae%c0%ae/admin", ""},
		{"invalid escape", base, "/contacts/%zz", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.base
			got, err := JoinURL(b, tc.path)
			if tc.want == "" {
				require.ErrorIs(t, err, ErrUnsafePath, "got %q", got)
				require.NotContains(t, err.Error(), "attacker", "a refused value is not echoed")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			// What goes on the wire: net/http sends the escaped path as it
			// is, to the base's host.
			req, err := http.NewRequest(http.MethodGet, got, nil)
			require.NoError(t, err)
			bu, _ := url.Parse(b)
			require.Equal(t, bu.Host, req.URL.Host)
			require.Equal(t, bu.Scheme, req.URL.Scheme)
			require.Equal(t, strings.TrimPrefix(got, bu.Scheme+"://"+bu.Host), req.URL.RequestURI())
		})
	}
	_, err := JoinURL("/relative", "x")
	require.Error(t, err)
}

// What reaches the target of an escaped ID is one segment, and the
// target's bearer token and API key never go to a path an event chose
// beyond it: an intent with a traversal path, or one that would replace the
// target's api_key, is dead-lettered without a call.
func TestDispatcherKeepsPathsEscapedAndRefusesTraversal(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.EscapedPath()+"?"+r.URL.RawQuery+" "+r.Header.Get("Authorization"))
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	token := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(token, []byte("tok-1"), 0o600))
	db := pgtest.New(t)
	b := &bundle{db: db, ctx: t.Context(), d: NewDispatcher(db.Pool, Options{Timeout: 2 * time.Second,
		RetryInitial: time.Millisecond, RetryMax: 5 * time.Millisecond,
		Targets: map[string]Endpoint{"partner": {URL: srv.URL + "/api/v1/contacts?api_key=K1", BearerTokenFile: token}}})}
	intent := func(key, path string) Intent {
		return Intent{EventKey: key, Operation: "partner.sync", Resource: key, Method: http.MethodPut,
			TargetName: "partner", Target: path, Request: json.RawMessage(`{}`), Idempotent: true}
	}
	b.record(t, intent("ok", url.PathEscape("a/b")), intent("page", "x?page=2"),
		intent("evil", url.PathEscape("x")+"/../../../admin/users/1"), intent("evil2", "%2e%2e/admin"),
		intent("evil3", url.PathEscape("x/../../../admin/users/1")), intent("evil4", "x?api_key=attacker"))
	b.deliverUntil(t, 10*time.Second)

	mu.Lock()
	require.ElementsMatch(t, []string{"/api/v1/contacts/a%2Fb?api_key=K1 Bearer tok-1", "/api/v1/contacts/x?api_key=K1&page=2 Bearer tok-1"}, seen)
	mu.Unlock()
	for _, k := range []string{"evil", "evil2", "evil3", "evil4"} {
		state, attempts, _, lastErr := b.state(t, k, "partner.sync")
		require.Equal(t, "dead_lettered", state, k)
		require.Equal(t, 1, attempts, k)
		require.Contains(t, *lastErr, ErrUnsafePath.Error(), k)
		require.NotContains(t, *lastErr, "attacker", k)
	}
}

// A target's URL may carry its credential (a query key, a token as the user
// name, a webhook's secret path): none of it reaches last_error or the log
// when the call fails — refused, timed out, TLS refused — or when the
// target's answer echoes what it was sent.
func TestDispatcherErrorsHoldNoSecret(t *testing.T) {
	t.Parallel()
	const secret = "Zq7SecretValue"
	refused := closedAddr(t)
	// Accepts and never answers: a timeout, and a TLS handshake that never
	// completes.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = silent.Close() })
	var conns sync.WaitGroup
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() { defer conns.Done(); _, _ = io.Copy(io.Discard, c); _ = c.Close() }()
		}
	}()
	t.Cleanup(conns.Wait)
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(tlsSrv.Close)
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = fmt.Fprintf(w, "bad request %s %s key=%s", r.URL.String(), r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"))
	}))
	t.Cleanup(echo.Close)
	dir := t.TempDir()
	token, key := filepath.Join(dir, "token"), filepath.Join(dir, "key")
	require.NoError(t, os.WriteFile(token, []byte(secret+"-bearer"), 0o600))
	require.NoError(t, os.WriteFile(key, []byte(secret+"-header"), 0o600))

	targets := map[string]Endpoint{
		"refused": {URL: "http://" + refused + "/v1?api_key=" + secret},
		"user":    {URL: "http://" + secret + "@" + refused + "/v1"},
		"slack":   {URL: "http://" + refused + "/services/T0001/B0002/" + secret},
		"timeout": {URL: "http://" + silent.Addr().String() + "/v1?X-Amz-Signature=" + secret},
		"tls":     {URL: strings.Replace(tlsSrv.URL, "https://", "https://u:"+secret+"@", 1) + "/v1?token=" + secret},
		"echo":    {URL: echo.URL + "/v1?access_token=" + secret, BearerTokenFile: token, HeaderFiles: map[string]string{"X-Api-Key": key}},
	}
	core, logs := observer.New(zap.DebugLevel)
	db := pgtest.New(t)
	// The silent target times out; the others fail well inside the timeout
	// even on a loaded machine (a TLS handshake there has taken over 500 ms).
	b := &bundle{db: db, ctx: t.Context(), d: NewDispatcher(db.Pool, Options{Timeout: 3 * time.Second,
		RetryInitial: time.Hour, Targets: targets, Logger: zap.New(core)})}
	for name := range targets {
		b.record(t, Intent{EventKey: name, Operation: "op", Resource: name, Method: http.MethodPost,
			TargetName: name, Target: "/x", Request: json.RawMessage(`{}`), Idempotent: true})
	}
	n, err := b.d.DeliverOnce(b.ctx)
	require.NoError(t, err)
	require.Equal(t, len(targets), n)

	// A timeout reads "context deadline exceeded", "Client.Timeout
	// exceeded" or "timeout awaiting response headers", whichever of
	// net/http's timers fires first.
	wantErr := map[string]string{"refused": "connection refused", "user": "connection refused", "slack": "connection refused",
		"timeout": "deadline exceeded|[Tt]imeout", "tls": "certificate", "echo": "422"}
	for name, want := range wantErr {
		_, _, _, lastErr := b.state(t, name, "op")
		require.NotNil(t, lastErr, name)
		require.Regexp(t, want, *lastErr, "%s: the failure is the one meant", name)
		require.Contains(t, *lastErr, "xxxxx", "%s: the URL is shown, redacted", name)
		require.NotContains(t, *lastErr, secret, name)
	}
	require.Equal(t, len(targets), logs.FilterMessage("outbox intent will be retried").Len()+logs.FilterMessage("outbox intent needs an operator").Len())
	for _, e := range logs.All() {
		for k, v := range e.ContextMap() {
			require.NotContains(t, fmt.Sprint(v), secret, "log field %s of %q", k, e.Message)
		}
	}
}

func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// Whatever path a handler makes, a joined URL keeps the base's scheme,
// host, userinfo and query parameters, and has no dot segment a server
// could resolve, decoded or not.
func FuzzJoinURL(f *testing.F) {
	for _, s := range []string{"contacts/42", "x%2F..%2Fadmin", "%2e%2e", "//evil.com/", "@evil.com", "x?api_key=a", "..;/a", "a\\b", "https://evil/", "/a b?c=d&e"} {
		f.Add(s)
	}
	const base = "https://u:p@api.example.com:8443/v1/?api_key=K1"
	bu, _ := url.Parse(base)
	f.Fuzz(func(t *testing.T, path string) {
		got, err := JoinURL(base, path)
		if err != nil {
			return
		}
		u, err := url.Parse(got)
		if err != nil {
			t.Fatalf("%q joined to an unparseable %q: %v", path, got, err)
		}
		if u.Scheme != bu.Scheme || u.Host != bu.Host || u.User.String() != bu.User.String() || u.Query().Get("api_key") != "K1" || len(u.Query()["api_key"]) != 1 {
			t.Fatalf("%q changed the target: %q", path, got)
		}
		for _, seg := range strings.Split(u.Path, "/") {
			seg, _, _ = strings.Cut(seg, ";")
			if seg == "." || seg == ".." || strings.Contains(seg, "\\") {
				t.Fatalf("%q joined to %q, with a dot segment or a backslash", path, got)
			}
		}
		if !strings.HasPrefix(u.EscapedPath(), "/v1/") {
			t.Fatalf("%q left the base path: %q", path, got)
		}
	})
}
