package pipeline

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/consumer"
	"github.com/effectively-io/effectively/dedupe"
)

// Applier applies batches in one transaction each.
type Applier struct {
	pool *pgxpool.Pool
	log  *zap.Logger
}

// NewApplier returns an Applier on pool.
func NewApplier(pool *pgxpool.Pool, log *zap.Logger) *Applier {
	return &Applier{pool: pool, log: log}
}

var _ consumer.Applier = (*Applier)(nil)

// Positions implements consumer.Applier.
func (a *Applier) Positions(ctx context.Context, group, topic string, partitions []int32) (map[int32]int64, error) {
	return dedupe.Positions(ctx, a.pool, group, topic, partitions)
}

// Apply implements consumer.Applier.
func (a *Applier) Apply(ctx context.Context, b consumer.Batch) error {
	tx, err := a.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("beginning transaction: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit

	if err := a.apply(ctx, tx, b); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("committing batch of %s/%d at %d: %w", b.Topic, b.Partition, b.Records[0].Offset, err)
	}
	return nil
}

func (a *Applier) apply(ctx context.Context, tx pgx.Tx, b consumer.Batch) error {
	stored, err := dedupe.LockPosition(ctx, tx, b.Group, b.Topic, b.Partition, b.Records[0].Offset)
	if err != nil {
		return err
	}
	// Records below the stored position were applied by another member
	// (the partition's new owner, if this member is a zombie, or the old
	// owner whose batch committed just before the revoke reached it).
	recs := b.Records
	for len(recs) > 0 && recs[0].Offset < stored {
		recs = recs[1:]
	}
	if len(recs) == 0 {
		return nil
	}
	return dedupe.Advance(ctx, tx, b.Group, b.Topic, b.Partition, b.NextOffset())
}
