// Package audit explains every record of a topic range (DESIGN.md,
// invariant 7): it reads the range from Kafka (read_committed, directly by
// partition, no group), decodes each record with the worker's decoder for
// the topic, and finds what became of it in PostgreSQL — a dead letter for
// its origin, the claim it made (applied, stale, parked), a claim of its key
// made by another record (a duplicate), or a claim or dead letter pruned by
// retention (below the pruner's watermark). A record below the group's
// stored position that none of these explains is unaccounted.
package audit
