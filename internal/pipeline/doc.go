// Package pipeline is the database side of a batch: it implements
// consumer.Applier by running, in one PostgreSQL transaction per batch, the
// claim of each event key, the domain handlers for newly claimed events, the
// dispositions, and the partition's next offset.
package pipeline
