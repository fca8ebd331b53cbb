package handlers

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/internal/outbox"
)

// Request is a side effect of an event: one HTTP call to a named target,
// recorded in the outbox in the event's transaction and delivered after it
// commits, by the outbox dispatcher.
type Request struct {
	// Target names the endpoint, as declared by the build.
	Target string
	// Operation names the call ("warehouse.reserve"); with the event's key
	// it identifies the intent, once ever, and derives its idempotency key.
	Operation string
	// Resource orders delivery: an intent waits while an earlier one of the
	// same resource is pending or being sent.
	Resource string
	// Method is the HTTP method.
	Method string
	// Path is appended to the target's URL ("/contacts/42"); empty sends
	// to the URL itself.
	Path string
	// Body is the JSON request body.
	Body json.RawMessage
}

// ErrTargetOff is in the error Send returns for a target without a URL: the
// build declared it, the deployment did not configure it. Handlers that
// treat a side effect as optional ignore it (errors.Is); one that returns
// it dead-letters the event with reason target_unconfigured, to be
// redriven once the target is configured (the worker warns about such
// targets at start-up).
var ErrTargetOff = errors.New("the target has no URL configured")

// ReasonTargetUnconfigured: a side effect to a declared target that has no
// URL.
const ReasonTargetUnconfigured event.Reason = "target_unconfigured"

// Configured reports whether target is declared and has a URL: a handler
// whose side effect is optional asks before building its request.
func (e *Effects) Configured(target string) bool {
	t, ok := e.env.Targets[target]
	return ok && t.URL != ""
}

// Send records r as an outbox intent of the current event. An event whose
// record is older than outbox.retention (a replay of old history) records
// it as suppressed: listed, never sent, unless outbox.resend_expired. A
// target the build did not declare is a permanent error (a wiring bug the
// event is dead-lettered for; fix the build and redrive).
func (e *Effects) Send(r Request) error {
	t, err := e.env.Target(r.Target)
	switch {
	case errors.Is(err, ErrTargetOff):
		return event.PermanentWithReason(ReasonTargetUnconfigured, fmt.Errorf("side effect %s: %w", r.Operation, err))
	case err != nil:
		return event.Permanent(fmt.Errorf("side effect %s: %w", r.Operation, err))
	}
	if r.Operation == "" || r.Method == "" {
		return event.Permanent(fmt.Errorf("side effect to %s needs an Operation and a Method", r.Target))
	}
	// The row keeps only the target's name and the path: its URL and
	// credentials are resolved again at delivery. A path that could reach
	// beyond the target (made from an event's content) is the event's
	// fault, found now rather than at delivery.
	if _, err := outbox.JoinURL(t.URL, r.Path); errors.Is(err, outbox.ErrUnsafePath) {
		return event.Permanent(fmt.Errorf("side effect %s to %s: %w", r.Operation, r.Target, err))
	}
	sql, args := outbox.Record(outbox.Intent{
		EventKey: e.ev.Key, Operation: r.Operation, Resource: r.Resource,
		Method: r.Method, TargetName: r.Target, Target: r.Path, Request: r.Body,
		Idempotent: t.Idempotent, Suppressed: e.env.expiry.Suppress(e.ev.RecordTime),
		TraceParent: e.ev.TraceParent, TraceState: e.ev.TraceState,
	})
	e.Exec(nil, sql, args...) // nil: the event's other statements decide its disposition
	return nil
}
