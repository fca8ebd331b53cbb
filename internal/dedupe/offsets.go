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

const lockPositionsSQL = `
SELECT "partition", next_offset FROM consumer_offsets
WHERE consumer_group = $1 AND topic = $2 AND "partition" = ANY($3)
ORDER BY "partition"
FOR UPDATE`

// resetPositionsSQL sets positions; lowering one bumps its reset epoch (a
// position a replay creates starts at epoch 1).
const resetPositionsSQL = `
INSERT INTO consumer_offsets AS c (consumer_group, topic, "partition", next_offset, reset_epoch)
SELECT $1, $2, t.p, t.o, 1 FROM unnest($3::int[], $4::bigint[]) AS t(p, o)
ORDER BY t.p
ON CONFLICT (consumer_group, topic, "partition") DO UPDATE
SET next_offset = excluded.next_offset,
    reset_epoch = c.reset_epoch + CASE WHEN excluded.next_offset < c.next_offset THEN 1 ELSE 0 END,
    updated_at = now()
WHERE c.next_offset <> excluded.next_offset
RETURNING "partition", reset_epoch`

// LockPositions locks the stored positions of the partitions of (group,
// topic) in tx, for `replay --execute`, and returns them; partitions with
// none are absent.
func LockPositions(ctx context.Context, tx pgx.Tx, group, topic string, partitions []int32) (map[int32]int64, error) {
	rows, err := tx.Query(ctx, lockPositionsSQL, group, topic, partitions)
	if err != nil {
		return nil, fmt.Errorf("locking the positions of group %s on %s: %w", group, topic, err)
	}
	out := map[int32]int64{}
	var p int32
	var o int64
	if _, err := pgx.ForEachRow(rows, []any{&p, &o}, func() error { out[p] = o; return nil }); err != nil {
		return nil, fmt.Errorf("locking the positions of group %s on %s: %w", group, topic, err)
	}
	return out, nil
}

// ResetPositions sets the positions of the partitions to offs, in tx: the
// one write that may move a position backwards (`replay --execute`). A
// lowered position bumps its reset epoch, which the worker logs; it returns
// the epochs of the positions it changed.
func ResetPositions(ctx context.Context, tx pgx.Tx, group, topic string, partitions []int32, offs []int64) (map[int32]int64, error) {
	rows, err := tx.Query(ctx, resetPositionsSQL, group, topic, partitions, offs)
	if err != nil {
		return nil, fmt.Errorf("resetting the positions of group %s on %s: %w", group, topic, err)
	}
	epochs := map[int32]int64{}
	var p int32
	var epoch int64
	if _, err := pgx.ForEachRow(rows, []any{&p, &epoch}, func() error { epochs[p] = epoch; return nil }); err != nil {
		return nil, fmt.Errorf("resetting the positions of group %s on %s: %w", group, topic, err)
	}
	return epochs, nil
}
