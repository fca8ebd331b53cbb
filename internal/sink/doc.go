// Package sink is config-only sinks: the sinks: section of the
// configuration maps event types to tables (a version-gated upsert, an
// insert-once, a gated delete), and this package turns each sink into
// typed effects on the build's handler registry, so the stock binary is an
// exactly-once, disorder-safe sink with no code. At start-up every sink is
// checked against the live table.
package sink
