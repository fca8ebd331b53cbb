// Package consumer is the Kafka side of the worker: group membership, one
// goroutine per owned partition applying records in offset order, batching,
// backpressure by pausing partitions, retry of transient failures, and the
// Kafka offset commit that follows each database commit.
//
// The database side is behind [Applier]: it applies a batch (claim, effect
// and the partition's next offset) in one transaction and tells the consumer
// where each partition stands. The consumer never commits to Kafka before the
// Applier has committed, and never after a partition's revoke or lost
// callback has returned: franz-go does not check a commit against ownership,
// and a stale commit would rewind the new owner.
package consumer
