package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectively-io/effectively/dedupe"
	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/outbox"
)

// TypeAccountRefreshed is the doorbell: "account X changed", no state.
const TypeAccountRefreshed = "account.refreshed"

// Prefetcher is a handler that reads from the outside world before the
// batch's transaction begins (never inside it): the doorbell fetches the
// resource's current state. Prefetch returns the event to apply (its Key and
// PayloadHash unchanged), a transient error (the batch is retried with
// backoff), or a event.Permanent one.
type Prefetcher interface {
	Prefetch(ctx context.Context, ev event.Event) (event.Event, error)
}

// ReferenceOptions configure the reference domain's handlers.
type ReferenceOptions struct {
	// AccountsURL is the source API of accounts (sources.accounts.url): GET
	// <url>/<id>, or the URL with "{id}" replaced, answers the account's
	// current state. Empty: doorbells are dead-lettered until configured.
	AccountsURL string
	// HTTPClient fetches; nil uses one with a 5 s timeout.
	HTTPClient *http.Client
	// CRMURL is the CRM API (effects.crm.url): a newly claimed
	// account.opened records an intent to PUT <url>/contacts/<id>. Empty:
	// no CRM sync.
	CRMURL string
	// MailURL is the mail API (effects.mail.url): a newly claimed
	// account.opened records an intent to POST a welcome mail to it. Empty:
	// no welcome mail.
	MailURL string
	// Expiry (outbox.retention, outbox.resend_expired): the side effects of
	// an event whose record is older than the retention are recorded as
	// suppressed, not sent.
	Expiry outbox.Expiry
}

// ReferenceWith returns the reference domain's handlers, doorbell included.
func ReferenceWith(opts ReferenceOptions) Registry {
	r := Reference()
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 5 * time.Second}
	}
	r[TypeAccountRefreshed] = &doorbell{opts: opts}
	if opts.CRMURL != "" || opts.MailURL != "" {
		acct := &accountHandler{opts: opts}
		r[TypeAccountOpened] = acct
		r[TypeAccountUpdated] = acct
		r[TypeAccountClosed] = acct
	}
	return r
}

// The doorbell's dead-letter reasons.
const (
	// ReasonSourceRejected: the source API answered a 4xx other than 404 and
	// 429 (the request can never succeed as it is).
	ReasonSourceRejected event.Reason = "source_rejected"
	// ReasonSourceInvalid: the source API's answer is not an account.
	ReasonSourceInvalid event.Reason = "source_invalid"
	// ReasonSourceUnconfigured: a doorbell arrived but sources.accounts.url
	// is not set.
	ReasonSourceUnconfigured event.Reason = "source_unconfigured"
)

// ErrSourceUnavailable is a transient failure of the source API (timeout,
// connection refused, 5xx, 429): the batch is retried with backoff.
var ErrSourceUnavailable = errors.New("the source API is unavailable")

type doorbell struct{ opts ReferenceOptions }

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

func (d *doorbell) url(id string) string {
	if strings.Contains(d.opts.AccountsURL, "{id}") {
		return strings.ReplaceAll(d.opts.AccountsURL, "{id}", url.PathEscape(id))
	}
	return strings.TrimSuffix(d.opts.AccountsURL, "/") + "/" + url.PathEscape(id)
}

// Prefetch GETs the account's current state.
func (d *doorbell) Prefetch(ctx context.Context, ev event.Event) (event.Event, error) {
	if d.opts.AccountsURL == "" {
		return ev, event.PermanentWithReason(ReasonSourceUnconfigured, errors.New("account.refreshed needs sources.accounts.url; set it and redrive"))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.url(ev.Subject), nil)
	if err != nil {
		return ev, event.PermanentWithReason(ReasonSourceRejected, fmt.Errorf("building the request for %s: %w", event.Excerpt(ev.Subject), err))
	}
	req.Header.Set("Accept", "application/json")
	resp, err := d.opts.HTTPClient.Do(req)
	if err != nil {
		return ev, fmt.Errorf("%w: GET %s: %v", ErrSourceUnavailable, req.URL.Redacted(), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return ev, fmt.Errorf("%w: reading %s: %v", ErrSourceUnavailable, req.URL.Redacted(), err)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode == http.StatusNotFound:
		ev.Data = json.RawMessage(notFoundMarker)
		return ev, nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return ev, fmt.Errorf("%w: GET %s: %s", ErrSourceUnavailable, req.URL.Redacted(), resp.Status)
	default:
		return ev, event.PermanentWithReason(ReasonSourceRejected, fmt.Errorf("GET %s: %s: %s", req.URL.Redacted(), resp.Status, event.Excerpt(string(body))))
	}
	var a sourceAccount
	if err := json.Unmarshal(body, &a); err != nil {
		return ev, event.PermanentWithReason(ReasonSourceInvalid, fmt.Errorf("GET %s: not an account: %s", req.URL.Redacted(), event.Excerpt(string(body))))
	}
	if a.ID != ev.Subject || a.Version < 1 || (a.Status != "open" && a.Status != "closed") {
		return ev, event.PermanentWithReason(ReasonSourceInvalid, fmt.Errorf("GET %s: an account needs the same id, a version ≥ 1 and status open or closed", req.URL.Redacted()))
	}
	data, _ := json.Marshal(a) // plain strings and an integer: cannot fail
	ev.Data = data
	ev.Version = a.Version
	return ev, nil
}

// Handle applies the fetched state through the same version gate as the
// account events; a doorbell for an account the source does not know yet is
// parked until the account exists (then there is nothing left to apply).
func (d *doorbell) Handle(_ context.Context, e *Effects, ev event.Event) error {
	if string(ev.Data) == notFoundMarker || ev.Version == 0 {
		parked, err := MarshalParked(ev)
		if err != nil {
			return err
		}
		o, limit := e.Origin(), e.Limits().MaxPerResource
		e.QueryRow(func(row pgx.Row) (dedupe.Disposition, error) {
			var exists, wasParked bool
			if err := row.Scan(&exists, &wasParked); err != nil {
				return "", err
			}
			switch {
			case exists:
				// Released (or the account arrived another way): the
				// account's own events carry its state.
				return dedupe.Applied, nil
			case wasParked:
				return dedupe.Parked, nil
			default:
				return dedupe.DeadLettered, event.PermanentWithReason(ReasonPrerequisiteMissing,
					fmt.Errorf("account %s is unknown to the source and already has parked events (parking.max_per_resource %d)", event.Excerpt(ev.Subject), limit))
			}
		}, parkDoorbellSQL, ev.Key, ev.Subject, ev.Type, o.Group, o.Topic, o.Partition, o.Offset, parked, limit)
		return nil
	}
	var a sourceAccount
	if err := json.Unmarshal(ev.Data, &a); err != nil {
		return event.PermanentWithReason(ReasonSourceInvalid, err)
	}
	e.Exec(AppliedOrStale, upsertAccountSQL, ev.Subject, ev.Version, a.Name, a.Email, a.Plan, a.Status)
	return nil
}

const parkDoorbellSQL = `
WITH acct AS (SELECT 1 FROM accounts WHERE id = $2),
blocked AS (SELECT count(*) AS n FROM parked_events WHERE resource = $2 AND state = 'parked'),
park AS (
    INSERT INTO parked_events (event_key, consumer_group, topic, "partition", "offset", resource, event_type, event)
    SELECT $1, $4, $5, $6, $7, $2, $3, $8 FROM blocked
    WHERE NOT EXISTS (SELECT 1 FROM acct) AND blocked.n < $9
    ON CONFLICT (event_key) DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM acct), EXISTS (SELECT 1 FROM park)`
