// Package dedupe owns the tables that make delivery idempotent: claims of
// event keys (effectively_claims) with their dispositions, and each partition's
// authoritative position (consumer_offsets), written in the same transaction
// as the effects. Its Pruner deletes what has outlived its retention in
// small batches and keeps the watermarks the audit reads to tell a pruned
// claim from a missing one.
package dedupe
