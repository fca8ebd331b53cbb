package redact

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tok is the secret of every case: none of the outputs may hold it.
const tok = "S3cr3tT0k"

func TestURL(t *testing.T) {
	t.Parallel()
	p := &Policy{
		Params: []string{"X-Custom-Auth-Value", "hmac"},
		Paths:  []PathRule{{Host: "hooks.example.com", Prefix: "/hooks/"}, {Host: "", Prefix: "/private"}},
	}
	for _, tc := range []struct {
		name, in, want string
	}{
		{"nothing secret", "https://api.example.com/v1/x?page=2&q=a%20b", "https://api.example.com/v1/x?page=2&q=a%20b"},
		{"userinfo password", "https://user:" + tok + "@api.example.com/v1", "https://user:xxxxx@api.example.com/v1"},
		{"user name alone is a token", "https://" + tok + "@api.example.com/v1", "https://xxxxx@api.example.com/v1"},
		{"user name alone, postgres role kept", "postgres://worker@db:5432/app", "postgres://worker@db:5432/app"},
		{"postgres password", "postgres://worker:" + tok + "@db:5432/app?sslmode=verify-full", "postgres://worker:xxxxx@db:5432/app?sslmode=verify-full"},
		{"sslpassword", "postgres://worker@db/app?sslpassword=" + tok, "postgres://worker@db/app?sslpassword=xxxxx"},
		{"token, order and encoding kept", "https://h/x?z=1&token=" + tok + "&a=%2F", "https://h/x?z=1&token=xxxxx&a=%2F"},
		{"access_token", "https://h/x?access_token=" + tok, "https://h/x?access_token=xxxxx"},
		{"api_key", "https://h/x?api_key=" + tok, "https://h/x?api_key=xxxxx"},
		{"apikey upper case", "https://h/x?APIKEY=" + tok, "https://h/x?APIKEY=xxxxx"},
		{"key", "https://h/x?key=" + tok, "https://h/x?key=xxxxx"},
		{"password", "https://h/x?password=" + tok, "https://h/x?password=xxxxx"},
		{"secret", "https://h/x?secret=" + tok, "https://h/x?secret=xxxxx"},
		{"client_secret", "https://h/x?client_id=app&client_secret=" + tok, "https://h/x?client_id=app&client_secret=xxxxx"},
		{"code", "https://h/cb?code=" + tok + "&state=s1", "https://h/cb?code=xxxxx&state=s1"},
		{"sig (Azure SAS)", "https://acct.blob.core.windows.net/c/b?sv=2022&se=2030&sp=r&sig=" + tok, "https://acct.blob.core.windows.net/c/b?sv=2022&se=2030&sp=r&sig=xxxxx"},
		{"signature", "https://h/x?signature=" + tok, "https://h/x?signature=xxxxx"},
		{"S3 presigned", "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=" + tok + "%2F20250101&X-Amz-Date=20250101T000000Z&X-Amz-Security-Token=" + tok + "&X-Amz-Signature=" + tok,
			"https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=xxxxx&X-Amz-Date=20250101T000000Z&X-Amz-Security-Token=xxxxx&X-Amz-Signature=xxxxx"},
		{"GCS signed", "https://storage.googleapis.com/b/o?X-Goog-Signature=" + tok, "https://storage.googleapis.com/b/o?X-Goog-Signature=xxxxx"},
		{"escaped name", "https://h/x?api%5Fkey=" + tok, "https://h/x?api%5Fkey=xxxxx"},
		{"repeated", "https://h/x?token=" + tok + "&token=" + tok, "https://h/x?token=xxxxx&token=xxxxx"},
		{"configured name", "https://h/x?x-custom-auth-value=" + tok + "&hmac=" + tok, "https://h/x?x-custom-auth-value=xxxxx&hmac=xxxxx"},
		{"fragment", "https://h/cb#access_token=" + tok + "&token_type=bearer&expires_in=3600", "https://h/cb#access_token=xxxxx&token_type=xxxxx&expires_in=3600"},
		{"slack webhook", "https://hooks.slack.com/services/T0000/B1111/" + tok, "https://hooks.slack.com/services/xxxxx/xxxxx/xxxxx"},
		{"slack shape on a proxy", "https://slack-proxy.internal:8443/services/T0ABC/B0DEF/" + tok + "?x=1", "https://slack-proxy.internal:8443/services/xxxxx/xxxxx/xxxxx?x=1"},
		{"services elsewhere is no webhook", "https://api.example.com/services/orders/42", "https://api.example.com/services/orders/42"},
		{"discord webhook", "https://discord.com/api/webhooks/123/" + tok, "https://discord.com/api/webhooks/xxxxx/xxxxx"},
		{"telegram bot", "https://api.telegram.org/bot123:" + tok + "/sendMessage", "https://api.telegram.org/xxxxx/xxxxx"},
		{"configured prefix", "https://HOOKS.example.com/hooks/" + tok + "/run", "https://HOOKS.example.com/hooks/xxxxx/xxxxx"},
		{"configured prefix, other host", "https://api.example.com/hooks/abc", "https://api.example.com/hooks/abc"},
		{"configured prefix, any host, whole segment", "https://h/private/" + tok, "https://h/private/xxxxx"},
		{"prefix is a whole segment", "https://h/privately/abc", "https://h/privately/abc"},
		{"escaped path secret", "https://hooks.slack.com/services/T1/B2/a%2F" + tok, "https://hooks.slack.com/services/xxxxx/xxxxx/xxxxx"},
		{"everything at once", "https://u:" + tok + "@hooks.slack.com/services/T1/B2/" + tok + "?token=" + tok,
			"https://u:xxxxx@hooks.slack.com/services/xxxxx/xxxxx/xxxxx?token=xxxxx"},
		{"DSN", "host=db user=w password=" + tok + " dbname=app", "host=db user=w password=xxxxx dbname=app"},
		{"DSN quoted", "host=db password='" + tok + " x' sslpassword=" + tok, "host=db password=xxxxx sslpassword=xxxxx"},
		{"unparseable, userinfo", "https://u:" + tok + "@h/%zz?token=" + tok, "https://u:xxxxx@h/%zz?token=xxxxx"},
		{"unparseable, user alone", "https://" + tok + "@h/%zz", "https://xxxxx@h/%zz"},
		{"unparseable, slack", "https://hooks.slack.com/services/T1/B2/" + tok + "%zz", "https://hooks.slack.com/services/xxxxx/xxxxx/xxxxx"},
		{"no scheme, parameters", "/v1/x?token=" + tok, "/v1/x?token=xxxxx"},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := p.URL(tc.in)
			require.Equal(t, tc.want, got)
			require.NotContains(t, got, tok)
			require.Equal(t, got, p.URL(got), "redacting twice changes nothing")
		})
	}
}

func TestSecretParam(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token", "sig", "signature", "token",
		"access_token", "refresh_token", "id_token", "api_key", "apikey", "api-key", "key", "password", "passwd", "pwd", "secret",
		"client_secret", "code", "auth", "authorization", "sslpassword", "subscription-key", "private_key", "AWSAccessKey", "jwt",
		"session_id", "oauth_signature", "Token[]"} {
		require.True(t, SecretParam(name), name)
	}
	for _, name := range []string{"page", "q", "id", "limit", "state", "zipcode", "sort", "user", "email", "X-Amz-Date",
		"X-Amz-Algorithm", "sv", "se", "expires_in", "sslkey", "sslcert", "sslrootcert", ""} {
		require.False(t, SecretParam(name), name)
	}
}

func TestText(t *testing.T) {
	t.Parallel()
	p := &Policy{Paths: []PathRule{{Host: "hooks.example.com", Prefix: "/hooks/"}}}
	for _, tc := range []struct{ name, in, want string }{
		{"no URL", "dial tcp 127.0.0.1:1: connect: connection refused", "dial tcp 127.0.0.1:1: connect: connection refused"},
		{"a url.Error's quoted URL", `Post "https://h/v1?api_key=` + tok + `": dial tcp 127.0.0.1:1: connect: connection refused`,
			`Post "https://h/v1?api_key=xxxxx": dial tcp 127.0.0.1:1: connect: connection refused`},
		{"bare URL before a colon", "GET https://h/x?token=" + tok + ": 503 Service Unavailable",
			"GET https://h/x?token=xxxxx: 503 Service Unavailable"},
		{"inside a JSON string", `{"error":"Get \"https://` + tok + `@h/x\": EOF"}`, `{"error":"Get \"https://xxxxx@h/x\": EOF"}`},
		{"two URLs", "https://h/a?sig=" + tok + " then https://hooks.example.com/hooks/" + tok + ".",
			"https://h/a?sig=xxxxx then https://hooks.example.com/hooks/xxxxx."},
		{"in parentheses", "(see https://h/x?token=" + tok + ")", "(see https://h/x?token=xxxxx)"},
		{"DSN outside a URL", "connecting to host=db password=" + tok + " failed", "connecting to host=db password=xxxxx failed"},
		{"URL and DSN", "https://h/?key=" + tok + " host=db password=" + tok, "https://h/?key=xxxxx host=db password=xxxxx"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := p.Text(tc.in)
			require.Equal(t, tc.want, got)
			require.NotContains(t, got, tok)
		})
	}
}

// The HTTP client's own errors — refused, timed out, TLS refused — carry
// the whole URL; Error hides its credentials and keeps what callers
// classify by.
func TestErrorOfHTTPClient(t *testing.T) {
	t.Parallel()
	p := &Policy{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	require.NoError(t, ln.Close())
	// A listener that accepts and never answers: the client times out.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = silent.Close() })
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()

	client := &http.Client{Timeout: 200 * time.Millisecond}
	for _, tc := range []struct {
		name    string
		url     string
		timeout bool
	}{
		{"refused", "http://u:" + tok + "@" + closed + "/x?token=" + tok, false},
		{"user alone", "http://" + tok + "@" + closed + "/x", false},
		{"timeout", "http://" + silent.Addr().String() + "/x?api_key=" + tok, true},
		{"TLS to a plain listener", "https://" + silent.Addr().String() + "/hooks?X-Amz-Signature=" + tok, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, tc.url, nil)
			require.NoError(t, err)
			_, raw := client.Do(req)
			require.Error(t, raw)
			require.Contains(t, raw.Error(), tok, "the client's own error holds the secret: the case is real")
			red := p.Error(raw)
			require.NotContains(t, red.Error(), tok)
			require.NotContains(t, fmt.Sprintf("%v %+v %#v", red, red, red.Error()), tok)
			var ue *url.Error
			require.ErrorAs(t, red, &ue)
			require.NotContains(t, ue.URL, tok)
			require.Equal(t, tc.timeout, ue.Timeout())
			var netErr net.Error
			require.ErrorAs(t, red, &netErr)
		})
	}
}

var errKept = errors.New("kept")

func TestErrorWraps(t *testing.T) {
	t.Parallel()
	p := &Policy{}
	require.NoError(t, p.Error(nil))
	plain := errors.New("no URL here")
	require.Same(t, plain, p.Error(plain), "nothing to hide: the same error")

	wrapped := fmt.Errorf("calling https://h/x?token=%s: %w", tok, errKept)
	red := p.Error(wrapped)
	require.Equal(t, "calling https://h/x?token=xxxxx: kept", red.Error())
	require.ErrorIs(t, red, errKept, "classification by errors.Is survives")
}

func TestWriter(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	w := Writer(&buf)
	line := `{"msg":"retrying","error":"Get \"https://h/x?token=` + tok + `\": EOF"}` + "\n"
	n, err := w.Write([]byte(line))
	require.NoError(t, err)
	require.Equal(t, len(line), n, "the caller sees its whole line written")
	plain := "no secret here\n"
	_, err = w.Write([]byte(plain))
	require.NoError(t, err)
	require.Equal(t, `{"msg":"retrying","error":"Get \"https://h/x?token=xxxxx\": EOF"}`+"\n"+plain, buf.String())
}

// The package-level functions follow SetDefault.
func TestSetDefault(t *testing.T) {
	// Not parallel: it changes the process's policy.
	t.Cleanup(func() { SetDefault(Policy{}) })
	in := "https://h/x?zz_custom=" + tok
	require.Equal(t, in, URL(in))
	SetDefault(Policy{Params: []string{"zz_custom"}})
	require.Equal(t, "https://h/x?zz_custom=xxxxx", URL(in))
	require.Equal(t, "see https://h/x?zz_custom=xxxxx", Text("see "+in))
	require.NotContains(t, Error(errors.New(in)).Error(), tok)
}

func FuzzText(f *testing.F) {
	for _, s := range []string{
		"https://u:" + tok + "@h/x?token=" + tok,
		`Post "https://h/v1?api_key=` + tok + `": EOF`,
		"https://hooks.slack.com/services/T1/B2/" + tok,
		"host=db password=" + tok,
		"https://" + tok + "@h/%zz#access_token=" + tok,
	} {
		f.Add(s)
	}
	p := &Policy{Params: []string{"extra"}, Paths: []PathRule{{Prefix: "/p/"}}}
	f.Fuzz(func(t *testing.T, s string) {
		out := p.Text(s)
		if again := p.Text(out); again != out {
			t.Fatalf("not stable: %q → %q → %q", s, out, again)
		}
		// A secret of a parseable URL never survives, whatever it is.
		u := "https://u:" + url.QueryEscape(s) + "@h/p/" + url.PathEscape(s) + "?token=" + url.QueryEscape(s)
		got, err := url.Parse(p.URL(u))
		if err != nil {
			t.Fatalf("%q redacted to an unparseable %q: %v", u, p.URL(u), err)
		}
		pw, _ := got.User.Password()
		if pw != Mask || got.Query().Get("token") != Mask || (s != "" && got.Path != "/p/"+Mask) {
			t.Fatalf("%q kept a secret: %q", u, got)
		}
	})
}

func TestValues(t *testing.T) {
	t.Parallel()
	body := `{"error":"invalid key ` + tok + `","echo":"Bearer ` + tok + `-long","short":"abc"}`
	require.Equal(t, `{"error":"invalid key xxxxx","echo":"xxxxx","short":"abc"}`,
		Values(body, tok, "Bearer "+tok+"-long", tok+"-long", "abc", ""))
}

// The cost on a log line: most have no URL (the fast path), some have one.
func BenchmarkText(b *testing.B) {
	p := &Policy{}
	plain := `{"level":"info","msg":"partition assigned","topic":"payments","partition":3}`
	withURL := `{"level":"info","msg":"outbox intent will be retried","error":"Post \"https://h/v1/contacts/a1?api_key=` + tok + `\": dial tcp 127.0.0.1:1: connect: connection refused"}`
	b.Run("no URL", func(b *testing.B) {
		for b.Loop() {
			_ = p.Text(plain)
		}
	})
	b.Run("a URL", func(b *testing.B) {
		for b.Loop() {
			_ = p.Text(withURL)
		}
	})
}
