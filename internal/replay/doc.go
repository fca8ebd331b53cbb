// Package replay moves a consumer group back over a topic, and replays a
// range of a topic through the worker's own pipeline under a separate group.
//
// Rewinding changes the positions PostgreSQL stores for the group (the
// authoritative ones: the worker starts each partition there) and the
// group's Kafka offsets, in that order, while the group has no members. It
// is the only path that lowers a stored position, and it bumps the
// position's reset epoch in the same transaction, which the worker logs.
//
// Replaying is safe because the effects are keyed by the work: a re-read
// record whose event key was claimed before is a duplicate and runs no
// handler; state is version-gated, relative rows are keyed by event, and
// side-effect intents are unique on (event key, operation).
package replay
