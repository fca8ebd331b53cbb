package handlers

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/internal/outbox"
)

// Registry maps event types to their handlers and names the prerequisites
// some of them wait for. The zero value is empty and ready to use; a
// Registry is filled before the worker starts and only read afterwards.
type Registry struct {
	handlers map[string]Handler
	waits    map[string]*Prerequisite // event type → what it waits for
	creates  map[string][]*Prerequisite
	targets  map[string]bool // name → idempotent
	tables   *tableSet       // typed effects' tables
	// wrap, when set, wraps every handler Handler returns (see Wrapped).
	wrap func(typ string, h Handler) Handler
}

// Delivery is how a target takes a call that may be repeated.
type Delivery int

const (
	// Idempotent: the target honours an Idempotency-Key header (derived
	// from the event key and the operation), so a call caught by a crash is
	// simply made again.
	Idempotent Delivery = iota + 1
	// RecordedIntent: the target has no idempotency (a notification API):
	// a call is made at most once without an operator; one caught mid-call
	// by a crash becomes unknown until resolved.
	RecordedIntent
)

// Target declares a named outbound HTTP endpoint the handlers send side
// effects to (Effects.Send) or prefetchers read from. Its URL is
// configuration (targets.<name>.url, env EFFECTIVELY_TARGETS_<NAME>_URL).
func (r *Registry) Target(name string, d Delivery) {
	if name == "" || (d != Idempotent && d != RecordedIntent) {
		panic("handlers: a Target needs a name and a Delivery (Idempotent or RecordedIntent)")
	}
	if r.targets == nil {
		r.targets = map[string]bool{}
	}
	if _, ok := r.targets[name]; ok {
		panic(fmt.Sprintf("handlers: target %s is declared twice", name))
	}
	r.targets[name] = d == Idempotent
}

// Targets are the declared targets' names, sorted.
func (v *engineRegistry) Targets() []string {
	r := (*Registry)(v)
	out := make([]string, 0, len(r.targets))
	for n := range r.targets {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Env resolves the declared targets against their configured endpoints
// (a name without a URL is off). Prefetchers read with a copy of client
// (nil: one with a 5 s timeout) that follows no redirect and cuts bodies at
// MaxPrefetchResponseBytes: HTTPClient, and each Target's own (Target.Do),
// which adds the target's CA and client certificate as the outbox does.
// One event's transient failures are bounded by prefetchMaxAttempts (0:
// PrefetchMaxAttemptsDefault; below 0: unbounded).
func (v *engineRegistry) Env(targets map[string]outbox.Endpoint, expiry outbox.Expiry, client *http.Client, prefetchMaxAttempts int) Env {
	r := (*Registry)(v)
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Second}
	}
	env := Env{
		Targets: make(map[string]Target, len(r.targets)), expiry: expiry,
		HTTPClient: prefetchClient(client),
		tables:     r.tables,
		endpoints:  outbox.NewEndpoints(targets, client, capBodies),
	}
	if prefetchMaxAttempts >= 0 {
		env.prefetches = newPrefetchFailures(prefetchMaxAttempts)
	}
	for n, idem := range r.targets {
		env.Targets[n] = Target{URL: targets[n].URL, Idempotent: idem, name: n, endpoints: env.endpoints}
	}
	return env
}

// Handle registers h for events of type typ. A type has one handler;
// registering a second one panics, as http.ServeMux does: it is a wiring
// bug, found at start-up.
func (r *Registry) Handle(typ string, h Handler) {
	if typ == "" || h == nil {
		panic("handlers: Handle needs an event type and a handler")
	}
	if r.handlers == nil {
		r.handlers = map[string]Handler{}
	}
	if _, ok := r.handlers[typ]; ok {
		panic(fmt.Sprintf("handlers: a handler for %s is already registered", typ))
	}
	r.handlers[typ] = h
}

// HandleFunc registers f for events of type typ.
func (r *Registry) HandleFunc(typ string, f func(ctx context.Context, e *Effects, ev event.Event) error) {
	r.Handle(typ, HandlerFunc(f))
}

// Handler returns the handler of typ. A Prefetcher comes back wrapped: its
// transient failures are bounded by the Env's prefetch failures.
func (v *engineRegistry) Handler(typ string) (Handler, bool) {
	r := (*Registry)(v)
	h, ok := r.handlers[typ]
	if !ok {
		return nil, false
	}
	if pf, isPF := h.(Prefetcher); isPF {
		h = boundedPrefetcher{Handler: h, pf: pf}
	}
	if r.wrap != nil {
		h = r.wrap(typ, h)
	}
	return h, true
}

// Wrapped returns a registry with r's registrations whose Handler wraps
// every handler it returns with wrap (tracing's span per handler call). A
// wrapper of a Prefetcher must be a Prefetcher too. r itself is unchanged;
// neither may be changed afterwards.
func (v *engineRegistry) Wrapped(wrap func(typ string, h Handler) Handler) *Registry {
	c := *(*Registry)(v)
	c.wrap = wrap
	return &c
}

// Types are the registered event types, sorted.
func (v *engineRegistry) Types() []string {
	r := (*Registry)(v)
	out := make([]string, 0, len(r.handlers))
	for t := range r.handlers {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// Prerequisite is a resource some events cannot be applied without: an
// order line needs its order, a payment its invoice. An event of a type in
// Waiting whose resource (its subject) does not exist yet is parked in
// PostgreSQL, and so is every later event of that resource of a waiting
// type (they queue behind it, in order). An event of a type in CreatedBy
// that applies (or arrives stale: the resource exists either way) releases
// the resource's parked events in the same transaction, in their original
// order. Parked events past parking.max_age or parking.max_attempts are
// dead-lettered with reason prerequisite_missing.
type Prerequisite struct {
	// Name names the resource in logs and dead letters ("order").
	Name string
	// ExistsSQL is how the engine checks: a query that takes the resource
	// IDs as $1 (text[]) and returns the ones that exist, one per row, e.g.
	// SELECT id FROM orders WHERE id = ANY($1).
	ExistsSQL string
	// CreatedBy are the event types whose application means the resource
	// exists.
	CreatedBy []string
	// Waiting are the event types that wait for the resource. A handler
	// that implements Waiter decides per event.
	Waiting []string
}

// Waiter is a handler whose events wait for their prerequisite only
// sometimes: a doorbell waits when the source does not know the resource
// yet, and creates it when the source does. Waits is called after Prefetch.
type Waiter interface {
	Waits(ev event.Event) bool
}

// Require registers a prerequisite. It panics on a wiring bug: no name, no
// query, an event type that waits for two prerequisites.
func (r *Registry) Require(p Prerequisite) {
	if p.Name == "" || p.ExistsSQL == "" || len(p.Waiting) == 0 {
		panic("handlers: a Prerequisite needs a Name, an ExistsSQL and Waiting event types")
	}
	if r.waits == nil {
		r.waits = map[string]*Prerequisite{}
		r.creates = map[string][]*Prerequisite{}
	}
	pp := &p
	pp.CreatedBy = slices.Clone(p.CreatedBy)
	pp.Waiting = slices.Clone(p.Waiting)
	for _, t := range p.Waiting {
		if q, ok := r.waits[t]; ok {
			panic(fmt.Sprintf("handlers: %s already waits for %s", t, q.Name))
		}
		r.waits[t] = pp
	}
	for _, t := range p.CreatedBy {
		r.creates[t] = append(r.creates[t], pp)
	}
}

// WaitsFor returns the prerequisite ev waits for, or nil.
func (v *engineRegistry) WaitsFor(ev event.Event) *Prerequisite {
	r := (*Registry)(v)
	p := r.waits[ev.Type]
	if p == nil {
		return nil
	}
	if w, ok := r.handlers[ev.Type].(Waiter); ok && !w.Waits(ev) {
		return nil
	}
	return p
}

// Validate runs the Validate of ev's handler, when it is a Validator, and
// returns a permanent error for an event that can never apply (nil for
// one that may, and for a type without a handler: that is decided later).
// The handler registered is asked, not a wrapper (tracing's), so a wrapper
// need not forward the method.
func (v *engineRegistry) Validate(ev event.Event) error {
	val, ok := v.handlers[ev.Type].(Validator)
	if !ok {
		return nil
	}
	err := val.Validate(ev)
	if err == nil || event.IsPermanent(err) {
		return err
	}
	return event.PermanentWithReason(ReasonInvalidPayload, fmt.Errorf("validating %s: %w", ev.Type, err))
}

// Creates reports whether an applied event of type typ means its resource
// exists, for some prerequisite.
func (v *engineRegistry) Creates(typ string) bool { return len(v.creates[typ]) > 0 }

// CreatedBy are the prerequisites an applied event of type typ creates.
func (v *engineRegistry) CreatedBy(typ string) []*Prerequisite { return v.creates[typ] }
