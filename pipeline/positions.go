package pipeline

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/effectively-io/effectively/consumer"
)

var _ consumer.ResetEpochReader = (*Applier)(nil)

const resetEpochsSQL = `
SELECT "partition", reset_epoch FROM consumer_offsets
WHERE consumer_group = $1 AND topic = $2 AND "partition" = ANY($3)`

// ResetEpochs implements consumer.ResetEpochReader: how many times `replay
// --execute` has lowered each partition's stored position.
func (a *Applier) ResetEpochs(ctx context.Context, group, topic string, partitions []int32) (map[int32]int64, error) {
	rows, err := a.pool.Query(ctx, resetEpochsSQL, group, topic, partitions)
	if err != nil {
		return nil, fmt.Errorf("reading reset epochs of %s: %w", topic, err)
	}
	out := make(map[int32]int64, len(partitions))
	var p int32
	var epoch int64
	if _, err := pgx.ForEachRow(rows, []any{&p, &epoch}, func() error {
		out[p] = epoch
		return nil
	}); err != nil {
		return nil, fmt.Errorf("reading reset epochs of %s: %w", topic, err)
	}
	return out, nil
}
