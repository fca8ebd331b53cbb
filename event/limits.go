package event

// The bounds below keep one record from costing the worker or the database
// more than a fixed multiple of its size, and from failing a statement for
// its size (which would otherwise have to be isolated in a savepoint and
// dead-lettered after the fact). A record outside them is dead-lettered by
// Decode with a reason of its own, before any transaction begins.
//
// PostgreSQL refuses an index row larger than about a third of a page:
// 2704 bytes with the default 8 kB pages ("index row size … exceeds btree
// version 4 maximum 2704", SQLSTATE 54000), and random bytes do not
// compress. The values that land in indexed columns are bounded well below
// that:
//
//   - the dedupe key (effectively_claims, parked_events, a domain's tables
//     keyed by event) by MaxKeyBytes: longer keys are hashed;
//   - the resource ID by MaxResourceIDBytes. It is the primary key of a
//     domain's state table (an order's or a customer's ID), and leads the
//     indexes of parked_events (resource, topic, partition, offset) and the
//     outbox (resource, id): 512 bytes plus a Kafka topic name (at most 249) and
//     two integers stays under 800 bytes, so a team's composite index may
//     hold the resource ID next to two or three more values of that size;
//   - id, source and type by MaxAttributeBytes. id and source only reach an
//     index through the key (hashed beyond MaxKeyBytes); type is stored with
//     every claim and parked event, is a metrics label and a log field, and
//     no real type name comes near 256 bytes.
//
// Lengths are in bytes of UTF-8, as PostgreSQL counts them.
const (
	// MaxAttributeBytes bounds the id, source and type of an event
	// (ReasonAttributeTooLong).
	MaxAttributeBytes = 256
	// MaxResourceIDBytes bounds the resource ID: the subject, the
	// partitionkey extension or the record key (ReasonResourceIDTooLong).
	MaxResourceIDBytes = 512
	// MaxNesting bounds how deeply an event's data nests arrays and objects
	// (ReasonNestingTooDeep). The decoder recurses per level, and so do
	// PostgreSQL's jsonb parser and most handlers' JSON libraries: a record of a few kilobytes of brackets should not be able
	// to reach any of their limits (PostgreSQL answers "stack depth limit
	// exceeded", SQLSTATE 54001, at a few thousand levels with default
	// settings). No event's data needs more than a few dozen levels.
	MaxNesting = 128
)
