package dedupe

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
)

// PartitionChange is a topic whose partition count differs from the one
// last recorded.
type PartitionChange struct {
	Topic    string
	Was, Now int
}

// recordPartitionsSQL records a topic's partition count and returns the
// count recorded before (NULL for a topic seen the first time).
const recordPartitionsSQL = `
WITH old AS (SELECT partitions FROM topic_partitions WHERE topic = $1),
up AS (
    INSERT INTO topic_partitions (topic, partitions) VALUES ($1, $2)
    ON CONFLICT (topic) DO UPDATE SET partitions = excluded.partitions, seen_at = now()
    WHERE topic_partitions.partitions <> excluded.partitions
    RETURNING 1
)
SELECT (SELECT partitions FROM old)`

// RecordPartitionCounts records each topic's partition count (topic →
// count) and returns the topics whose count changed since the last record,
// sorted by topic.
func RecordPartitionCounts(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, counts map[string]int) ([]PartitionChange, error) {
	var out []PartitionChange
	for topic, n := range counts {
		var was *int
		if err := db.QueryRow(ctx, recordPartitionsSQL, topic, n).Scan(&was); err != nil {
			return nil, fmt.Errorf("recording the partition count of %s: %w", topic, err)
		}
		if was != nil && *was != n {
			out = append(out, PartitionChange{Topic: topic, Was: *was, Now: n})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Topic < out[j].Topic })
	return out, nil
}
