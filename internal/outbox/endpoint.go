package outbox

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/effectively-io/effectively/internal/redact"
)

// Endpoint is a named target as the deployment configures it. Nothing of
// it is stored with an intent: the base URL and the credentials are read at
// each delivery, so a rotated credential (a mounted secret's file changing)
// applies to pending intents too.
type Endpoint struct {
	// URL is the base URL; an intent's path is appended to it.
	URL string
	// BearerTokenFile, when set, holds a token sent as
	// "Authorization: Bearer <token>".
	BearerTokenFile string
	// HeaderFiles maps a header name to a file holding its value (an API
	// key, say).
	HeaderFiles map[string]string
	// CAFile, when set, is the PEM bundle the target's certificate must
	// chain to (instead of the system's roots).
	CAFile string
	// CertFile and KeyFile are a client certificate for mutual TLS,
	// reloaded at every handshake.
	CertFile, KeyFile string
}

// tls reports whether the endpoint needs a client of its own.
func (ep Endpoint) tls() bool { return ep.CAFile != "" || ep.CertFile != "" }

// Endpoints are the configured targets with the clients that call them:
// the dispatcher's, and the prefetchers' (handlers.Target), so that a read
// from a source carries the same credentials and TLS settings as a call to
// it. A target's client is made at its first call and kept; one that
// cannot be made (an unreadable CA file) is tried again at the next call.
type Endpoints struct {
	targets map[string]Endpoint
	// client is the base: timeout, no redirects, an unwrapped transport
	// that a target with TLS settings clones.
	client *http.Client
	// wrap, when set, wraps every client's transport (the base's too).
	wrap func(http.RoundTripper) http.RoundTripper

	mu      sync.Mutex
	clients map[string]*http.Client
}

// NewEndpoints returns targets with their clients, made from client (nil:
// a clone of the default transport, no timeout): the same client for a
// target without TLS settings of its own, a copy on a clone of its
// transport with the target's CA and client certificate otherwise. No
// client follows redirects. wrap, when set, wraps every client's
// transport (a span per call, a cap on bodies).
func NewEndpoints(targets map[string]Endpoint, client *http.Client, wrap func(http.RoundTripper) http.RoundTripper) *Endpoints {
	c := http.Client{}
	if client != nil {
		c = *client
	}
	c.CheckRedirect = NoRedirects
	return &Endpoints{targets: targets, client: &c, wrap: wrap}
}

// Wrapped returns a copy of e whose clients' transports are wrapped by f
// too, outside the wrapping e already does.
func (e *Endpoints) Wrapped(f func(http.RoundTripper) http.RoundTripper) *Endpoints {
	inner := e.wrap
	wrap := f
	if inner != nil {
		wrap = func(rt http.RoundTripper) http.RoundTripper { return f(inner(rt)) }
	}
	return &Endpoints{targets: e.targets, client: e.client, wrap: wrap}
}

// Endpoint returns the named target's configuration.
func (e *Endpoints) Endpoint(name string) (Endpoint, bool) {
	ep, ok := e.targets[name]
	return ep, ok
}

// Client returns the named target's client (see [NewEndpoints]); "" or a
// target without TLS settings gets the base client.
func (e *Endpoints) Client(name string) (*http.Client, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ep := e.targets[name]
	key := name
	if name == "" || !ep.tls() {
		key = "" // one base client for all of them
	}
	if c, ok := e.clients[key]; ok {
		return c, nil
	}
	c := *e.client
	if key != "" {
		cfg, err := ep.tlsConfig(name)
		if err != nil {
			return nil, err
		}
		base, ok := c.Transport.(*http.Transport)
		if !ok || base == nil {
			base = http.DefaultTransport.(*http.Transport)
		}
		tr := base.Clone()
		tr.TLSClientConfig = cfg
		c.Transport = tr
	}
	if e.wrap != nil {
		rt := c.Transport
		if rt == nil {
			rt = http.DefaultTransport
		}
		c.Transport = e.wrap(rt)
	}
	if e.clients == nil {
		e.clients = map[string]*http.Client{}
	}
	e.clients[key] = &c
	return &c, nil
}

// tlsConfig is the TLS configuration of a target with a CA or a client
// certificate of its own.
func (ep Endpoint) tlsConfig(name string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ep.CAFile != "" {
		pem, err := os.ReadFile(ep.CAFile)
		if err != nil {
			return nil, fmt.Errorf("target %s: cannot read targets.%s.ca_file %s", name, name, ep.CAFile)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("target %s: targets.%s.ca_file %s holds no PEM certificate", name, name, ep.CAFile)
		}
		cfg.RootCAs = pool
	}
	if ep.CertFile != "" {
		certFile, keyFile := ep.CertFile, ep.KeyFile
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("target %s: targets.%s.cert_file/key_file: %w", name, name, err)
			}
			return &c, nil
		}
	}
	return cfg, nil
}

// Authorize sets the named target's credentials on req: the bearer token
// and the header files, read now, so a rotated secret is the one sent.
// Its errors name the key and the file, never a content.
func (e *Endpoints) Authorize(name string, req *http.Request) error {
	ep := e.targets[name]
	if ep.BearerTokenFile != "" {
		tok, err := readSecret(ep.BearerTokenFile)
		if err != nil {
			return fmt.Errorf("target %s: the bearer token (targets.%s.bearer_token_file): %w", name, name, err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for h, file := range ep.HeaderFiles {
		v, err := readSecret(file)
		if err != nil {
			return fmt.Errorf("target %s: header %s (targets.%s.header_files): %w", name, h, name, err)
		}
		req.Header.Set(h, v)
	}
	return nil
}

// Do sends req with the named target's client. Its error never holds a
// credential of the URL: the HTTP client's *url.Error carries the whole
// URL, query and all, so it comes back redacted (see redact.Error), still
// a *url.Error.
func (e *Endpoints) Do(name string, req *http.Request) (*http.Response, error) {
	c, err := e.Client(name)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, redact.Error(err)
	}
	return resp, nil
}

// readSecret reads a secret from a file, without a trailing newline. Its
// error never holds the content.
func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("cannot read %s", path)
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}

// ErrUnsafePath is in the error of a call's path that could reach beyond
// its target's URL: a scheme or a host of its own, a "." or ".." segment
// (also percent-encoded, or after an encoded slash), a backslash, a control
// character, a fragment, or a query parameter the target's URL sets. Such
// a call can never be made: handlers.Effects.Send refuses it (the event is
// dead-lettered), and the dispatcher dead-letters an intent whose path
// became one (its target's URL gained the parameter since).
var ErrUnsafePath = errors.New("the path could leave the target's URL")

func parsePath(path string) (*url.URL, error) {
	refuse := func(why string) error {
		return fmt.Errorf("%w: %q %s; build it from url.PathEscape'd segments (a resource ID cannot be \".\" or \"..\")",
			ErrUnsafePath, excerpt([]byte(redact.URL(path))), why)
	}
	if strings.ContainsRune(path, '\\') {
		return nil, refuse("has a backslash, which some servers read as a slash")
	}
	if strings.HasPrefix(path, "//") {
		return nil, refuse("starts with //, which names a host")
	}
	p, err := url.Parse(path)
	switch {
	case err != nil:
		return nil, refuse("is not a URL path")
	case p.Scheme != "" || p.Opaque != "" || p.Host != "" || p.User != nil:
		return nil, refuse("names a scheme or a host: a call's path is appended to its target's URL, never replaces it (escape a colon in the first segment)")
	case p.Fragment != "" || strings.Contains(path, "#"):
		return nil, refuse("has a fragment (#)")
	case !utf8.ValidString(p.Path):
		return nil, refuse("decodes to invalid UTF-8")
	case strings.ContainsFunc(p.Path, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }):
		return nil, refuse("decodes to a control character or a backslash")
	}
	// Decoded, so that %2e%2e and x%2F..%2Fy are seen as the dot segments a
	// server that decodes before it routes would see; ";" starts a path
	// parameter ("..;" is ".." to some servlet containers).
	for _, seg := range strings.Split(p.Path, "/") {
		seg, _, _ = strings.Cut(seg, ";")
		if seg == "." || seg == ".." {
			return nil, refuse("has a \".\" or \"..\" segment (also when percent-encoded), which a server may resolve to another resource")
		}
	}
	return p, nil
}

// JoinURL appends path to the base URL's path, keeping both escaped as
// they are (an escaped slash in a segment stays %2F on the wire), and
// merges path's query into the base's. path never changes the base's
// scheme, host, port or userinfo, and never replaces a query parameter of
// the base (an API key in the target's URL): such a path, or one with a
// dot segment (see [ErrUnsafePath]), is refused.
func JoinURL(base, path string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "", errors.New("not an absolute URL")
	}
	if path == "" {
		return u.String(), nil
	}
	p, err := parsePath(path)
	if err != nil {
		return "", err
	}
	joined := strings.TrimSuffix(u.EscapedPath(), "/") + "/" + strings.TrimPrefix(p.EscapedPath(), "/")
	if u.Path, err = url.PathUnescape(joined); err != nil {
		return "", fmt.Errorf("%w: %q is not a URL path", ErrUnsafePath, excerpt([]byte(redact.URL(path))))
	}
	u.RawPath = joined
	if p.RawQuery != "" {
		set := map[string]bool{}
		for _, k := range queryKeys(u.RawQuery) {
			set[strings.ToLower(k)] = true
		}
		for _, k := range queryKeys(p.RawQuery) {
			if set[strings.ToLower(k)] {
				return "", fmt.Errorf("%w: its query sets %q, which the target's URL sets: a call may add parameters, not replace the target's",
					ErrUnsafePath, excerpt([]byte(k)))
			}
		}
		if u.RawQuery == "" {
			u.RawQuery = p.RawQuery
		} else {
			u.RawQuery += "&" + p.RawQuery
		}
	}
	return u.String(), nil
}

// queryKeys are the decoded names of a raw query's parameters, in order.
func queryKeys(raw string) []string {
	var out []string
	for _, pair := range strings.FieldsFunc(raw, func(r rune) bool { return r == '&' || r == ';' }) {
		k, _, _ := strings.Cut(pair, "=")
		if d, err := url.QueryUnescape(k); err == nil {
			k = d
		}
		out = append(out, k)
	}
	return out
}

// SentSecrets are the credentials req carries: its target's Authorization
// and header-file values, its URL's userinfo and secret parameters: what
// an answer's text must not repeat (see redact.Values). A nil e knows no
// header files.
func (e *Endpoints) SentSecrets(name string, req *http.Request) []string {
	var out []string
	if v := req.Header.Get("Authorization"); v != "" {
		_, cred, _ := strings.Cut(v, " ")
		out = append(out, v, cred)
	}
	if e != nil {
		ep, _ := e.Endpoint(name)
		for h := range ep.HeaderFiles {
			out = append(out, req.Header.Get(h))
		}
	}
	if u := req.URL.User; u != nil {
		pw, _ := u.Password()
		out = append(out, u.Username(), pw)
	}
	for k, vs := range req.URL.Query() {
		if redact.SecretParam(k) {
			out = append(out, vs...)
		}
	}
	return out
}
