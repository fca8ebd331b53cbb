package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cenkalti/backoff/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	settings "github.com/effectively-io/effectively/consumer"
	"github.com/effectively-io/effectively/internal/crashpoint"
	"github.com/effectively-io/effectively/internal/pgtext"
	"github.com/effectively-io/effectively/internal/redact"
)

// Options configure a Dispatcher.
type Options struct {
	// Targets are the build's named targets as configured: an intent that
	// names one is sent to its URL joined with the intent's path, with its
	// credentials, resolved at each delivery.
	Targets map[string]Endpoint
	// HTTPClient makes the calls; nil uses one on a tuned clone of the
	// default transport. Its own Timeout, if any, should not exceed Timeout.
	HTTPClient *http.Client
	// Timeout bounds one call (default 10 s).
	Timeout time.Duration
	// LeaseGrace is added to Timeout for the lease of a sending intent
	// (default 30 s): a dispatcher that has not recorded the outcome by then
	// is presumed dead. It covers clock skew and a slow outcome write.
	LeaseGrace time.Duration
	// Concurrency is the most calls in flight (default 8).
	Concurrency int
	// BatchSize is the most intents claimed at once (default and at most
	// Concurrency): every claimed intent is called at once, so a crash
	// leaves no more than the calls in flight in doubt.
	BatchSize int
	// Interval is the pause between polls when the queue is empty
	// (default 500 ms).
	Interval time.Duration
	// RetryInitial and RetryMax bound the jittered exponential backoff
	// between attempts of a retried call (defaults 1 s, 5 min).
	RetryInitial time.Duration
	RetryMax     time.Duration
	// MaxRetryAfter caps a Retry-After the target asks for (default 1 h).
	MaxRetryAfter time.Duration
	// MaxAttempts and MaxAge bound the retries of an intent that keeps
	// failing transiently (5xx, 429, timeouts, connection refused): once it
	// has been attempted MaxAttempts times, or was recorded more than MaxAge
	// ago, its next failure dead-letters it with the last status and error,
	// so its resource's later intents are no longer held back (defaults
	// MaxAttemptsDefault and MaxAgeDefault; outbox.max_attempts and
	// outbox.max_age).
	MaxAttempts int
	MaxAge      time.Duration
	// Logger receives what the dispatcher does; never request bodies.
	Logger *zap.Logger
	// Metrics count deliveries and show the queue; nil: none.
	Metrics *Metrics
	// StatsInterval is how often Run reads the queue's depth for Metrics
	// (default 10 s).
	StatsInterval time.Duration
	// WrapTransportFunc, when set, wraps the transport of every client the
	// dispatcher calls with (a target's own for its CA or client
	// certificate included): tracing's span per call.
	WrapTransportFunc func(http.RoundTripper) http.RoundTripper
}

// The defaults of Options.MaxAttempts and Options.MaxAge (outbox.max_attempts,
// outbox.max_age). The age is the one an operator reasons about: a target is
// given as long to come back as upstream producers are given to retry
// (upstream.max_retry_horizon, 72 h by default). The attempt ceiling is a
// backstop for when waits are short (a low retry.max): at the default
// retry.max of 30 s, 10,000 attempts take longer than 72 h.
const (
	MaxAttemptsDefault = 10000
	MaxAgeDefault      = 72 * time.Hour
)

// MaxResponseBytes is the most of an answer the dispatcher reads: a larger
// body is cut there (and excerpted in last_error), never read whole.
const MaxResponseBytes = 64 << 10

// Dispatcher delivers recorded intents and records their outcomes. Several
// dispatchers (replicas) may run on one database.
type Dispatcher struct {
	pool *pgxpool.Pool
	opts Options
	// endpoints are the targets and their clients; "" is the base client,
	// for intents recorded with a whole URL.
	endpoints *Endpoints
	log       *zap.Logger
}

// NewDispatcher returns a dispatcher on pool.
func NewDispatcher(pool *pgxpool.Pool, opts Options) *Dispatcher {
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.LeaseGrace <= 0 {
		opts.LeaseGrace = 30 * time.Second
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 8
	}
	if opts.BatchSize <= 0 || opts.BatchSize > opts.Concurrency {
		opts.BatchSize = opts.Concurrency
	}
	if opts.Interval <= 0 {
		opts.Interval = 500 * time.Millisecond
	}
	if opts.RetryInitial <= 0 {
		opts.RetryInitial = settings.RetryInitialDefault
	}
	if opts.RetryMax <= 0 {
		opts.RetryMax = settings.RetryMaxDefault
	}
	if opts.MaxRetryAfter <= 0 {
		opts.MaxRetryAfter = time.Hour
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = MaxAttemptsDefault
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = MaxAgeDefault
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.StatsInterval <= 0 {
		opts.StatsInterval = 10 * time.Second
	}
	var client http.Client
	if opts.HTTPClient != nil {
		client = *opts.HTTPClient
	} else {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = opts.Concurrency
		tr.ResponseHeaderTimeout = opts.Timeout
		client.Transport = tr
	}
	// Never follow a redirect, whatever client was given (NewEndpoints
	// makes sure): a 301, 302 or 303 turns the POST into a GET whose 2xx
	// would record the call as sent, and a 307 or 308 carries the body and
	// the idempotency key to wherever the Location says. A 3xx is a
	// configuration error, dead-lettered.
	return &Dispatcher{pool: pool, opts: opts, endpoints: NewEndpoints(opts.Targets, &client, opts.WrapTransportFunc), log: opts.Logger}
}

// NoRedirects is an http.Client CheckRedirect that follows no redirect: the
// client returns the 3xx answer itself.
func NoRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Run delivers intents until ctx is done. Calls in flight when ctx is done
// finish (bounded by Timeout) and their outcomes are recorded; failures are
// logged and the next poll tries again.
func (d *Dispatcher) Run(ctx context.Context) error {
	var lastStats time.Time
	for {
		if d.opts.Metrics != nil && time.Since(lastStats) >= d.opts.StatsInterval {
			lastStats = time.Now()
			if depth, err := QueueDepth(ctx, d.pool); err == nil {
				d.opts.Metrics.setDepth(depth)
			} else if ctx.Err() == nil {
				d.log.Warn("reading the outbox depth", zap.Error(err))
			}
		}
		n, err := d.DeliverOnce(ctx)
		if err != nil && ctx.Err() == nil {
			d.log.Warn("delivering outbox intents", zap.Error(err))
		}
		if n == d.opts.BatchSize && err == nil {
			continue // more may be due
		}
		t := time.NewTimer(d.opts.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// DeliverOnce expires the leases of dead dispatchers, claims the due
// intents (at most BatchSize), delivers them and records the outcomes. It
// returns how many intents it attempted.
func (d *Dispatcher) DeliverOnce(ctx context.Context) (int, error) {
	if err := d.expireLeases(ctx); err != nil {
		return 0, err
	}
	claimed, err := d.claim(ctx)
	if err != nil {
		return 0, err
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	sem := make(chan struct{}, d.opts.Concurrency)
	for _, c := range claimed {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			var o outcome
			if ctx.Err() != nil {
				// Shutting down before the call: nothing was sent.
				o = outcome{state: Pending, released: true, err: "released at shutdown before the call"}
			} else {
				crashpoint.Hit(crashpoint.OutboxBeforeCall)
				o = d.giveUp(c, d.call(ctx, c))
				crashpoint.Hit(crashpoint.OutboxAfterCall)
			}
			if err := d.record(ctx, c, o); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return len(claimed), errors.Join(errs...)
}

// expireLeasesSQL settles the intents of dispatchers that died mid-call:
// an idempotent call may be repeated with its key; any other call may or
// may not have been made, so it becomes unknown and is never repeated
// without an operator.
const expireLeasesSQL = `
UPDATE outbox
SET state = CASE WHEN idempotent THEN 'pending' ELSE 'unknown' END,
    lease_until = NULL, updated_at = now(), next_attempt_at = now(),
    last_error = CASE WHEN idempotent
        THEN 'the dispatcher lease expired during the call; retried with the same idempotency key'
        ELSE 'the dispatcher lease expired during the call; it may or may not have been made: resolve it' END
WHERE state = 'sending' AND lease_until < now()
RETURNING id, operation, state`

func (d *Dispatcher) expireLeases(ctx context.Context) error {
	rows, err := d.pool.Query(ctx, expireLeasesSQL)
	if err != nil {
		return fmt.Errorf("expiring outbox leases: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id        int64
			op, state string
		)
		if err := rows.Scan(&id, &op, &state); err != nil {
			return fmt.Errorf("expiring outbox leases: %w", err)
		}
		if State(state) == Unknown {
			d.log.Warn("an outbox intent was caught mid-call and needs an operator",
				zap.Int64("intent_id", id), zap.String("operation", op), zap.String("state", state))
		} else {
			d.log.Info("retrying an outbox intent caught mid-call",
				zap.Int64("intent_id", id), zap.String("operation", op))
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("expiring outbox leases: %w", err)
	}
	return nil
}

// claimSQL takes due pending intents whose resource has no earlier open
// intent, marks them sending under a lease, and commits (it is one
// statement): no transaction stays open during the calls. SKIP LOCKED lets
// replicas claim side by side; an earlier intent locked by another
// dispatcher is still pending in this one's snapshot, so it blocks its
// successors here too.
const claimSQL = `
WITH due AS (
    SELECT o.id FROM outbox o
    WHERE o.state = 'pending' AND o.next_attempt_at <= now()
      AND NOT EXISTS (
          SELECT 1 FROM outbox p
          WHERE p.resource = o.resource AND p.id < o.id AND p.state IN ('pending', 'sending'))
    ORDER BY o.next_attempt_at, o.id
    LIMIT $1
    FOR UPDATE OF o SKIP LOCKED
)
UPDATE outbox o
SET state = 'sending', attempts = o.attempts + 1, updated_at = now(),
    lease_until = now() + $2::bigint * interval '1 millisecond'
FROM due WHERE o.id = due.id
RETURNING o.id, o.event_key, o.operation, o.method, coalesce(o.target_name, ''), o.target, o.request::text, o.idempotency_key, o.idempotent, o.attempts,
          (extract(epoch FROM now() - o.created_at) * 1000)::bigint, coalesce(o.trace_parent, ''), coalesce(o.trace_state, '')`

// claimed is an intent this dispatcher holds.
type claimed struct {
	id             int64
	eventKey       string
	operation      string
	method         string
	targetName     string
	target         string
	request        string
	idempotencyKey string
	idempotent     bool
	attempts       int           // this one included
	age            time.Duration // since the intent was recorded, by the database's clock
	// traceParent and traceState: the causing event's trace context.
	traceParent, traceState string
}

func (d *Dispatcher) claim(ctx context.Context) ([]claimed, error) {
	lease := d.opts.Timeout + d.opts.LeaseGrace
	rows, err := d.pool.Query(ctx, claimSQL, d.opts.BatchSize, lease.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("claiming outbox intents: %w", err)
	}
	defer rows.Close()
	var out []claimed
	for rows.Next() {
		var (
			c     claimed
			ageMS int64
		)
		if err := rows.Scan(&c.id, &c.eventKey, &c.operation, &c.method, &c.targetName, &c.target, &c.request, &c.idempotencyKey, &c.idempotent, &c.attempts, &ageMS, &c.traceParent, &c.traceState); err != nil {
			return nil, fmt.Errorf("claiming outbox intents: %w", err)
		}
		c.age = time.Duration(ageMS) * time.Millisecond
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claiming outbox intents: %w", err)
	}
	return out, nil
}

// outcome is what a call came to.
type outcome struct {
	state  State
	status int           // the HTTP status, 0 without a response
	wait   time.Duration // before the next attempt, when state is Pending
	err    string
	// released: put back at shutdown before the call was made.
	released bool
}

// maxExcerpt bounds the response body kept in last_error.
const maxExcerpt = 512

// call makes the intent's HTTP call and classifies the answer. The call
// runs to its own timeout even when ctx is cancelled (shutdown drains
// calls in flight), so its outcome can be recorded.
func (d *Dispatcher) call(ctx context.Context, c claimed) outcome {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.opts.Timeout)
	defer cancel()
	req, err := d.request(cctx, c)
	if err != nil {
		if errors.Is(err, ErrUnsafePath) || errors.Is(err, errUnbuildable) {
			// The intent's own path or method: no configuration makes it
			// callable.
			return outcome{state: DeadLettered, err: err.Error()}
		}
		// The deployment, not the intent: retried (until outbox.max_age)
		// once the target is configured again.
		return outcome{state: Pending, wait: d.backoff(c.attempts, 0), err: err.Error()}
	}
	resp, err := d.endpoints.Do(c.targetName, req)
	if err != nil {
		// err is redacted (Endpoints.Do): a *url.Error holds the URL.
		msg := fmt.Sprintf("%s %s: %v", c.method, redact.URL(req.URL.String()), err)
		if c.idempotent || notSent(err) {
			return outcome{state: Pending, wait: d.backoff(c.attempts, 0), err: msg}
		}
		return outcome{state: Unknown, err: msg + " (the call may have been made)"}
	}
	defer resp.Body.Close()
	// Read at most MaxResponseBytes: what is kept is an excerpt, and a
	// body read to its end lets the connection be reused. A larger body is
	// cut, and its connection closed.
	body, _ := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes))
	s := resp.StatusCode
	// A target that echoes its request in an error answer must not put
	// the credentials it was sent into last_error.
	msg := fmt.Sprintf("%s %s: %s: %s", c.method, redact.URL(req.URL.String()), resp.Status,
		redact.Values(excerpt(body), d.endpoints.SentSecrets(c.targetName, req)...))
	switch {
	case s >= 200 && s < 300:
		return outcome{state: Sent, status: s}
	case s >= 300 && s < 400:
		// Not followed (NoRedirects): the target's URL is wrong. Whether a
		// 303 after a POST means the call was processed is the target's
		// business; an operator fixes the URL and retries or resolves it.
		return outcome{state: DeadLettered, status: s, err: fmt.Sprintf(
			"%s %s: %s: redirected to %s; redirects are not followed: point the target's URL at where it is served",
			c.method, redact.URL(req.URL.String()), resp.Status, location(resp))}
	case s == http.StatusTooManyRequests || (s == http.StatusServiceUnavailable && !c.idempotent):
		// Refused before processing: safe to repeat even without a key.
		return outcome{state: Pending, status: s, wait: d.backoff(c.attempts, retryAfter(resp.Header.Get("Retry-After"))), err: msg}
	case s >= 500 || s == http.StatusRequestTimeout:
		if c.idempotent {
			return outcome{state: Pending, status: s, wait: d.backoff(c.attempts, retryAfter(resp.Header.Get("Retry-After"))), err: msg}
		}
		return outcome{state: Unknown, status: s, err: msg + " (the call may have been made)"}
	default:
		return outcome{state: DeadLettered, status: s, err: msg}
	}
}

// errUnbuildable is the error of an intent whose request cannot be built
// (a method net/http refuses).
var errUnbuildable = errors.New("building the request")

// request builds the intent's call: to its target's URL joined with its
// path (JoinURL), with the target's credentials, or, for an intent
// recorded before named targets, to the whole URL it holds.
func (d *Dispatcher) request(ctx context.Context, c claimed) (*http.Request, error) {
	target := c.target
	if c.targetName != "" {
		ep, ok := d.endpoints.Endpoint(c.targetName)
		if !ok || ep.URL == "" {
			return nil, fmt.Errorf("target %s has no URL (targets.%s.url): the intent waits until it is configured", c.targetName, c.targetName)
		}
		u, err := JoinURL(ep.URL, c.target)
		if err != nil {
			return nil, fmt.Errorf("target %s (targets.%s.url): %w", c.targetName, c.targetName, err)
		}
		target = u
	}
	req, err := http.NewRequestWithContext(ctx, c.method, target, strings.NewReader(c.request))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUnbuildable, redact.Error(err))
	}
	req.Header.Set("Content-Type", "application/json")
	// The causing event's trace context (W3C): the target continues the
	// producer's trace. With tracing on, the transport (Options.
	// WrapTransportFunc) starts the call's span as its child and replaces
	// the traceparent with the span's own.
	if c.traceParent != "" {
		req.Header.Set("traceparent", c.traceParent)
		if c.traceState != "" {
			req.Header.Set("tracestate", c.traceState)
		}
	}
	if c.targetName != "" {
		if err := d.endpoints.Authorize(c.targetName, req); err != nil {
			return nil, err
		}
	}
	if c.idempotent {
		// Only here: net/http itself replays a request carrying an
		// Idempotency-Key on a reused connection that broke, which must
		// never happen to a call without idempotency.
		req.Header.Set("Idempotency-Key", c.idempotencyKey)
	}
	return req, nil
}

// location is the redirect's Location, resolved against the request and
// without userinfo.
func location(resp *http.Response) string {
	u, err := resp.Location()
	if err != nil {
		return "(no valid Location)"
	}
	return excerpt([]byte(redact.URL(u.String())))
}

// giveUp dead-letters an intent that failed transiently once more after its
// retries ran out (Options.MaxAttempts attempts, or older than
// Options.MaxAge), keeping the last status and error: it stops holding back
// its resource's later intents. An operator retries it (outbox retry) once
// the target answers; an intent older than MaxAge then gets one attempt.
func (d *Dispatcher) giveUp(c claimed, o outcome) outcome {
	if o.state != Pending || o.released {
		return o
	}
	var why string
	switch {
	case c.attempts >= d.opts.MaxAttempts:
		why = fmt.Sprintf("gave up after %d attempts (outbox.max_attempts)", c.attempts)
	case c.age >= d.opts.MaxAge:
		why = fmt.Sprintf("gave up after %d attempts over %s (outbox.max_age)", c.attempts, c.age.Round(time.Second))
	default:
		return o
	}
	return outcome{state: DeadLettered, status: o.status, err: why + "; last: " + o.err}
}

// notSent reports whether err happened before the request could leave: the
// connection was never made.
func notSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}

// backoff is the wait before the attempt after attempts: capped, jittered
// exponential, and at least what the target asked for (capped too).
func (d *Dispatcher) backoff(attempts int, asked time.Duration) time.Duration {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = d.opts.RetryInitial
	bo.MaxInterval = d.opts.RetryMax
	bo.RandomizationFactor = 0.5
	bo.Reset()
	var wait time.Duration
	for i := 0; i < max(attempts, 1) && i < 64; i++ {
		wait = bo.NextBackOff()
	}
	if asked > wait {
		wait = min(asked, d.opts.MaxRetryAfter)
	}
	return wait
}

// retryAfter parses a Retry-After header: seconds or an HTTP date.
func retryAfter(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0
		}
		return time.Duration(min(secs, int64(24*time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

func excerpt(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) <= maxExcerpt {
		return strings.ToValidUTF8(string(b), "?")
	}
	cut := maxExcerpt
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return strings.ToValidUTF8(string(b[:cut]), "?") + "…"
}

// recordOutcomeSQL settles a claimed intent. Only the holder's 'sending' row
// changes, except that a sent call is recorded even when the lease expired
// meanwhile (unknown): it is known now.
const recordOutcomeSQL = `
UPDATE outbox
SET state = $2::text, last_status = $3, last_error = $4, lease_until = NULL, updated_at = now(),
    next_attempt_at = CASE WHEN $2::text = 'pending' THEN now() + $5::bigint * interval '1 millisecond' ELSE next_attempt_at END,
    sent_at = CASE WHEN $2::text = 'sent' THEN now() END
WHERE id = $1 AND (state = 'sending' OR ($2::text = 'sent' AND state = 'unknown'))`

func (d *Dispatcher) record(ctx context.Context, c claimed, o outcome) error {
	// The outcome is recorded even at shutdown: losing it would turn a
	// delivered message into an unknown one.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	// Every error was built redacted; this is the defence at the row and
	// the log, for an error text no one thought could hold a URL.
	o.err = redact.Text(o.err)
	var status, lastErr any
	if o.status != 0 {
		status = o.status
	}
	if o.err != "" {
		// A target's answer is untrusted text: a NUL in it would make
		// the outcome unrecordable, and the intent would be called again
		// for ever, holding back its resource's later intents.
		o.err = pgtext.Clean(o.err)
		lastErr = o.err
	}
	ct, err := d.pool.Exec(rctx, recordOutcomeSQL, c.id, string(o.state), status, lastErr, o.wait.Milliseconds())
	if err != nil {
		return fmt.Errorf("recording outbox intent %d as %s: %w", c.id, o.state, err)
	}
	fields := []zap.Field{zap.Int64("intent_id", c.id), zap.String("operation", c.operation),
		zap.String("state", string(o.state)), zap.Int("status", o.status), zap.Int("attempts", c.attempts)}
	if !recorded(ct) {
		d.log.Warn("an outbox intent's lease expired before its outcome was recorded", fields...)
		return nil
	}
	d.opts.Metrics.delivered(c.operation, o)
	switch o.state {
	case Sent:
		d.log.Debug("outbox intent sent", fields...)
	case Pending:
		d.log.Info("outbox intent will be retried", append(fields, zap.Duration("wait", o.wait), zap.String("error", o.err))...)
	default:
		d.log.Warn("outbox intent needs an operator", append(fields, zap.String("error", o.err))...)
	}
	return nil
}

func recorded(ct pgconn.CommandTag) bool { return ct.RowsAffected() == 1 }
