// Package outbox delivers the side effects that handlers record as intents
// in the same transaction as their effects (DESIGN.md, invariant 8).
//
// A handler never calls the outside world. It records an [Intent] with the
// statement [Record] builds; the intent's (event key, operation) is unique,
// so a redelivered or replayed event records nothing. The [Dispatcher] then
// claims due intents (FOR UPDATE SKIP LOCKED, one resource's intents in
// order), marks them sending under a lease and commits, makes the HTTP call
// with no transaction open, and records the outcome:
//
//   - A target that honours Idempotency-Key (an inventory API) gets a key derived
//     from (event key, operation), the same on every attempt; timeouts, 5xx
//     and 429 are retried with capped, jittered backoff (at least
//     Retry-After), other 4xx dead-letter the intent with the status.
//   - A target without idempotency (a notification API) is called at most once by
//     the dispatcher: an intent whose lease expires while sending (a crash
//     between the call and its record), or whose call ended without a clear
//     answer, becomes unknown and waits for an operator ([Dispatcher.Resolve]).
//     A missing message is recoverable; a second one is not.
//
// No redirect is followed, whatever client is given: a 3xx dead-letters the
// intent with its status and Location (a 302 would turn a POST into a GET
// whose 2xx records a message as sent; a 307 would carry the body and the
// idempotency key to another host). At most [MaxResponseBytes] of an answer
// is read. An intent that keeps failing transiently is dead-lettered with
// its last status and error once it has been attempted Options.MaxAttempts
// times or is older than Options.MaxAge, so it stops holding back its
// resource's later intents; [Retry] queues it again.
package outbox
