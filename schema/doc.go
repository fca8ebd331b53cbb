// Package schema owns the database schema: numbered SQL migrations embedded
// in the binary and the entry point that applies them.
//
// Migrations run through goose under a PostgreSQL session advisory lock, so
// several replicas may run `effectively migrate` (or start) at the same
// moment: one applies, the others wait and then find nothing to do. The lock
// ID is derived from the target schema, so separate schemas (one per test)
// migrate independently.
package schema
