package handlers

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/effectively-io/effectively/internal/outbox"
	"github.com/effectively-io/effectively/internal/redact"
)

// Target is a named outbound HTTP endpoint as the engine resolved it from
// the configuration (targets.<name>.url and its credentials). Prefetchers
// read from it with NewRequest and Do, which carry the target's
// credentials and TLS settings as the outbox's calls to it do, so no
// credential has to be written into its URL.
type Target struct {
	// URL is the base URL; empty means the target is not configured.
	URL string
	// Idempotent: the target honours an Idempotency-Key header, so a call
	// may be repeated after a crash (the key is derived from the event key
	// and the operation). False: recorded intent, the call is made at most
	// once without an operator (a notification API).
	Idempotent bool

	name      string
	endpoints *outbox.Endpoints // nil: a Target made by hand, no credentials
}

// ErrUnsafePath is in the error of NewRequest (and of Effects.Send) for a
// path that could reach beyond the target's URL (see outbox.JoinURL): a
// "." or ".." segment however it is spelled, a scheme or host of its own, a
// backslash, a query parameter the target's URL sets. It follows from the
// event that made the path: a permanent error.
var ErrUnsafePath = outbox.ErrUnsafePath

// NewRequest returns a request to the target: its URL joined with path as
// the outbox joins a side effect's (segments stay escaped as given; see
// ErrUnsafePath), with the target's credentials
// (targets.<name>.bearer_token_file, header_files) read now, so a rotated
// secret is the one sent. Build path from url.PathEscape'd segments.
func (t Target) NewRequest(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	u, err := outbox.JoinURL(t.URL, path)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, redact.Error(err)
	}
	if t.endpoints != nil {
		if err := t.endpoints.Authorize(t.name, req); err != nil {
			return nil, err
		}
	}
	return req, nil
}

// Do sends req with the target's client: its CA and client certificate
// (targets.<name>.ca_file, cert_file, key_file), no redirect followed, the
// answer's body cut at MaxPrefetchResponseBytes. Its error never holds a
// credential of the URL (it is redacted, see package redact); a timeout
// is still a net.Error, a refused connection still a *url.Error.
func (t Target) Do(req *http.Request) (*http.Response, error) {
	if t.endpoints == nil {
		resp, err := defaultPrefetchClient.Do(req)
		return resp, redact.Error(err)
	}
	return t.endpoints.Do(t.name, req)
}

// Scrub returns text from the answer to req (an excerpt of its body for an
// error or a dead letter) with every credential req carried masked: a
// source that echoes its request must not put the target's token in a
// dead letter.
func (t Target) Scrub(req *http.Request, text string) string {
	return redact.Values(redact.Text(text), t.endpoints.SentSecrets(t.name, req)...)
}

// defaultPrefetchClient serves a Target made by hand.
var defaultPrefetchClient = newPrefetchClient(5 * time.Second)
