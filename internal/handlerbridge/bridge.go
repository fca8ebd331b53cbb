// Package handlerbridge carries the engine's side of package handlers — what
// the worker calls on a registry and on a batch's effects, and never a
// handler — across the package boundary without making it public API.
// Package handlers installs the functions below in its init; package
// handling wraps them in types. Nothing outside the module can import
// either, so a team's handler sees only the calls it makes.
package handlerbridge

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/effectively-io/effectively/dedupe"
	"github.com/effectively-io/effectively/event"
)

// Outcome is what became of one event's effects once its statements ran.
type Outcome struct {
	// Disposition is Applied unless a statement's result decided otherwise.
	Disposition dedupe.Disposition
	// Err is a permanent failure decided from a result (a missing
	// prerequisite, say); the event is dead-lettered with its reason.
	Err error

	// Gated counts the event's gated typed effects, GatedApplied those
	// that took effect.
	Gated, GatedApplied int
}

// SettleGated makes an event whose gated effects all found a row or
// tombstone as new or newer stale.
func (o *Outcome) SettleGated() {
	if o.Gated > 0 && o.GatedApplied == 0 && o.Err == nil && o.Disposition == dedupe.Applied {
		o.Disposition = dedupe.Stale
	}
}

// Querier runs catalog queries: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Column is a column of a live table, as the catalog describes it.
type Column struct {
	// Type is the column's type with its modifiers: character varying(20).
	Type string
	// Base is the type without modifiers: character varying.
	Base string
	// Generated: an identity or generated column, which cannot be written.
	Generated bool
	// NotNull: the column refuses NULL (a written NULL fails even where
	// the column has a default).
	NotNull bool
}

// SequenceDigits is how many digits a version column holds an event's
// Sequence in, after the point: numeric Version.Sequence.
const SequenceDigits = 20

// VersionText is an event's Version and Sequence as a version column
// holds them: the version, and the sequence in SequenceDigits after the
// point when there is one.
func VersionText(version, sequence int64) string {
	v := strconv.FormatInt(version, 10)
	if sequence == 0 {
		return v
	}
	s := strconv.FormatInt(sequence, 10)
	return v + "." + strings.Repeat("0", SequenceDigits-len(s)) + s
}

// HoldsSequence says whether c, a version column, holds numeric
// Version.Sequence: unconstrained numeric, or numeric(p, s) with room
// for a 64-bit version and SequenceDigits after the point.
func (c Column) HoldsSequence() bool {
	if c.Base != "numeric" {
		return false
	}
	if c.Type == "numeric" {
		return true
	}
	var p, s int
	if _, err := fmt.Sscanf(c.Type, "numeric(%d,%d)", &p, &s); err != nil {
		return false
	}
	return s >= SequenceDigits && p-s >= 19
}

// TableError is a declared table that does not fit the live database: it
// names the table, the column and the fix.
type TableError struct {
	Table  string
	Column string
	Reason string
	Fix    string
}

func (e *TableError) Error() string {
	col := ""
	if e.Column != "" {
		col = " column " + e.Column
	}
	return fmt.Sprintf("table %s%s: %s (%s)", e.Table, col, e.Reason, e.Fix)
}

// The functions package handlers installs. Their arguments and results are
// package handlers' types (a *handlers.Registry, a handlers.Env, …), which
// this package cannot name; package handling asserts them.
var (
	// NewEffects returns the engine's view of a new *handlers.Effects for
	// a handlers.Env.
	NewEffects func(env any) any
	// EffectsOf returns the engine's view of a *handlers.Effects.
	EffectsOf func(e any) any
	// Registry returns the engine's view of a *handlers.Registry.
	Registry func(r any) any
	// WrapTransport returns a handlers.Env whose clients' transports f
	// wraps.
	WrapTransport func(env any, f func(http.RoundTripper) http.RoundTripper) any
	// Reasons are the dead-letter reasons the handler API declares.
	Reasons func() []event.ReasonDoc
	// TableColumns returns the columns of a live table.
	TableColumns func(ctx context.Context, q Querier, table string) (map[string]Column, error)
)
