package accounts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/redact"
)

// The doorbell's dead-letter reasons.
const (
	// ReasonSourceRejected: the source API answered a 4xx other than 404 and
	// 429 (the request can never succeed as it is).
	ReasonSourceRejected event.Reason = "source_rejected"
	// ReasonSourceInvalid: the source API's answer is not an account.
	ReasonSourceInvalid event.Reason = "source_invalid"
	// ReasonSourceUnconfigured: a doorbell arrived but the source target
	// (targets.accounts.url, or the older sources.accounts.url) is not set.
	ReasonSourceUnconfigured event.Reason = "source_unconfigured"
	// ReasonSourceRedirect: the source API answered a 3xx. Redirects are not
	// followed: the target's URL is wrong (the dead letter has the
	// Location); fix targets.accounts.url and redrive.
	ReasonSourceRedirect event.Reason = "source_redirect"
)

// ErrSourceUnavailable is a transient failure of the source API (timeout,
// connection refused, 5xx, 429): the batch is retried with backoff. When it
// keeps failing for one account while the source answers for others, the
// doorbell is dead-lettered with reason source_unavailable after
// prefetch.max_attempts (handlers.PrefetchFailures).
var ErrSourceUnavailable = errors.New("the source API is unavailable")

// TargetSource is the source API of accounts: GET <url>/<id>, or the URL
// with "{id}" replaced, answers the account's current state. The request
// carries the target's credentials (targets.accounts.bearer_token_file,
// header_files) and TLS settings (ca_file, cert_file, key_file).
const TargetSource = "accounts"

type doorbell struct{}

// sourceAccount is the source API's answer.
type sourceAccount struct {
	ID      string `json:"id"`
	Version int64  `json:"version"`
	Name    string `json:"name"`
	Email   string `json:"email"`
	Plan    string `json:"plan"`
	Status  string `json:"status"`
}

// notFound marks a doorbell whose account the source does not know (yet).
const notFoundMarker = `{"not_found":true}`

// sourceRequest is the GET of account id: the id is one escaped segment,
// appended to the URL or put in place of its "{id}"; an id that would be a
// dot segment is refused (handlers.ErrUnsafePath).
func sourceRequest(ctx context.Context, src handlers.Target, id string) (*http.Request, error) {
	seg := url.PathEscape(id)
	if !strings.Contains(src.URL, "{id}") {
		return src.NewRequest(ctx, http.MethodGet, seg, nil)
	}
	// The checks of a path appended to a URL, on the one segment.
	if _, err := (handlers.Target{URL: "http://source/"}).NewRequest(ctx, http.MethodGet, seg, nil); err != nil {
		return nil, err
	}
	src.URL = strings.ReplaceAll(src.URL, "{id}", seg)
	return src.NewRequest(ctx, http.MethodGet, "", nil)
}

// Prefetch GETs the account's current state.
func (d *doorbell) Prefetch(ctx context.Context, env handlers.Env, ev event.Event) (event.Event, error) {
	src, err := env.Target(TargetSource)
	if err != nil {
		return ev, event.PermanentWithReason(ReasonSourceUnconfigured, fmt.Errorf("account.refreshed needs the source API: %w; set it and redrive", err))
	}
	req, err := sourceRequest(ctx, src, ev.Subject)
	switch {
	case errors.Is(err, handlers.ErrUnsafePath):
		return ev, event.PermanentWithReason(ReasonSourceRejected, fmt.Errorf("the account ID %s cannot be fetched: %w", event.Excerpt(ev.Subject), err))
	case err != nil:
		// A credential file that cannot be read: the deployment's fault,
		// retried until it is fixed.
		return ev, fmt.Errorf("%w: building the request for %s: %w", ErrSourceUnavailable, event.Excerpt(ev.Subject), err)
	}
	req.Header.Set("Accept", "application/json")
	// Do's error is redacted: the URL may carry a credential.
	resp, err := src.Do(req)
	if err != nil {
		return ev, fmt.Errorf("%w: GET %s: %v", ErrSourceUnavailable, redact.URL(req.URL.String()), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, handlers.MaxPrefetchResponseBytes+1))
	if errors.Is(err, handlers.ErrResponseTooLarge) || len(body) > handlers.MaxPrefetchResponseBytes {
		return ev, event.PermanentWithReason(ReasonSourceInvalid, fmt.Errorf("GET %s: %s: %v", redact.URL(req.URL.String()), resp.Status, handlers.ErrResponseTooLarge))
	}
	if err != nil {
		return ev, fmt.Errorf("%w: reading %s: %v", ErrSourceUnavailable, redact.URL(req.URL.String()), err)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		loc := "(no valid Location)"
		if u, err := resp.Location(); err == nil {
			loc = event.Excerpt(redact.URL(u.String()))
		}
		return ev, event.PermanentWithReason(ReasonSourceRedirect, fmt.Errorf(
			"GET %s: %s: redirected to %s; redirects are not followed: point targets.%s.url at where accounts are served, then redrive",
			redact.URL(req.URL.String()), resp.Status, loc, TargetSource))
	case resp.StatusCode == http.StatusNotFound:
		ev.Data = json.RawMessage(notFoundMarker)
		return ev, nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return ev, fmt.Errorf("%w: GET %s: %s", ErrSourceUnavailable, redact.URL(req.URL.String()), resp.Status)
	default:
		return ev, event.PermanentWithReason(ReasonSourceRejected, fmt.Errorf("GET %s: %s: %s", redact.URL(req.URL.String()), resp.Status, event.Excerpt(src.Scrub(req, string(body)))))
	}
	var a sourceAccount
	if err := json.Unmarshal(body, &a); err != nil {
		return ev, event.PermanentWithReason(ReasonSourceInvalid, fmt.Errorf("GET %s: not an account: %s", redact.URL(req.URL.String()), event.Excerpt(src.Scrub(req, string(body)))))
	}
	if a.ID != ev.Subject || a.Version < 1 || (a.Status != "open" && a.Status != "closed") {
		return ev, event.PermanentWithReason(ReasonSourceInvalid, fmt.Errorf("GET %s: an account needs the same id, a version ≥ 1 and status open or closed", redact.URL(req.URL.String())))
	}
	data, _ := json.Marshal(a) // plain strings and an integer: cannot fail
	ev.Data = data
	ev.Version = a.Version
	return ev, nil
}

// Waits reports whether a doorbell waits for its account: when the source
// does not know the account yet. Such a doorbell is parked until the account
// exists, and then has nothing left to apply (the account's own events carry
// its state).
func (d *doorbell) Waits(ev event.Event) bool {
	return string(ev.Data) == notFoundMarker || ev.Version == 0
}

// Handle applies the fetched state through the same version gate as the
// account events.
func (d *doorbell) Handle(_ context.Context, e *handlers.Effects, ev event.Event) error {
	if d.Waits(ev) {
		return nil // released: the account exists
	}
	var a sourceAccount
	if err := json.Unmarshal(ev.Data, &a); err != nil {
		return event.PermanentWithReason(ReasonSourceInvalid, err)
	}
	return e.Upsert(Accounts, ev.Version, ev.Subject, a.Name, a.Email, a.Plan, a.Status)
}
