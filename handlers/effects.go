package handlers

import (
	"context"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/effectively-io/effectively/dedupe"
	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/internal/handlerbridge"
	"github.com/effectively-io/effectively/internal/outbox"
)

// Handler applies the effect of one newly claimed event. It validates the
// event's data (returning a permanent error for data it can never apply:
// the event is dead-lettered and its queued statements dropped) and queues
// its statements on e. Handlers never call the outside world.
type Handler interface {
	Handle(ctx context.Context, e *Effects, ev event.Event) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, e *Effects, ev event.Event) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, e *Effects, ev event.Event) error {
	return f(ctx, e, ev)
}

// Validator is a handler that can tell, from the event alone, that it can
// never apply: a negative amount, a malformed currency, a field of the
// wrong type. The engine calls Validate before it decides whether the event
// waits for a prerequisite, so an invalid event is dead-lettered at once
// instead of being parked until parking.max_age, and only events that
// would apply once their prerequisite arrives are parked. Validate returns
// a permanent error (event.PermanentWithReason) for an invalid event; any
// other error is taken as invalid too, with reason invalid_payload (an
// event's validation cannot depend on the environment). Handle still
// validates on its own: Validate is an earlier look, not a promise the
// handler may rely on.
type Validator interface {
	Validate(ev event.Event) error
}

// Validated returns a Handler that is also a Validator: validate decides,
// before the gate, whether the event can ever apply; handle applies it.
func Validated(validate func(ev event.Event) error, handle HandlerFunc) Handler {
	return validated{validate: validate, HandlerFunc: handle}
}

type validated struct {
	validate func(ev event.Event) error
	HandlerFunc
}

func (v validated) Validate(ev event.Event) error { return v.validate(ev) }

// ReasonInvalidPayload: a handler's Validate refused the event's data
// without naming a reason of its own.
const ReasonInvalidPayload event.Reason = "invalid_payload"

// Prefetcher is a handler that reads from the outside world before the
// batch's transaction begins (never inside it): a doorbell fetches the
// resource's current state. Prefetch returns the event to apply (its Key and
// PayloadHash unchanged), a transient error (the batch is retried with
// backoff), or a permanent one (event.Permanent: dead-lettered). A transient
// failure for one event while the source answers others is retried at most
// prefetch.max_attempts times, then dead-lettered with reason
// source_unavailable; a redirect is the source's
// answer, not followed.
type Prefetcher interface {
	Prefetch(ctx context.Context, env Env, ev event.Event) (event.Event, error)
}

// Effects collects the statements of a batch's events, in offset order, to
// send in one round trip. Each statement belongs to the event being handled
// when it was queued; its result callback decides that event's outcome.
type Effects struct {
	env     Env
	batch   *pgx.Batch
	current *handlerbridge.Outcome
	origin  Origin
	ev      event.Event
	queued  int // statements and typed effects queued for the current event

	typed       []typedEffect // in the order handlers emitted them
	typedQueued int           // of which the current event's
}

// Env is what the engine tells handlers and prefetchers about the
// deployment: the build's targets with their configured URLs, the outbox's
// expiry policy, and the HTTP client for reading from targets.
type Env struct {
	// Targets are the declared targets by name.
	Targets map[string]Target
	// HTTPClient is a client for reading from elsewhere than a target. The
	// one Registry.Env makes follows no redirect and cuts bodies at
	// MaxPrefetchResponseBytes. A prefetcher reads from a target with the
	// Target's NewRequest and Do, which add its credentials and TLS
	// settings, and redact its errors.
	HTTPClient *http.Client
	expiry     outbox.Expiry // outbox.retention and outbox.resend_expired
	// prefetches bounds one event's transient prefetch failures while the
	// source answers other events (prefetch.max_attempts); nil: unbounded,
	// every transient failure retries the batch.
	prefetches *prefetchFailures
	tables     *tableSet         // the registry's typed-effect tables (Registry.Env)
	endpoints  *outbox.Endpoints // the targets' clients and credentials (Registry.Env)
}

// wrapTransport returns env with f wrapping the transport of every client
// its prefetchers read with — HTTPClient's and each Target's (tracing's
// span per call) — outside the body cap.
func (env Env) wrapTransport(f func(http.RoundTripper) http.RoundTripper) Env {
	if env.HTTPClient != nil {
		c := *env.HTTPClient
		rt := c.Transport
		if rt == nil {
			rt = http.DefaultTransport
		}
		c.Transport = f(rt)
		env.HTTPClient = &c
	}
	if env.endpoints != nil {
		env.endpoints = env.endpoints.Wrapped(f)
	}
	targets := make(map[string]Target, len(env.Targets))
	for n, t := range env.Targets {
		if t.endpoints != nil {
			t.endpoints = env.endpoints
		}
		targets[n] = t
	}
	env.Targets = targets
	return env
}

// Target returns the named target, ErrTargetOff when it has no URL, or an
// error when the build declared no such target.
func (env Env) Target(name string) (Target, error) {
	t, ok := env.Targets[name]
	switch {
	case !ok:
		return Target{}, fmt.Errorf("no target %q is declared", name)
	case t.URL == "":
		return t, fmt.Errorf("target %s: %w (set targets.%s.url)", name, ErrTargetOff, name)
	}
	return t, nil
}

// Origin is where an event was read: its group, topic, partition and offset.
type Origin struct {
	Group     string
	Topic     string
	Partition int32
	Offset    int64
}

// Origin is where the event being handled was read.
func (e *Effects) Origin() Origin { return e.origin }

// newEffects returns an empty collection.
func newEffects(env Env) *Effects {
	return &Effects{env: env, batch: &pgx.Batch{}}
}

// Begin starts collecting the statements of the next event, ev, read at
// origin, and returns its outcome, filled in when the batch runs.
func (v *engineEffects) Begin(origin Origin, ev event.Event) *handlerbridge.Outcome {
	e := (*Effects)(v)
	o := &handlerbridge.Outcome{Disposition: dedupe.Applied}
	e.current = o
	e.origin = origin
	e.ev = ev
	e.queued, e.typedQueued = 0, 0
	return o
}

// Queued is the number of statements queued for the current event.
func (v *engineEffects) Queued() int { return v.queued }

// Discard drops the statements queued for the current event: the engine
// calls it when a handler fails after queueing, so a permanent failure
// dead-letters the event with none of its effects.
func (v *engineEffects) Discard() {
	e := (*Effects)(v)
	n := len(e.batch.QueuedQueries) - (e.queued - e.typedQueued)
	clear(e.batch.QueuedQueries[n:])
	e.batch.QueuedQueries = e.batch.QueuedQueries[:n]
	t := len(e.typed) - e.typedQueued
	clear(e.typed[t:])
	e.typed = e.typed[:t]
	e.queued, e.typedQueued = 0, 0
}

// Exec queues a statement; decide (nil: always applied) maps its command
// tag to the event's disposition.
func (e *Effects) Exec(decide func(pgconn.CommandTag) (Disposition, error), sql string, args ...any) {
	o := e.current
	e.queued++
	e.batch.Queue(sql, args...).Exec(func(ct pgconn.CommandTag) error {
		if decide != nil {
			o.Disposition, o.Err = decide(ct)
		}
		return nil
	})
}

// QueryRow queues a statement returning one row; decide scans it and maps
// it to the event's disposition.
func (e *Effects) QueryRow(decide func(pgx.Row) (Disposition, error), sql string, args ...any) {
	o := e.current
	e.queued++
	e.batch.Queue(sql, args...).QueryRow(func(row pgx.Row) error {
		d, err := decide(row)
		if err != nil && !event.IsPermanent(err) {
			return err // a scan failure: fail the batch
		}
		o.Disposition, o.Err = d, err
		return nil
	})
}

// Len is the number of statements and typed effects queued in all.
func (v *engineEffects) Len() int { return v.batch.Len() + len(v.typed) }

// Disposition is what became of an event (package dedupe's, here so that a
// handler's decide function names only this package).
type Disposition = dedupe.Disposition

// The dispositions a decide function returns.
const (
	Applied = dedupe.Applied
	Stale   = dedupe.Stale
)

// AppliedOrStale is the decision of a version-gated upsert: a row written
// means applied, none means the stored version was as new or newer.
func AppliedOrStale(ct pgconn.CommandTag) (Disposition, error) {
	if ct.RowsAffected() == 0 {
		return Stale, nil
	}
	return Applied, nil
}

// ReasonPrerequisiteMissing: a relative event for a resource that does not
// exist (an order line for an order never placed).
const ReasonPrerequisiteMissing event.Reason = "prerequisite_missing"

// ReasonSourceUnavailable: an event's prefetch kept failing transiently
// (prefetch.max_attempts times) while the same prefetcher read other events
// successfully: the source fails for that one resource, and the event is
// dead-lettered so its partition moves on. dlq redrive re-applies it.
const ReasonSourceUnavailable event.Reason = "source_unavailable"

// ReasonUnknownType: no handler is registered for the event's type.
const ReasonUnknownType event.Reason = "unknown_type"

// ReasonVersionColumn is the dead-letter reason of an event whose order
// has a Sequence (a Debezium change's) gated on a table whose version
// column cannot hold one: make the column numeric and redrive.
const ReasonVersionColumn event.Reason = "version_column"

// UnknownType is the permanent error of an event no handler takes.
func UnknownType(typ string) error {
	return event.PermanentWithReason(ReasonUnknownType, fmt.Errorf("no handler for event type %s", event.Excerpt(typ)))
}
