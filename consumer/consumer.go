// Package consumer names the consumer group's settings a team configures
// (consumer.* and kafka.group_protocol, kafka.start_offset,
// kafka.offset_out_of_range in the configuration) and their defaults.
// The consumer itself — group membership, partition workers, batching,
// backpressure and lag — is internal to the module: a team runs it through
// service.Worker and never calls it.
package consumer

import "time"

// Group protocols (kafka.group_protocol).
const (
	// GroupProtocolClassic is the client-side assignment protocol
	// (cooperative-sticky), the default.
	GroupProtocolClassic = "classic"
	// GroupProtocolConsumer is KIP-848: the broker assigns partitions.
	GroupProtocolConsumer = "consumer"
)

// Where a partition without a stored position starts (kafka.start_offset).
const (
	// StartOffsetEarliest starts at the log start, the default.
	StartOffsetEarliest = "earliest"
	// StartOffsetLatest starts at the end of the log.
	StartOffsetLatest = "latest"
)

// Policies for a position outside its partition's log
// (kafka.offset_out_of_range).
const (
	// OutOfRangeStop stops the partition with an alert.
	OutOfRangeStop = "stop"
	// OutOfRangeLogStart resumes at the log start when the records before
	// it were deleted unprocessed; a position past the end still stops.
	OutOfRangeLogStart = "log-start"
)

// Defaults of the consumer's settings.
const (
	// DrainTimeoutDefault bounds a graceful shutdown's wait
	// (shutdown.drain_timeout): well inside Kubernetes' default 30 s grace
	// period, so the member still leaves the group and exits before it is
	// killed.
	DrainTimeoutDefault = 20 * time.Second
	// MaxInflightBytesDefault is the member-wide byte bound
	// (consumer.max_inflight_bytes): eight partitions' full queues. Small
	// events never reach it (10,000 records of a few hundred bytes per
	// partition); 1 MiB records on 16 partitions would hold twice it
	// without it.
	MaxInflightBytesDefault = 64 << 20
	// RetryInitialDefault and RetryMaxDefault bound the jittered
	// exponential backoff of every transient failure (retry.initial,
	// retry.max): a partition's batch, the outbox's redelivery to a target
	// (bounded in all by outbox.max_attempts and outbox.max_age), the
	// dead-letter relay's publish.
	RetryInitialDefault = 100 * time.Millisecond
	RetryMaxDefault     = 30 * time.Second
)
