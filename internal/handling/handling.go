// Package handling is the engine's view of package handlers: the registry
// as the worker reads it (a type's handler, its prerequisite, the tables to
// check) and a batch's effects as the worker drives them (begin an event,
// discard it, flush the batch in the transaction). A handler never sees
// these calls; they reach package handlers through internal/handlerbridge.
package handling

import (
	"context"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/handlerbridge"
	"github.com/effectively-io/effectively/internal/outbox"
)

type (
	// Origin is where an event was read.
	Origin = handlers.Origin
	// Outcome is what became of one event's effects once its statements ran.
	Outcome = handlerbridge.Outcome
	// Querier runs catalog queries: a pool, a connection or a transaction.
	Querier = handlerbridge.Querier
	// Column is a column of a live table.
	Column = handlerbridge.Column
	// TableError is a declared table that does not fit the live database.
	TableError = handlerbridge.TableError
)

// Effects is a batch's effects as the engine drives them.
type Effects interface {
	// Begin starts collecting the statements of the next event, ev, read
	// at origin, and returns its outcome, filled in when the batch runs.
	Begin(origin Origin, ev event.Event) *Outcome
	// Queued is the number of statements queued for the current event.
	Queued() int
	// Discard drops the statements queued for the current event: a
	// handler failed after queueing, so a permanent failure dead-letters
	// the event with none of its effects.
	Discard()
	// Len is the number of statements and typed effects queued in all.
	Len() int
	// Flush sends the batch's statements in tx and settles every event's
	// outcome.
	Flush(ctx context.Context, tx pgx.Tx) error
	// Effects is what the handlers are given.
	Effects() *handlers.Effects
}

// NewEffects returns an empty batch of effects in env.
func NewEffects(env handlers.Env) Effects {
	return handlerbridge.NewEffects(env).(Effects)
}

// EffectsOf is the engine's view of e, a batch's effects as a handler was
// given them.
func EffectsOf(e *handlers.Effects) Effects {
	return handlerbridge.EffectsOf(e).(Effects)
}

// Registry is a build's registry as the engine reads it.
type Registry interface {
	// Handler returns the handler of typ. A Prefetcher comes back wrapped:
	// its transient failures are bounded by the Env's prefetch failures.
	Handler(typ string) (handlers.Handler, bool)
	// Types are the registered event types, sorted.
	Types() []string
	// Targets are the declared targets' names, sorted.
	Targets() []string
	// Tables are the registered tables, in registration order.
	Tables() []*handlers.Table
	// WaitsFor returns the prerequisite ev waits for, or nil.
	WaitsFor(ev event.Event) *handlers.Prerequisite
	// Validate runs the Validate of ev's handler, when it is a Validator,
	// and returns a permanent error for an event that can never apply.
	Validate(ev event.Event) error
	// Creates reports whether an applied event of type typ means its
	// resource exists, for some prerequisite.
	Creates(typ string) bool
	// CreatedBy are the prerequisites an applied event of type typ creates.
	CreatedBy(typ string) []*handlers.Prerequisite
	// Env resolves the declared targets against their configured
	// endpoints. One event's transient prefetch failures are bounded by
	// prefetchMaxAttempts (0: handlers.PrefetchMaxAttemptsDefault; below
	// 0: unbounded).
	Env(targets map[string]outbox.Endpoint, expiry outbox.Expiry, client *http.Client, prefetchMaxAttempts int) handlers.Env
	// CheckTables checks every registered table against the live database
	// and orders them by their foreign keys; it returns *TableError
	// (joined, one per problem).
	CheckTables(ctx context.Context, q Querier) error
	// Wrapped returns a registry with the same registrations whose Handler
	// wraps every handler it returns (tracing's span per handler call).
	Wrapped(wrap func(typ string, h handlers.Handler) handlers.Handler) *handlers.Registry
}

// Of is the engine's view of r.
func Of(r *handlers.Registry) Registry {
	return handlerbridge.Registry(r).(Registry)
}

// WrapTransport returns env with f wrapping the transport of every client
// its prefetchers read with — HTTPClient's and each Target's — outside the
// body cap.
func WrapTransport(env handlers.Env, f func(http.RoundTripper) http.RoundTripper) handlers.Env {
	return handlerbridge.WrapTransport(env, f).(handlers.Env)
}

// Reasons returns the dead-letter reasons the handler API declares (beyond
// the decoder's, event.ReasonDocs), with their doc comments.
func Reasons() []event.ReasonDoc { return handlerbridge.Reasons() }

// VersionText is an event's Version and Sequence as a version column
// holds them (numeric Version.Sequence).
func VersionText(version, sequence int64) string {
	return handlerbridge.VersionText(version, sequence)
}

// TableColumns returns the columns of the named table (optionally
// schema-qualified); nil when there is no such table or the role cannot see
// it.
func TableColumns(ctx context.Context, q Querier, table string) (map[string]Column, error) {
	return handlerbridge.TableColumns(ctx, q, table)
}

// TombstonesPruned is effectively_tombstones as the retention pruner sees
// it: a tombstone goes after dedupe.retention, like the claim of the
// deletion that left it. An upsert older than the deletion that arrives
// later than that is past the window in which the producer contract
// allows redeliveries (upstream.max_retry_horizon).
var TombstonesPruned = dedupe.PrunedTable{
	Name:  tombstones,
	Count: `SELECT count(*) FROM effectively_tombstones WHERE deleted_at < $1`,
	Prune: dedupe.PruneStatement(`
    SELECT table_name, key FROM effectively_tombstones
    WHERE deleted_at < $1
    ORDER BY deleted_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED`, `
    DELETE FROM effectively_tombstones t USING doomed d
    WHERE t.table_name = d.table_name AND t.key = d.key
    RETURNING t.key`, false),
}

// tombstones is the table gated deletes leave their tombstones in.
const tombstones = "effectively_tombstones"
