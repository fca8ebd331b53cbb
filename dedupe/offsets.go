package dedupe

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Querier runs a query: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

const positionsSQL = `
SELECT "partition", next_offset, reset_epoch FROM consumer_offsets
WHERE consumer_group = $1 AND topic = $2 AND ($3::int[] IS NULL OR "partition" = ANY($3))`

// Position is a partition's stored position.
type Position struct {
	// Next is the offset after the last record the group has processed.
	Next int64
	// ResetEpoch counts how many times `effectively replay --execute` has
	// lowered it (0: never).
	ResetEpoch int64
}

// Positions returns the stored position of each given partition of topic
// for group (every partition when partitions is nil); partitions without
// one are absent.
func Positions(ctx context.Context, db Querier, group, topic string, partitions []int32) (map[int32]Position, error) {
	rows, err := db.Query(ctx, positionsSQL, group, topic, partitions)
	if err != nil {
		return nil, fmt.Errorf("reading the stored positions of group %s on %s: %w", group, topic, err)
	}
	out := make(map[int32]Position, len(partitions))
	var p int32
	var pos Position
	_, err = pgx.ForEachRow(rows, []any{&p, &pos.Next, &pos.ResetEpoch}, func() error {
		out[p] = pos
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the stored positions of group %s on %s: %w", group, topic, err)
	}
	return out, nil
}

const lockPositionSQL = `
INSERT INTO consumer_offsets (consumer_group, topic, "partition", next_offset)
VALUES ($1, $2, $3, $4)
ON CONFLICT (consumer_group, topic, "partition") DO UPDATE SET next_offset = consumer_offsets.next_offset
RETURNING next_offset`

// LockPosition locks the partition's position row for the rest of tx and
// returns the stored next offset (creating the row at firstOffset when the
// partition has none). Two members applying the same partition — the owner
// and a zombie that has not noticed it lost the partition — serialise here,
// and the second sees how far the first got.
func LockPosition(ctx context.Context, tx pgx.Tx, group, topic string, partition int32, firstOffset int64) (int64, error) {
	var next int64
	if err := tx.QueryRow(ctx, lockPositionSQL, group, topic, partition, firstOffset).Scan(&next); err != nil {
		return 0, fmt.Errorf("locking position of %s/%d: %w", topic, partition, err)
	}
	return next, nil
}

const advanceSQL = `
UPDATE consumer_offsets SET next_offset = $4, updated_at = now()
WHERE consumer_group = $1 AND topic = $2 AND "partition" = $3 AND next_offset < $4`

// Advance moves the partition's stored position forward to next inside tx.
// It never moves it backwards.
func Advance(ctx context.Context, tx pgx.Tx, group, topic string, partition int32, next int64) error {
	if _, err := tx.Exec(ctx, advanceSQL, group, topic, partition, next); err != nil {
		return fmt.Errorf("advancing position of %s/%d to %d: %w", topic, partition, next, err)
	}
	return nil
}

// QueueAdvance queues, on b, the forward move of the partition's position.
func QueueAdvance(b *pgx.Batch, group, topic string, partition int32, next int64) {
	b.Queue(advanceSQL, group, topic, partition, next)
}
