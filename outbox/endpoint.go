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

// clientFor is the HTTP client of a target: the dispatcher's, or, for a
// target with its own CA or client certificate, one made for it once.
func (d *Dispatcher) clientFor(name string) (*http.Client, error) {
	ep := d.opts.Targets[name]
	if name == "" || !ep.tls() {
		return d.client, nil
	}
	d.clientsMu.Lock()
	defer d.clientsMu.Unlock()
	if c, ok := d.clients[name]; ok {
		return c, nil
	}
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
	rt := d.client.Transport
	if d.base != nil {
		rt = d.base
	}
	base, ok := rt.(*http.Transport)
	if !ok || base == nil {
		base = http.DefaultTransport.(*http.Transport)
	}
	tr := base.Clone()
	tr.TLSClientConfig = cfg
	c := *d.client
	c.Transport = tr
	if d.opts.WrapTransportFunc != nil {
		c.Transport = d.opts.WrapTransportFunc(tr)
	}
	if d.clients == nil {
		d.clients = map[string]*http.Client{}
	}
	d.clients[name] = &c
	return &c, nil
}

// resolve is the URL of c's call and the headers its target adds.
func (d *Dispatcher) resolve(c claimed) (string, map[string]string, error) {
	if c.targetName == "" {
		return c.target, nil, nil // recorded before named targets: the whole URL
	}
	ep, ok := d.opts.Targets[c.targetName]
	if !ok || ep.URL == "" {
		return "", nil, fmt.Errorf("target %s has no URL (targets.%s.url): the intent waits until it is configured", c.targetName, c.targetName)
	}
	u, err := joinURL(ep.URL, c.target)
	if err != nil {
		return "", nil, fmt.Errorf("target %s (targets.%s.url): %w", c.targetName, c.targetName, err)
	}
	headers := map[string]string{}
	if ep.BearerTokenFile != "" {
		tok, err := readSecret(ep.BearerTokenFile)
		if err != nil {
			return "", nil, fmt.Errorf("target %s: the bearer token (targets.%s.bearer_token_file): %w", c.targetName, c.targetName, err)
		}
		headers["Authorization"] = "Bearer " + tok
	}
	for name, file := range ep.HeaderFiles {
		v, err := readSecret(file)
		if err != nil {
			return "", nil, fmt.Errorf("target %s: header %s (targets.%s.header_files): %w", c.targetName, name, c.targetName, err)
		}
		headers[name] = v
	}
	return u, headers, nil
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

// joinURL appends path (which may carry a query of its own) to the base
// URL's path, keeping the base's query parameters (an API token, say).
func joinURL(base, path string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", errors.New("not a URL")
	}
	if path == "" {
		return u.String(), nil
	}
	p, err := url.Parse(path)
	if err != nil {
		return "", fmt.Errorf("the path %q is not a URL path", path)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/" + strings.TrimPrefix(p.Path, "/")
	u.RawPath = ""
	if p.RawQuery != "" {
		q := u.Query()
		for k, vs := range p.Query() {
			q[k] = vs
		}
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}
