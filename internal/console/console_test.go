package console

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const testToken = "0123456789abcdef0123"

func newTestConsole(t *testing.T) http.Handler {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(path, []byte("# comment\n\nbob:"+testToken+"\n"), 0o600))
	h, err := New(Options{TokenFile: path, Group: "g", Topics: []string{"t"}})
	require.NoError(t, err)
	return h
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

func form(method, target string, v url.Values) *http.Request {
	r := httptest.NewRequest(method, target, strings.NewReader(v.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return r
}

func TestReadTokens(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "f")
		require.NoError(t, os.WriteFile(p, []byte(s), 0o600))
		return p
	}
	ts, err := ReadTokens(write("alice:" + testToken + "\n" + testToken + "x\n"))
	require.NoError(t, err)
	require.Equal(t, []token{{"alice", testToken}, {"operator", testToken + "x"}}, ts)
	name, ok := match(ts, testToken+"x")
	require.True(t, ok)
	require.Equal(t, "operator", name)
	_, ok = match(ts, testToken[:10])
	require.False(t, ok)

	_, err = ReadTokens(write("# nothing\n"))
	require.ErrorIs(t, err, ErrNoTokens)
	_, err = ReadTokens(write("alice:short\n"))
	require.ErrorContains(t, err, "shorter than 16")
	_, err = ReadTokens(filepath.Join(dir, "missing"))
	require.ErrorContains(t, err, "console.token_file")
	_, err = New(Options{TokenFile: filepath.Join(dir, "missing")})
	require.Error(t, err, "a console with an unreadable token file does not start")
}

// Every page answers 401 without a session, with the security headers; a
// sign-in with the token makes a session; a POST without its CSRF token or
// from another origin is refused before any handler runs.
func TestAuthAndCSRF(t *testing.T) {
	t.Parallel()
	h := newTestConsole(t)
	for _, p := range []string{"/console/", "/console/dead-letters", "/console/dead-letters/1", "/console/parked", "/console/outbox",
		"/console/outbox/1", "/console/replay", "/console/audit", "/console/actions", "/console/nothing-here"} {
		rec := serve(h, httptest.NewRequest(http.MethodGet, p, nil))
		require.Equal(t, http.StatusUnauthorized, rec.Code, p)
		require.Contains(t, rec.Body.String(), `name="token"`, p)
		require.Equal(t, "DENY", rec.Header().Get("X-Frame-Options"), p)
		require.NotContains(t, rec.Header().Get("Content-Security-Policy"), "unsafe-inline", p)
	}
	rec := serve(h, form(http.MethodPost, "/console/login", url.Values{"token": {"wrong-token-0123456789"}}))
	require.Equal(t, http.StatusUnauthorized, rec.Code)
	rec = serve(h, form(http.MethodPost, "/console/login", url.Values{"token": {testToken}, "next": {"https://evil.example/"}}))
	require.Equal(t, http.StatusSeeOther, rec.Code)
	require.Equal(t, "/console/", rec.Header().Get("Location"), "no open redirect")
	cookies := rec.Result().Cookies()
	require.Len(t, cookies, 1)
	require.True(t, cookies[0].HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, cookies[0].SameSite)

	post := func(v url.Values, hdr map[string]string) *httptest.ResponseRecorder {
		r := form(http.MethodPost, "/console/dead-letters/redrive", v)
		r.AddCookie(cookies[0])
		for k, val := range hdr {
			r.Header.Set(k, val)
		}
		return serve(h, r)
	}
	rec = post(url.Values{"id": {"1"}}, nil)
	require.Equal(t, http.StatusForbidden, rec.Code, "no CSRF token")
	require.Contains(t, rec.Body.String(), "CSRF")
	rec = post(url.Values{"id": {"1"}, "csrf": {"guessed"}}, nil)
	require.Equal(t, http.StatusForbidden, rec.Code, "a wrong CSRF token")
	rec = post(url.Values{"id": {"1"}}, map[string]string{"Sec-Fetch-Site": "cross-site"})
	require.Equal(t, http.StatusForbidden, rec.Code, "cross-site")
	require.Contains(t, rec.Body.String(), "cross-origin")
	rec = post(url.Values{"id": {"1"}}, map[string]string{"Origin": "https://evil.example"})
	require.Equal(t, http.StatusForbidden, rec.Code, "a foreign Origin")
	rec = serve(h, form(http.MethodPost, "/console/login", url.Values{"token": {testToken}}))
	r := form(http.MethodPost, "/console/login", url.Values{"token": {testToken}})
	r.Header.Set("Sec-Fetch-Site", "cross-site")
	require.Equal(t, http.StatusForbidden, serve(h, r).Code, "no cross-site sign-in")
	require.Equal(t, http.StatusSeeOther, rec.Code)
}

func TestExcerpt(t *testing.T) {
	t.Parallel()
	require.Equal(t, "héllo", excerpt([]byte("héllo"), 100))
	require.Equal(t, "h\n… (5 more bytes)", excerpt([]byte("héllo"), 2), "a rune cut in half is left out")
	require.Equal(t, `(not UTF-8) "\xff\xfe"`, excerpt([]byte{0xff, 0xfe}, 100))
}

func TestNiceCeil(t *testing.T) {
	t.Parallel()
	for in, want := range map[float64]float64{0: 1, 0.5: 1, 1.5: 2, 3: 5, 7: 10, 12: 20, 180: 200, 501: 1000} {
		require.Equal(t, want, niceCeil(in), "%v", in)
	}
}
