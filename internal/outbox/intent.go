package outbox

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// State is an intent's state (not an event disposition).
type State string

// Intent states.
const (
	// Pending: waiting to be delivered (at next_attempt_at).
	Pending State = "pending"
	// Sending: a dispatcher holds the intent under a lease and is calling.
	Sending State = "sending"
	// Sent: the target acknowledged the call.
	Sent State = "sent"
	// Unknown: a call without idempotency may or may not have been made;
	// terminal until an operator resolves it. It does not block later
	// intents of its resource.
	Unknown State = "unknown"
	// Suppressed: recorded by a replay beyond the outbox retention, not
	// sent.
	Suppressed State = "suppressed"
	// DeadLettered: the target refused the call (a 4xx other than 408 and
	// 429), answered with a redirect (a 3xx is a configuration error: no
	// redirect is followed; last_error has the Location), or kept failing
	// transiently past outbox.max_attempts or outbox.max_age; last_status
	// and last_error say why. It no longer holds back its resource's later
	// intents; outbox retry queues it again.
	DeadLettered State = "dead_lettered"
)

// Intent is one outbound call a handler records with its effect.
type Intent struct {
	// EventKey is the key of the event that caused the call.
	EventKey string
	// Operation names the call (warehouse.reserve); with EventKey it
	// identifies the intent and derives its idempotency key.
	Operation string
	// Resource orders delivery: an intent waits while an earlier one of
	// the same resource is pending or sending.
	Resource string
	// Method is the HTTP method. TargetName names the build's target; the
	// dispatcher resolves its base URL and credentials at delivery, and
	// Target is then the path below it. Without a TargetName, Target is
	// the whole URL (intents recorded before named targets).
	Method     string
	TargetName string
	Target     string
	// Request is the JSON request body.
	Request json.RawMessage
	// Idempotent: the target honours Idempotency-Key, so the call may be
	// repeated. False: the call is made at most once without an operator.
	Idempotent bool
	// Suppressed records the intent as suppressed: listed, never sent (a
	// replay of events older than the outbox retention).
	Suppressed bool
	// TraceParent and TraceState are the W3C trace context of the event
	// that caused the call (empty: none); the dispatcher sends them as the
	// traceparent and tracestate headers, so the call continues its trace.
	TraceParent string
	TraceState  string
}

// Expiry decides which intents a replay of old history records as
// suppressed: an event whose record is older than Retention (outbox.retention)
// may have had its intents pruned already, so recording them again would
// fire them again. ResendExpired (outbox.resend_expired) sends them anyway.
// Every handler that records intents asks it, so the policy lives in one
// place.
type Expiry struct {
	Retention     time.Duration
	ResendExpired bool
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Suppress reports whether the intents of an event whose record has
// timestamp recorded are recorded as suppressed. A zero timestamp (the
// broker gave none) or a zero Retention never suppresses.
func (x Expiry) Suppress(recorded time.Time) bool {
	if x.Retention <= 0 || x.ResendExpired || recorded.IsZero() {
		return false
	}
	now := time.Now
	if x.Now != nil {
		now = x.Now
	}
	return now().Sub(recorded) > x.Retention
}

// IdempotencyKey derives the key of the call (eventKey, operation): the
// first 32 hex digits of SHA-256(eventKey 0x1f operation). The same logical
// call always carries the same key; a different call never does (0x1f, the
// unit separator, cannot be confused with either part's text).
func IdempotencyKey(eventKey, operation string) string {
	sum := sha256.Sum256([]byte(eventKey + "\x1f" + operation))
	return hex.EncodeToString(sum[:])[:32]
}

// recordSQL inserts intents given as parallel arrays; an intent that exists
// is never recorded again.
const recordSQL = `
INSERT INTO outbox (event_key, operation, resource, method, target_name, target, request, idempotency_key, idempotent, state, last_error, trace_parent, trace_state)
SELECT i.event_key, i.operation, i.resource, i.method, nullif(i.target_name, ''), i.target, i.request::jsonb, i.idempotency_key, i.idempotent,
       CASE WHEN i.suppressed THEN 'suppressed' ELSE 'pending' END,
       CASE WHEN i.suppressed THEN 'the event is older than outbox.retention (a replay): recorded, not sent; outbox.resend_expired sends such intents' END,
       nullif(i.trace_parent, ''), nullif(i.trace_state, '')
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::boolean[], $9::boolean[], $10::text[], $11::text[], $12::text[])
     AS i (event_key, operation, resource, method, target, request, idempotency_key, idempotent, suppressed, target_name, trace_parent, trace_state)
ORDER BY i.event_key, i.operation
ON CONFLICT (event_key, operation) DO NOTHING`

// Record returns the statement that records intents, for a handler to
// queue in its event's transaction. Rows are inserted sorted by their
// conflict key, so concurrent transactions lock them in the same order.
func Record(intents ...Intent) (sql string, args []any) {
	sorted := slices.Clone(intents)
	slices.SortFunc(sorted, func(a, b Intent) int {
		if c := strings.Compare(a.EventKey, b.EventKey); c != 0 {
			return c
		}
		return strings.Compare(a.Operation, b.Operation)
	})
	n := len(sorted)
	keys, ops, res, methods, targets, reqs, ids := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	idem, supp, names := make([]bool, n), make([]bool, n), make([]string, n)
	parents, states := make([]string, n), make([]string, n)
	for i, in := range sorted {
		keys[i], ops[i], res[i], methods[i], targets[i], names[i] = in.EventKey, in.Operation, in.Resource, in.Method, in.Target, in.TargetName
		reqs[i] = string(in.Request)
		ids[i] = IdempotencyKey(in.EventKey, in.Operation)
		idem[i], supp[i] = in.Idempotent, in.Suppressed
		parents[i], states[i] = in.TraceParent, in.TraceState
	}
	return recordSQL, []any{keys, ops, res, methods, targets, reqs, ids, idem, supp, names, parents, states}
}
