package console

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// arrivedAt makes r look as if it arrived at the console's listener on
// port (net/http's server puts the connection's local address in the
// context; a recorder does not).
func arrivedAt(r *http.Request, port int) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}))
}

// The Host header decides before anything else. Without a token the console
// answers only a loopback host on the port the request arrived at, or an
// entry of console.allowed_hosts: a rebound name (evil.example resolving to
// 127.0.0.1) gets 421, without the CSRF token, and its POST does nothing,
// even though it is same-origin for the browser and passes the
// cross-origin checks.
func TestHostGuard(t *testing.T) {
	t.Parallel()
	noToken, err := New(Options{NoToken: true, AllowedHosts: []string{"console.example.com", "localhost:8080"}})
	require.NoError(t, err)
	const port = 9410
	get := func(h http.Handler, host string, port int) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/console/login", nil)
		r.Host = host
		if port > 0 {
			r = arrivedAt(r, port)
		}
		return serve(h, r)
	}
	for host, want := range map[string]int{
		// Loopback hosts on the bound port, however spelled.
		"localhost:9410": http.StatusSeeOther, "LOCALHOST:9410": http.StatusSeeOther, "LocalHost:09410": http.StatusSeeOther,
		"127.0.0.1:9410": http.StatusSeeOther, "127.0.0.2:9410": http.StatusSeeOther, "[::1]:9410": http.StatusSeeOther,
		"[0:0:0:0:0:0:0:1]:9410": http.StatusSeeOther, "[::ffff:127.0.0.1]:9410": http.StatusSeeOther,
		// The allowed hosts: a name on any port, localhost on 8080.
		"console.example.com": http.StatusSeeOther, "Console.Example.COM:443": http.StatusSeeOther, "localhost:8080": http.StatusSeeOther,
		// Everything else.
		"evil.example:9410": http.StatusMisdirectedRequest, "evil.example": http.StatusMisdirectedRequest,
		"localhost.:9410": http.StatusMisdirectedRequest, "localhost..:9410": http.StatusMisdirectedRequest,
		"localhost:9411": http.StatusMisdirectedRequest, "localhost": http.StatusMisdirectedRequest, "127.0.0.1": http.StatusMisdirectedRequest,
		"localhost:": http.StatusMisdirectedRequest, "": http.StatusMisdirectedRequest, "[::1]": http.StatusMisdirectedRequest,
		"[::1]:9411": http.StatusMisdirectedRequest, "localhost:9410.evil.example": http.StatusMisdirectedRequest,
		"localhost.evil.example:9410": http.StatusMisdirectedRequest, "127.0.0.1.nip.io:9410": http.StatusMisdirectedRequest,
		"evil.localhost:9410": http.StatusMisdirectedRequest, "0.0.0.0:9410": http.StatusMisdirectedRequest,
		"10.0.0.1:9410": http.StatusMisdirectedRequest, "[fe80::1%25lo]:9410": http.StatusMisdirectedRequest,
		"console.example.com.": http.StatusMisdirectedRequest, "sub.console.example.com": http.StatusMisdirectedRequest,
		"console.example.com.evil.example": http.StatusMisdirectedRequest, "localhost:8081": http.StatusMisdirectedRequest,
		"evil.example@localhost:9410": http.StatusMisdirectedRequest, `localhost\@evil.example:9410`: http.StatusMisdirectedRequest,
	} {
		rec := get(noToken, host, port)
		require.Equal(t, want, rec.Code, "Host %q", host)
		require.Equal(t, "DENY", rec.Header().Get("X-Frame-Options"), "Host %q: the security headers", host)
		if want == http.StatusMisdirectedRequest {
			require.Contains(t, rec.Body.String(), "console.allowed_hosts", host)
			require.Contains(t, rec.Body.String(), "http://localhost:9410/console/", host)
		}
	}
	// Without the connection's local address the bound port is unknown:
	// loopback hosts are refused, the allowed ones still pass.
	require.Equal(t, http.StatusMisdirectedRequest, get(noToken, "localhost:9410", 0).Code)
	require.Equal(t, http.StatusSeeOther, get(noToken, "console.example.com", 0).Code)

	// The rebinding attack itself: the attacker's page, same-origin with
	// the console under its own name, reads a page for the CSRF token and
	// posts with it. Both are refused before any handler; the same POST
	// naming localhost reaches the handler (the token is right).
	c, guarded, err := newConsole(Options{NoToken: true})
	require.NoError(t, err)
	page := get(guarded, "evil.example:9410", port)
	require.Equal(t, http.StatusMisdirectedRequest, page.Code)
	require.NotContains(t, page.Body.String(), c.local.csrf)
	post := func(host string) int {
		r := arrivedAt(form(http.MethodPost, "/console/nothing-here", url.Values{"csrf": {c.local.csrf}}), port)
		r.Host = host
		r.Header.Set("Origin", "http://"+host)
		r.Header.Set("Sec-Fetch-Site", "same-origin")
		return serve(guarded, r).Code
	}
	require.Equal(t, http.StatusMisdirectedRequest, post("evil.example:9410"))
	require.Equal(t, http.StatusNotFound, post("localhost:9410"), "past the guard, the CSRF check and into the handler")

	// With a token file the Host is checked only when console.allowed_hosts
	// is set: the token is the defence, and a rebound name never carries
	// the session cookie of the real one.
	withToken := newTestConsole(t)
	require.Equal(t, http.StatusOK, get(withToken, "evil.example:9410", port).Code)
	path := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(path, []byte("bob:"+testToken+"\n"), 0o600))
	listed, err := New(Options{TokenFile: path, AllowedHosts: []string{"console.example.com"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusMisdirectedRequest, get(listed, "evil.example:9410", port).Code)
	require.Equal(t, http.StatusOK, get(listed, "console.example.com", port).Code)
	require.Equal(t, http.StatusOK, get(listed, "localhost:9410", port).Code)

	_, err = New(Options{NoToken: true, AllowedHosts: []string{"http://console.example.com"}})
	require.ErrorContains(t, err, "console.allowed_hosts")
}

// On a real listener the bound port comes from the connection, for IPv4
// and IPv6 alike (port 0 in the address included).
func TestHostGuardOnListener(t *testing.T) {
	t.Parallel()
	h, err := New(Options{NoToken: true})
	require.NoError(t, err)
	for _, network := range []string{"127.0.0.1:0", "[::1]:0"} {
		ln, err := net.Listen("tcp", network)
		if err != nil && network == "[::1]:0" {
			t.Logf("no IPv6 loopback here: %v", err)
			continue
		}
		require.NoError(t, err)
		srv := httptest.NewUnstartedServer(h)
		srv.Listener.Close()
		srv.Listener = ln
		srv.Start()
		port := ln.Addr().(*net.TCPAddr).Port
		for host, want := range map[string]int{
			fmt.Sprintf("localhost:%d", port): http.StatusOK, fmt.Sprintf("127.0.0.1:%d", port): http.StatusOK,
			fmt.Sprintf("[::1]:%d", port): http.StatusOK, fmt.Sprintf("localhost:%d", port+1): http.StatusMisdirectedRequest,
			fmt.Sprintf("evil.example:%d", port): http.StatusMisdirectedRequest, "localhost": http.StatusMisdirectedRequest,
		} {
			req, err := http.NewRequest(http.MethodGet, srv.URL+"/console/outbox-nothing", nil)
			require.NoError(t, err)
			req.Host = host
			resp, err := srv.Client().Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			if want == http.StatusOK {
				want = http.StatusNotFound // the console's own "no page here", past the guard
			}
			require.Equal(t, want, resp.StatusCode, "%s, Host %q", network, host)
		}
		srv.Close()
	}
}

// The sign-in's next is a clean path of a console page or the Overview:
// no other host, however encoded.
func TestSafeNext(t *testing.T) {
	t.Parallel()
	for _, next := range []string{"/console/", "/console/outbox", "/console/dead-letters/42", "/console/outbox/7"} {
		require.Equal(t, next, safeNext(next))
	}
	for _, next := range []string{"", "/", "//evil.example", "https://evil.example/", "/console", "/console/login", "/console/login?next=x",
		`/console/../\evil.example`, `/console/..\evil.example`, `/console/\\evil.example`, "/console/../..//evil.example", "/console//evil.example",
		"/console/%2F%2Fevil.example", "/console/%5Cevil.example", "/console/%2e%2e/%5C%5Cevil.example", "/console/%252F%252Fevil.example",
		"/console/./outbox", "/console/outbox/..", "/console/../console/outbox", "/console/a/../../x", "/console/outbox?x=1", "/console/outbox#x",
		"/console/x:y", "/console/\x00", "/console/\t/evil.example", "/console/\r\nLocation: //evil.example", "/console/évil", "/console/ outbox",
		"/Console/outbox", "/console/@evil.example", "/console/outbox;evil"} {
		require.Equal(t, Prefix, safeNext(next), "%q", next)
	}

	// Through the sign-in: the redirect stays on the console.
	h := newTestConsole(t)
	for _, next := range []string{`/console/../\evil.example`, "/console/%2F%2Fevil.example", "/console/outbox"} {
		rec := serve(h, form(http.MethodPost, "/console/login", url.Values{"token": {testToken}, "next": {next}}))
		require.Equal(t, http.StatusSeeOther, rec.Code, next)
		want := Prefix
		if next == "/console/outbox" {
			want = next
		}
		require.Equal(t, want, rec.Header().Get("Location"), next)
	}
	// The sign-in page shows a hostile next only escaped, and signs in to
	// the Overview.
	rec := serve(h, httptest.NewRequest(http.MethodGet, "/console/login?next="+url.QueryEscape(`"><script>x</script>`), nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.NotContains(t, rec.Body.String(), "<script>x")
}

// The session cookie is HttpOnly, SameSite=Strict and scoped to the
// console; Secure over TLS or with console.cookie_secure (a proxy in front
// terminates TLS), and so is the cookie that signs out.
func TestSessionCookie(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(path, []byte("bob:"+testToken+"\n"), 0o600))
	signIn := func(h http.Handler, overTLS bool) *http.Cookie {
		r := form(http.MethodPost, "/console/login", url.Values{"token": {testToken}})
		if overTLS {
			r.TLS = &tls.ConnectionState{}
		}
		rec := serve(h, r)
		require.Equal(t, http.StatusSeeOther, rec.Code)
		cs := rec.Result().Cookies()
		require.Len(t, cs, 1)
		c := cs[0]
		require.Equal(t, cookieName, c.Name)
		require.True(t, c.HttpOnly)
		require.Equal(t, http.SameSiteStrictMode, c.SameSite)
		require.Equal(t, Prefix, c.Path)
		require.Empty(t, c.Domain, "host-only")
		require.Equal(t, int(SessionTTL/time.Second), c.MaxAge)
		return c
	}
	plain, err := New(Options{TokenFile: path})
	require.NoError(t, err)
	require.False(t, signIn(plain, false).Secure, "plain HTTP without console.cookie_secure: a browser would drop a Secure cookie")
	require.True(t, signIn(plain, true).Secure, "over TLS")
	proxied, err := New(Options{TokenFile: path, CookieSecure: true})
	require.NoError(t, err)
	session := signIn(proxied, false)
	require.True(t, session.Secure, "console.cookie_secure")

	// Signing out deletes it with the same attributes.
	page := httptest.NewRequest(http.MethodGet, "/console/nothing-here", nil)
	page.AddCookie(session)
	body := serve(proxied, page).Body.String()
	_, rest, found := strings.Cut(body, `name="csrf" value="`)
	require.True(t, found, body)
	csrf, _, _ := strings.Cut(rest, `"`)
	out := form(http.MethodPost, "/console/logout", url.Values{"csrf": {csrf}})
	out.AddCookie(session)
	rec := serve(proxied, out)
	require.Equal(t, http.StatusSeeOther, rec.Code)
	cs := rec.Result().Cookies()
	require.Len(t, cs, 1)
	require.Negative(t, cs[0].MaxAge)
	require.True(t, cs[0].Secure)
	require.True(t, cs[0].HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, cs[0].SameSite)
}

// Failed sign-ins are limited per client address and in all: past the
// budget a sign-in gets 429 with Retry-After and its token is not checked
// (a right one included); the budget comes back with time; a successful
// sign-in spends nothing; another address is not held back by one that
// is; an IPv6 client is counted by its /64.
func TestSignInLimit(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(path, []byte("bob:"+testToken+"\n"), 0o600))
	c, h, err := newConsole(Options{TokenFile: path})
	require.NoError(t, err)
	now := time.Unix(1_000_000, 0)
	c.now = func() time.Time { return now }
	signIn := func(remote, token string) *httptest.ResponseRecorder {
		r := form(http.MethodPost, "/console/login", url.Values{"token": {token}})
		r.RemoteAddr = remote
		return serve(h, r)
	}
	const wrong = "wrong-token-0123456789"

	// Successful sign-ins spend nothing.
	for range 3 * signInClientBurst {
		require.Equal(t, http.StatusSeeOther, signIn("192.0.2.1:1000", testToken).Code)
	}
	for i := range signInClientBurst {
		require.Equal(t, http.StatusUnauthorized, signIn(fmt.Sprintf("192.0.2.1:%d", 2000+i), wrong).Code, "failure %d", i+1)
	}
	rec := signIn("192.0.2.1:3000", wrong)
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	require.Equal(t, "6", rec.Header().Get("Retry-After"))
	require.Contains(t, rec.Body.String(), "Too many failed sign-ins")
	rec = signIn("192.0.2.1:3001", testToken)
	require.Equal(t, http.StatusTooManyRequests, rec.Code, "the right token is not even checked")
	require.Empty(t, rec.Result().Cookies())
	require.Equal(t, http.StatusSeeOther, signIn("198.51.100.7:1", testToken).Code, "another address signs in")
	require.Equal(t, http.StatusUnauthorized, signIn("198.51.100.7:1", wrong).Code, "and has its own budget")

	now = now.Add(3 * time.Second)
	rec = signIn("192.0.2.1:3002", wrong)
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	require.Equal(t, "3", rec.Header().Get("Retry-After"))
	now = now.Add(3 * time.Second)
	require.Equal(t, http.StatusSeeOther, signIn("192.0.2.1:3003", testToken).Code, "one attempt back after 6 s, and it succeeds")
	require.Equal(t, http.StatusUnauthorized, signIn("192.0.2.1:3004", wrong).Code, "the success gave its attempt back")
	require.Equal(t, http.StatusTooManyRequests, signIn("192.0.2.1:3005", wrong).Code)

	// IPv6: one /64 is one client; the next /64 another.
	for i := range signInClientBurst {
		require.Equal(t, http.StatusUnauthorized, signIn(fmt.Sprintf("[2001:db8::%x]:1", i+1), wrong).Code)
	}
	require.Equal(t, http.StatusTooManyRequests, signIn("[2001:db8::ffff:1]:1", wrong).Code)
	require.Equal(t, http.StatusUnauthorized, signIn("[2001:db8:0:1::1]:1", wrong).Code)

	// The global budget: failures from many addresses, one each.
	now = now.Add(time.Hour) // every budget whole again
	for i := range signInGlobalBurst {
		require.Equal(t, http.StatusUnauthorized, signIn(fmt.Sprintf("203.0.113.%d:1", i+1), wrong).Code, "address %d", i+1)
	}
	rec = signIn("203.0.113.200:1", wrong)
	require.Equal(t, http.StatusTooManyRequests, rec.Code, "a fresh address, past the global budget")
	require.Equal(t, "1", rec.Header().Get("Retry-After"))
}

// Concurrent guesses cannot outrun the limit: each spends its attempt
// before its token is checked.
func TestSignInLimitConcurrent(t *testing.T) {
	t.Parallel()
	l := newSignInLimiter()
	now := time.Unix(1_000_000, 0)
	client := clientOf("192.0.2.1:1")
	passed := make(chan bool, 100)
	for range 100 {
		go func() { passed <- l.take(client, now) == 0 }()
	}
	n := 0
	for range 100 {
		if <-passed {
			n++
		}
	}
	require.Equal(t, signInClientBurst, n)
}

// The clients remembered stay bounded, whatever the number of addresses.
func TestSignInLimitBounded(t *testing.T) {
	t.Parallel()
	l := newSignInLimiter()
	l.global = newBucket(1<<30, time.Nanosecond) // only the map's bound at work
	now := time.Unix(1_000_000, 0)
	for i := range 3 * maxSignInClients {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		require.Zero(t, l.take(netip.PrefixFrom(a, 32), now))
		require.LessOrEqual(t, len(l.clients), maxSignInClients)
	}
	// A minute later every bucket is whole: the next newcomer clears them.
	now = now.Add(signInClientBurst * signInClientEvery)
	require.Zero(t, l.take(clientOf("192.0.2.1:1"), now))
	require.Len(t, l.clients, 1)

	require.Equal(t, netip.MustParsePrefix("2001:db8:1:2::/64"), clientOf("[2001:db8:1:2:3:4:5:6%eth0]:443"))
	require.Equal(t, netip.MustParsePrefix("192.0.2.1/32"), clientOf("[::ffff:192.0.2.1]:443"))
	require.Equal(t, netip.Prefix{}, clientOf("@"))
}
