// Package dedupe names what became of an event: its Disposition. An event
// is claimed by its dedupe key in the same transaction as its effects, so
// a redelivery finds the claim and is a Duplicate; a version older than the
// row's is Stale; an event waiting for a prerequisite is Parked; an event
// that can never apply is DeadLettered. Handlers see these as
// handlers.Disposition; the audit (effectively audit) reports them per
// event. The claims, positions and their pruning are internal to the
// module.
package dedupe

// Disposition is what became of an event. A claim row holds one of Applied,
// Stale, Parked or DeadLettered; Duplicate has no row of its own (metrics
// count it, the audit derives it from the topic).
type Disposition string

// The dispositions.
const (
	Applied      Disposition = "applied"
	Stale        Disposition = "stale"
	Parked       Disposition = "parked"
	DeadLettered Disposition = "dead_lettered"
	Duplicate    Disposition = "duplicate"
	// Skipped is a record that is no event and asks for no effect: a
	// change-data-capture tombstone (the null value Debezium writes after a
	// delete, for log compaction), a truncate. It has no claim and no dead
	// letter; metrics count it, the audit derives it from the topic.
	Skipped Disposition = "skipped"
)
