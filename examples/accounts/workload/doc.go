// Package workload generates the reference domain's event stream for demos,
// tests and benchmarks: accounts opened, updated and closed (absolute,
// versioned), ledger credits and debits (relative), as CloudEvents 1.0 in
// JSON structured mode, keyed by account ID — with the duplicates and the
// disorder that real delivery brings.
//
// A Generator is deterministic: the same Config (Seed and StartTime
// included) yields a byte-identical record stream. It streams: Next hands
// out one record at a time, so a million records never sit in memory at
// once; only per-account state is kept (one entry per account).
//
// Alongside the stream it computes the Expected end state — final accounts,
// balances, how many records are re-sends and how many events arrive stale —
// from the logical events it emitted, never from the worker's code, so that
// a verifier can hold the database against it.
//
// Two kinds of disorder are generated:
//
//   - re-sends: a record already emitted is emitted again some records
//     later (up to resendWindow originals back), byte for byte the same
//     value and key, at a new offset and with a new record timestamp — what
//     a producer retry or an upstream redelivery looks like;
//   - swaps: an account.updated, account.closed or ledger event is held back
//     and emitted right after the account's next event, so that version 3
//     may arrive before version 2. An account.opened is never held and
//     nothing is ever swapped ahead of it: an account's first record is
//     always its opening. An event still held when the stream ends is never
//     emitted (it is not in Expected either), so with few events per
//     account the swapped fraction falls somewhat short of OutOfOrder.
package workload
