// Package handlers is the handler API: what a team writes to apply its
// events. A Handler receives one newly claimed event.Event and queues its
// statements on Effects; a Registry maps event types to handlers; a
// Prefetcher reads the outside world before the batch's transaction begins
// (fetch-on-event); a Prerequisite tells the engine which events wait for
// which resource to exist (parking).
//
// Handlers never call the outside world from Handle and never commit. An
// event they can never apply returns event.Permanent (dead-lettered with
// its reason, none of its queued statements applied); any other error is
// retried with backoff while the partition is paused.
//
// Prefetchers read with a client that follows no redirect and reads at most
// MaxPrefetchResponseBytes. A prefetch that keeps failing transiently for one
// event while the same prefetcher reads others is dead-lettered with reason
// source_unavailable after prefetch.max_attempts ; a
// source that answers nobody (an outage) is retried with backoff without
// end, as every transient fault is.
package handlers
