// Package workload generates a deterministic stream of order events for
// the orders example, and computes — from the events alone — the end state
// a correct worker must reach. It never reads the worker's bookkeeping: the
// expected rows come from the generated events, and Verify compares them
// with the effect tables.
//
// The stream is CloudEvents in JSON structured mode, keyed by order ID (so
// franz-go's default murmur2 partitioner keeps one order's events in one
// partition, in order), with the two kinds of trouble the worker must make
// harmless:
//
//   - duplicates: a fraction of the records re-send an earlier record (same
//     id, same payload, same key) a little later;
//   - disorder: a fraction of the events swap places with their order's next
//     event, so updates arrive before older versions (which are then stale)
//     and lines arrive before the order they belong to (which the worker
//     parks until the order exists).
//
// Orphan lines belong to orders that never arrive: they stay parked.
package workload
