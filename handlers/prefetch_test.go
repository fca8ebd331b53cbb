package handlers

import (
	"context"
	"encoding/pem"
	"errors"
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

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/internal/outbox"
)

var errDown = errors.New("503")

func TestPrefetchFailuresCountOnlyWhileOthersAreAnswered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := newPrefetchFailures(2)
	bad := event.Event{Type: "thing.changed", Key: "bad"}
	good := event.Event{Type: "thing.changed", Key: "good"}
	other := event.Event{Type: "other.changed", Key: "other"}

	// An outage: nothing answers, nothing counts.
	for range 5 {
		require.ErrorIs(t, p.observe(ctx, bad, errDown), errDown)
		require.False(t, event.IsPermanent(p.observe(ctx, bad, errDown)))
	}
	// Another prefetcher's answers say nothing about this one's source.
	require.NoError(t, p.observe(ctx, other, nil))
	require.False(t, event.IsPermanent(p.observe(ctx, bad, errDown)))
	// A cancelled read is not the source's doing.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.NoError(t, p.observe(ctx, good, nil))
	require.False(t, event.IsPermanent(p.observe(cancelled, bad, context.Canceled)))
	require.False(t, event.IsPermanent(p.observe(ctx, bad, errDown)), "counted: 1")
	require.NoError(t, p.observe(ctx, good, nil))
	err := p.observe(ctx, bad, errDown)
	require.True(t, event.IsPermanent(err), "counted: 2")
	require.Equal(t, ReasonSourceUnavailable, event.ReasonOf(err))
	require.ErrorIs(t, err, errDown)

	// Forgotten once dead-lettered: a redrive starts again.
	require.NoError(t, p.observe(ctx, good, nil))
	require.False(t, event.IsPermanent(p.observe(ctx, bad, errDown)))
}

func TestPrefetchFailuresNilIsUnbounded(t *testing.T) {
	t.Parallel()
	var p *prefetchFailures
	require.Equal(t, errDown, p.observe(context.Background(), event.Event{}, errDown))
}

func TestPrefetchClientCapsAndDoesNotRedirect(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/moved":
			http.Redirect(w, r, "/exact", http.StatusMovedPermanently)
		case "/exact":
			_, _ = io.WriteString(w, strings.Repeat("x", MaxPrefetchResponseBytes))
		default:
			_, _ = io.WriteString(w, strings.Repeat("x", MaxPrefetchResponseBytes+1))
		}
	}))
	t.Cleanup(srv.Close)
	c := newPrefetchClient(0)

	resp, err := c.Get(srv.URL + "/moved")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMovedPermanently, resp.StatusCode)

	resp, err = c.Get(srv.URL + "/exact")
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err, "a body of exactly the cap is fine")
	require.Len(t, b, MaxPrefetchResponseBytes)

	resp, err = c.Get(srv.URL + "/big")
	require.NoError(t, err)
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.ErrorIs(t, err, ErrResponseTooLarge)
}

// A prefetcher reads from a target with the target's credentials and TLS
// settings, as the outbox calls it: the bearer token and header files read
// at each request, the target's CA trusted (and only for it), no redirect
// followed, bodies capped, and a wrapper (tracing) around every client.
func TestTargetRequestsCarryCredentialsAndTLS(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.URL.EscapedPath()+"?"+r.URL.RawQuery+" "+r.Header.Get("Authorization")+" "+r.Header.Get("X-Api-Key"))
		mu.Unlock()
		if r.URL.Path == "/v1/big" {
			_, _ = io.WriteString(w, strings.Repeat("x", MaxPrefetchResponseBytes+1))
			return
		}
		if r.URL.Path == "/v1/moved" {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	ca, token, key := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "token"), filepath.Join(dir, "key")
	require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
	require.NoError(t, os.WriteFile(token, []byte("tok-1\n"), 0o600))
	require.NoError(t, os.WriteFile(key, []byte("key-1"), 0o600))

	reg := &Registry{}
	reg.Target("source", Idempotent)
	reg.Target("plain", Idempotent)
	env := (*engineRegistry)(reg).Env(map[string]outbox.Endpoint{
		"source": {URL: srv.URL + "/v1?tenant=t1", BearerTokenFile: token, HeaderFiles: map[string]string{"X-Api-Key": key}, CAFile: ca},
		"plain":  {URL: srv.URL + "/v1"}, // the same server without its CA: refused
	}, outbox.Expiry{}, nil, 0)
	var wrapped atomic.Int64
	env = env.wrapTransport(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) { wrapped.Add(1); return rt.RoundTrip(r) })
	})
	src, err := env.Target("source")
	require.NoError(t, err)
	get := func(t *testing.T, tgt Target, path string) (*http.Response, error) {
		req, err := tgt.NewRequest(t.Context(), http.MethodGet, path, nil)
		require.NoError(t, err)
		return tgt.Do(req)
	}

	resp, err := get(t, src, url.PathEscape("a/b"))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, os.WriteFile(token, []byte("tok-2"), 0o600), "rotated")
	resp, err = get(t, src, "x?page=2")
	require.NoError(t, err)
	resp.Body.Close()
	resp, err = get(t, src, "moved")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusFound, resp.StatusCode, "not followed")
	resp, err = get(t, src, "big")
	require.NoError(t, err)
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.ErrorIs(t, err, ErrResponseTooLarge)

	plain, err := env.Target("plain")
	require.NoError(t, err)
	_, err = get(t, plain, "x")
	require.ErrorContains(t, err, "certificate", "the source's CA is the source's only")

	mu.Lock()
	require.Equal(t, []string{
		"/v1/a%2Fb?tenant=t1 Bearer tok-1 key-1",
		"/v1/x?tenant=t1&page=2 Bearer tok-2 key-1",
		"/v1/moved?tenant=t1 Bearer tok-2 key-1",
		"/v1/big?tenant=t1 Bearer tok-2 key-1",
	}, got)
	mu.Unlock()
	require.Equal(t, int64(5), wrapped.Load(), "every call, the refused one included, went through the wrapper")

	// A path an event could make to reach beyond the target is refused
	// before anything is sent, and so is one that replaces its parameter.
	for _, p := range []string{url.PathEscape("x") + "/../admin", "%2e%2e/admin", url.PathEscape("x/../../admin"), "//evil.com/", "x?tenant=t2"} {
		_, err := src.NewRequest(t.Context(), http.MethodGet, p, nil)
		require.ErrorIs(t, err, ErrUnsafePath, p)
	}
	// A credential file that went missing names its key, not its content.
	require.NoError(t, os.Remove(token))
	_, err = src.NewRequest(t.Context(), http.MethodGet, "x", nil)
	require.ErrorContains(t, err, "targets.source.bearer_token_file")
}

// The HTTP client's errors carry the whole URL; a Target's Do redacts them
// — refused, timed out, TLS refused — and keeps them classifiable.
func TestTargetDoErrorsHoldNoSecret(t *testing.T) {
	t.Parallel()
	const secret = "Pf7SecretValue"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := ln.Addr().String()
	require.NoError(t, ln.Close())
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = silent.Close() })
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); _ = c.Close() }()
		}
	}()
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(tlsSrv.Close)

	reg := &Registry{}
	for _, n := range []string{"refused", "user", "timeout", "tls", "slack"} {
		reg.Target(n, Idempotent)
	}
	env := (*engineRegistry)(reg).Env(map[string]outbox.Endpoint{
		"refused": {URL: "http://" + refused + "/v1?api_key=" + secret},
		"user":    {URL: "http://" + secret + "@" + refused + "/v1"},
		"timeout": {URL: "http://" + silent.Addr().String() + "/v1?sig=" + secret},
		"tls":     {URL: strings.Replace(tlsSrv.URL, "https://", "https://u:"+secret+"@", 1) + "/v1?X-Amz-Signature=" + secret},
		"slack":   {URL: "http://" + refused + "/services/T1/B2/" + secret},
	}, outbox.Expiry{}, &http.Client{Timeout: 2 * time.Second}, 0)
	// A timeout reads "Client.Timeout exceeded" or, when the transport's
	// context error wins net/http's race, "context deadline exceeded":
	// either way the *url.Error says Timeout (checked below).
	for n, want := range map[string]string{"refused": "connection refused", "user": "connection refused", "timeout": "",
		"tls": "certificate", "slack": "connection refused"} {
		tgt, err := env.Target(n)
		require.NoError(t, err)
		req, err := tgt.NewRequest(t.Context(), http.MethodGet, "x", nil)
		require.NoError(t, err)
		_, err = tgt.Do(req)
		require.Error(t, err, n)
		require.Contains(t, err.Error(), want, n)
		require.NotContains(t, err.Error(), secret, n)
		require.Contains(t, err.Error(), "xxxxx", n)
		var ue *url.Error
		require.ErrorAs(t, err, &ue, n)
		require.Equal(t, n == "timeout", ue.Timeout(), n)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
