package consumer

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Batch is records of one partition, in offset order, applied together.
type Batch struct {
	// Group is the consumer group the batch is applied for.
	Group string
	// Topic and Partition say where the records come from.
	Topic     string
	Partition int32
	// Records are in offset order; never empty.
	Records []*kgo.Record
}

// NextOffset is the offset after the batch's last record.
func (b Batch) NextOffset() int64 { return b.Records[len(b.Records)-1].Offset + 1 }

// Applier applies batches to the database. Implementations commit the batch's
// effects and the partition's next offset in one transaction, or a batch in
// consecutive parts, each part's effects with its next offset.
type Applier interface {
	// Apply applies b. An error means the batch is retried with backoff:
	// nothing of it was committed, or, for a batch applied in parts (the
	// pipeline splits one whose records decode to more data than its
	// budget holds), only the parts before the one that failed, whose
	// records the stored position then fences. Permanent failures of
	// single records are the Applier's to record, not errors.
	Apply(ctx context.Context, b Batch) error
	// Positions returns the stored position of each given partition of
	// topic for group; partitions without one are absent.
	Positions(ctx context.Context, group, topic string, partitions []int32) (map[int32]Position, error)
}

// Position is a partition's stored position.
type Position struct {
	// Next is the offset after the last record applied.
	Next int64
	// ResetEpoch counts how many times `effectively replay --execute` has
	// lowered the position (0: never).
	ResetEpoch int64
}
