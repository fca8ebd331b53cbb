package test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/schema"
)

// Claims generations lose their origin index (migration 16): the highest
// offset per source partition that the audit needs when a generation is
// dropped is recorded when it closes, from the consumer positions. A
// schema at version 15 with a closed generation (its offsets only in its
// origin index) and an open one is migrated: the closed generation's
// offsets are read from its index once, the open generation loses its
// index, and from then on every close records the positions and no new
// generation has the index. Dropping both moves the audit's pruned
// offsets to the highest of each.
func TestClaimsOffsetsMigrateFromTheOriginIndex(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	ctx := context.Background()
	gooseUp(t, db, schema.Migrations(), schema.VersionTable, 15)
	exec := func(q string, args ...any) {
		t.Helper()
		_, err := db.Pool.Exec(ctx, q, args...)
		require.NoError(t, err, q)
	}
	originIndexes := func(table string) int64 {
		// Only table's indexes are read: pg_indexes would print the
		// definitions of other schemas' indexes, which parallel tests drop.
		return db.Count(t, `SELECT count(*) FROM pg_index WHERE indrelid = to_regclass($1) AND pg_get_indexdef(indexrelid) LIKE '%(topic, partition, "offset")%'`, table)
	}

	// Version 15: generation 0 (processed_events) holds claims of t/0 at
	// 0..9 and t/1 at 100..104; it closes and generation 1 opens, both
	// with the origin index the functions of 00014 create.
	claimRange(t, db, 0, "a", 0, 0, 9)
	claimRange(t, db, 0, "b", 1, 100, 104)
	exec(`SELECT effectively_claims_create(1)`)
	var res string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT effectively_claims_rotate(0, 1000)`).Scan(&res))
	require.Equal(t, "rotated", res)
	exec(`SELECT effectively_claims_create(2)`)
	require.Equal(t, int64(1), originIndexes("processed_events"))
	require.Equal(t, int64(1), originIndexes("effectively_claims_g1"))
	require.Equal(t, int64(1), originIndexes("effectively_claims_g2"))

	gooseUp(t, db, schema.Migrations(), schema.VersionTable, 0)
	require.Equal(t, map[int32]int64{0: 9, 1: 104}, closeOffsets(t, db, 0), "the closed generation's offsets, read from its origin index")
	require.Equal(t, int64(1), originIndexes("processed_events"), "a closed generation keeps its index until it is dropped")
	require.Zero(t, originIndexes("effectively_claims_g1"), "the open generation loses its index")
	require.Zero(t, originIndexes("effectively_claims_g2"), "so does the one created ahead of it")

	// Generation 1 takes claims of t/0 at 10..19 while group g settles
	// t/0 through 21 (two duplicates after the last claim) and a second
	// group t/1 through 90; then it closes.
	claimRange(t, db, 1, "c", 0, 10, 19)
	exec(`INSERT INTO consumer_offsets (consumer_group, topic, "partition", next_offset) VALUES ('g', 't', 0, 22), ('g2', 't', 1, 91)`)
	require.Equal(t, int32(1), db.RotateClaims(t))
	require.Equal(t, map[int32]int64{0: 21, 1: 90}, closeOffsets(t, db, 1), "the positions when generation 1 closed")
	require.Zero(t, originIndexes("effectively_claims_g3"), "a generation created after the migration has no origin index")

	// Both expire: the audit's offsets are the highest of the two.
	db.AgeClosedClaims(t, 30*24*time.Hour)
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	pass, err := dedupe.MaintainGenerations(ctx, conn.Conn(), time.Now(), dedupe.GenerationPolicy{Interval: time.Hour, Retention: 14 * 24 * time.Hour}, false)
	require.NoError(t, err)
	require.Len(t, pass.Dropped, 2)
	pruned, err := dedupe.PrunedOffsets(ctx, db.Pool, "t")
	require.NoError(t, err)
	require.Equal(t, map[int32]int64{0: 21, 1: 104}, pruned)
	require.Zero(t, db.Count(t, `SELECT count(*) FROM claim_generation_offsets`), "dropped generations leave no offsets behind")
}

// closeOffsets reads the offsets recorded for generation gen.
func closeOffsets(t *testing.T, db pgtest.DB, gen int32) map[int32]int64 {
	t.Helper()
	return byPartition(t, db, `SELECT "partition", max_offset FROM claim_generation_offsets WHERE generation = $1 AND topic = 't'`, gen)
}

// claimRange inserts claims of generation gen for offsets from..to of
// source partition t/partition, keyed keyPrefix + offset, as a worker of
// any version since generations would.
func claimRange(t *testing.T, db pgtest.DB, gen int32, keyPrefix string, partition int32, from, to int64) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO effectively_claims (event_key, key_strategy, payload_hash, event_type, subject, disposition, consumer_group, topic, "partition", "offset", generation)
SELECT $1 || o, 'cloudevents', decode(repeat('00', 32), 'hex'), 't', 's', 'applied', 'g', 't', $2, o, $3 FROM generate_series($4::bigint, $5::bigint) o`,
		keyPrefix, partition, gen, from, to)
	require.NoError(t, err)
}
