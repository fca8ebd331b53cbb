package dedupe_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/internal/deadletter"
	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/handling"
	"github.com/effectively-io/effectively/internal/outbox"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/internal/pipeline"
)

// seedExpired fills every pruned table with rows on both sides of the
// retention (and rows that must stay whatever their age).
// prunedTables are the engine's, as the worker prunes them.
var prunedTables = []dedupe.PrunedTable{dedupe.Claims, deadletter.Pruned, outbox.Pruned, pipeline.ParkedPruned, handling.TombstonesPruned}

func seedExpired(t *testing.T, db pgtest.DB) {
	t.Helper()
	ctx := context.Background()
	// A generation of 20 claims, on t/0 at offsets 0..9 and t/1 at
	// 100..109, closed 30 days ago; the last is the claim of the event p3,
	// still parked. 5 recent claims in the open generation. When it
	// closed, group g had settled t/0 through 9 and t/1 through 111 (two
	// duplicates after its last claim), group g2 t/0 through 6.
	_, err := db.Pool.Exec(ctx, `INSERT INTO consumer_offsets (consumer_group, topic, "partition", next_offset)
		VALUES ('g', 't', 0, 10), ('g', 't', 1, 112), ('g2', 't', 0, 7)`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO effectively_claims (event_key, key_strategy, payload_hash, event_type, subject, disposition, consumer_group, topic, "partition", "offset", generation)
		 SELECT CASE WHEN p = 1 AND i = 9 THEN 'p3' ELSE 'old-' || p || '-' || i END, 'cloudevents', decode(repeat('00', 32), 'hex'), 'invoice.opened', 'a',
		        CASE WHEN p = 1 AND i = 9 THEN 'parked' ELSE 'applied' END, 'g', 't', p, p * 100 + i, `+pgtest.OpenGeneration+`
		 FROM generate_series(0, 1) p, generate_series(0, 9) i`)
	require.NoError(t, err)
	db.AgeClaims(t, 30*24*time.Hour)
	for _, q := range []string{
		`INSERT INTO effectively_claims (event_key, key_strategy, payload_hash, event_type, subject, disposition, consumer_group, topic, "partition", "offset", generation)
		 SELECT 'new-' || i, 'cloudevents', decode(repeat('00', 32), 'hex'), 'invoice.opened', 'a', 'applied', 'g', 't', 0, 1000 + i, ` + pgtest.OpenGeneration + `
		 FROM generate_series(1, 5) i`,
		// Dead letters: old published (goes, offset 500 on t/2), old
		// unpublished (stays), new published (stays).
		`INSERT INTO dead_letters (consumer_group, topic, "partition", "offset", reason, error, last_seen_at, published_at) VALUES
		 ('g', 't', 2, 500, 'not_json', 'x', now() - interval '30 days', now() - interval '30 days'),
		 ('g', 't', 2, 501, 'not_json', 'x', now() - interval '30 days', NULL),
		 ('g', 't', 2, 502, 'not_json', 'x', now() - interval '1 day', now() - interval '1 day')`,
		// Outbox: old sent and suppressed go; old pending and recent sent stay.
		`INSERT INTO outbox (event_key, operation, resource, method, target, request, idempotency_key, idempotent, state, updated_at)
		 SELECT 'k' || i, 'erp.upsert_contact', 'a', 'PUT', 'http://x', '{}', 'ik' || i, true, s, u
		 FROM (VALUES (1, 'sent', now() - interval '30 days'), (2, 'suppressed', now() - interval '30 days'),
		              (3, 'pending', now() - interval '30 days'), (4, 'sent', now() - interval '1 day')) v(i, s, u)`,
		// Parked events: old released and old dead-lettered (no resolved_at,
		// as the pipeline leaves it) go; old still parked stays.
		`INSERT INTO parked_events (event_key, consumer_group, topic, "partition", "offset", resource, event_type, event, state, parked_at, resolved_at) VALUES
		 ('p1', 'g', 't', 0, 1, 'a', 'line.added', '{}', 'released', now() - interval '31 days', now() - interval '30 days'),
		 ('p2', 'g', 't', 0, 2, 'a', 'line.added', '{}', 'dead_lettered', now() - interval '30 days', NULL),
		 ('p3', 'g', 't', 0, 3, 'a', 'line.added', '{}', 'parked', now() - interval '30 days', NULL)`,
		// Tombstones of gated deletes: two old ones go, a recent one stays.
		`INSERT INTO effectively_tombstones (table_name, key, version, deleted_at) VALUES
		 ('items', '["a"]', 3, now() - interval '30 days'), ('items', '["b"]', 4, now() - interval '20 days'),
		 ('items', '["c"]', 5, now() - interval '1 day')`,
	} {
		_, err := db.Pool.Exec(ctx, q)
		require.NoError(t, err, q)
	}
}

func TestPrunerDeletesOnlyExpiredRowsAndKeepsWatermarks(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	seedExpired(t, db)

	pruned := map[string]int64{}
	p, err := dedupe.NewPruner(db.Pool, dedupe.PrunerOptions{Tables: prunedTables,
		Retention: 14 * 24 * time.Hour, OutboxRetention: 14 * 24 * time.Hour,
		BatchSize: 3, Pause: time.Millisecond,
		PrunedFunc: func(table string, n int64) { pruned[table] += n },
	})
	require.NoError(t, err)

	dry, err := p.Expired(ctx)
	require.NoError(t, err)
	// Claims are counted by generation (their rows are PostgreSQL's
	// estimate): the closed one goes.
	want := map[string]int64{"dead_letters": 1, "outbox": 2, "parked_events": 2, "effectively_tombstones": 2}
	got := map[string]int64{}
	for _, tp := range dry.Tables[1:] {
		got[tp.Table] = tp.Rows
	}
	require.Equal(t, want, got)
	require.Equal(t, "effectively_claims", dry.Tables[0].Table)
	require.Len(t, dry.Tables[0].Generations.Dropped, 1)
	old := dry.Tables[0].Generations.Dropped[0]
	require.Equal(t, int64(25+3+4+3+3), db.Count(t, `SELECT (SELECT count(*) FROM effectively_claims) + (SELECT count(*) FROM dead_letters) + (SELECT count(*) FROM outbox) + (SELECT count(*) FROM parked_events) + (SELECT count(*) FROM effectively_tombstones)`),
		"a dry run deletes nothing")
	require.Zero(t, db.Count(t, `SELECT count(*) FROM prune_watermarks`))

	res, err := p.Prune(ctx)
	require.NoError(t, err)
	got = map[string]int64{}
	for _, tp := range res.Tables[1:] {
		got[tp.Table] = tp.Rows
	}
	require.Equal(t, want, got)
	delete(pruned, "effectively_claims")
	require.Equal(t, want, pruned)
	gp := res.Tables[0].Generations
	require.Len(t, gp.Dropped, 1)
	require.Equal(t, old.Generation, gp.Dropped[0].Generation)
	require.Equal(t, int64(1), gp.Dropped[0].Parked, "the parked claim moved into the open generation")
	require.Zero(t, db.Count(t, `SELECT count(*) FROM pg_class WHERE relname = $1 AND relnamespace = current_schema()::regnamespace`, old.Table), "the old generation's table is gone")

	// What stays: the recent claims and the parked one; the unpublished and
	// the recent dead letter; the pending and recent outbox rows; the parked event.
	require.Equal(t, int64(6), db.Count(t, `SELECT count(*) FROM effectively_claims`))
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM effectively_claims WHERE event_key = 'p3' AND disposition = 'parked' AND generation = `+pgtest.OpenGeneration))
	require.Equal(t, int64(2), db.Count(t, `SELECT count(*) FROM dead_letters WHERE "offset" IN (501, 502)`))
	require.Equal(t, int64(2), db.Count(t, `SELECT count(*) FROM outbox WHERE event_key IN ('k3', 'k4')`))
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM parked_events WHERE event_key = 'p3'`))
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM effectively_tombstones WHERE key = '["c"]'`))

	offsets, err := dedupe.PrunedOffsets(ctx, db.Pool, "t")
	require.NoError(t, err)
	require.Equal(t, map[int32]int64{0: 9, 1: 111, 2: 500}, offsets, "per partition, the highest offset settled when the dropped generation closed, or of a pruned dead letter")
	require.Zero(t, db.Count(t, `SELECT count(*) FROM claim_generation_offsets WHERE generation = $1`, old.Generation), "the dropped generation's offsets went into pruned_offsets")
	marks, err := dedupe.Watermarks(ctx, db.Pool)
	require.NoError(t, err)
	require.Len(t, marks, 5)
	require.WithinDuration(t, time.Now().Add(-30*24*time.Hour), marks["effectively_claims"], time.Minute, "claims before the old generation's close may be gone")
	require.Equal(t, old.ClosedAt, marks["effectively_claims"])

	// A second pass finds nothing; the counters do not move.
	res, err = p.Prune(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Rows())
	require.Empty(t, res.Tables[0].Generations.Dropped)
}

// Only one pruner works on a schema at a time: a pass finding the lock
// taken returns ErrPrunerBusy and deletes nothing.
func TestPrunerSkipsWhileAnotherHoldsTheLock(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	seedExpired(t, db)
	p, err := dedupe.NewPruner(db.Pool, dedupe.PrunerOptions{Tables: prunedTables, Retention: 14 * 24 * time.Hour, OutboxRetention: time.Hour})
	require.NoError(t, err)

	// A pass that pauses between batches of one row holds the lock for a
	// while; pruners that try meanwhile are refused.
	other, err := dedupe.NewPruner(db.Pool, dedupe.PrunerOptions{Tables: prunedTables, Retention: 14 * 24 * time.Hour, OutboxRetention: time.Hour})
	require.NoError(t, err)
	slow, err := dedupe.NewPruner(db.Pool, dedupe.PrunerOptions{Tables: prunedTables, Retention: 14 * 24 * time.Hour, OutboxRetention: time.Hour, BatchSize: 1, Pause: 200 * time.Millisecond})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { _, err := slow.Prune(ctx); done <- err }()
	require.Eventually(t, func() bool {
		return db.Count(t, `SELECT count(*) FROM prune_watermarks`) > 0
	}, 30*time.Second, 10*time.Millisecond, "the slow pass started")
	_, err = other.Prune(ctx)
	require.ErrorIs(t, err, dedupe.ErrPrunerBusy)
	_, err = p.Prune(ctx)
	require.ErrorIs(t, err, dedupe.ErrPrunerBusy)
	require.NoError(t, <-done)
	// Once the pass is over the lock is free again.
	res, err := other.Prune(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Rows())
}
