// Command orders is a build of effectively for a domain of its own, in a
// module of its own: order events applied exactly once to PostgreSQL tables
// this module migrates, with every command of the reference build (run,
// migrate, replay, dlq, parked, outbox, audit, prune, config, version) and
// two of its own workload tools (produce --events N, verify).
//
//   - order.placed, order.updated, order.cancelled carry an order's whole
//     state and its resourceversion: a version-gated upsert into orders
//     (order.go).
//   - order.line_added is a relative fact: one order_lines row per event,
//     parked until its order exists (line.go).
//   - order.placed reserves stock at the warehouse target through the
//     outbox, once, with an idempotency key (warehouse.go).
//
// See README.md for how to run it.
package main
