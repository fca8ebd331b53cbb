package test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/schema"
)

// Claims generations lose autovacuum (migration 17): they only take
// inserts and are dropped whole, and a vacuum or an analyze holding one
// makes the rotation wait. A schema at version 16 with a closed
// generation 0, an open generation 1 and generation 2 created ahead of it
// is migrated: every generation kept, and every one created from then on,
// has autovacuum off for its table and its TOAST table; claims go on
// across a rotation; the down migration gives the kept ones autovacuum back.
func TestClaimsGenerationsMigrateWithoutAutovacuum(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	ctx := context.Background()
	gooseUp(t, db, schema.Migrations(), schema.VersionTable, 16)
	// The options of table and of its TOAST table, "" when there are none.
	options := func(table string) (string, string) {
		t.Helper()
		var rel, toast string
		require.NoError(t, db.Pool.QueryRow(ctx, `
SELECT coalesce(array_to_string(c.reloptions, ','), ''), coalesce(array_to_string(tc.reloptions, ','), '')
FROM pg_class c LEFT JOIN pg_class tc ON tc.oid = c.reltoastrelid
WHERE c.oid = to_regclass($1)`, table).Scan(&rel, &toast))
		return rel, toast
	}
	off := func(table, why string) {
		t.Helper()
		rel, toast := options(table)
		require.Equal(t, "autovacuum_enabled=false", rel, "%s: %s", table, why)
		require.Equal(t, "autovacuum_enabled=false", toast, "%s's TOAST table: %s", table, why)
	}
	claims := func() int64 { return db.Count(t, `SELECT count(*) FROM effectively_claims`) }

	claimRange(t, db, 0, "a", 0, 1, 100)
	require.Equal(t, int32(0), db.RotateClaims(t), "generation 0 closes, 1 opens")
	claimRange(t, db, 1, "b", 0, 1, 100)
	for _, g := range []string{"processed_events", "effectively_claims_g1", "effectively_claims_g2"} {
		rel, _ := options(g)
		require.Empty(t, rel, "%s has the default autovacuum before the migration", g)
	}

	gooseUp(t, db, schema.Migrations(), schema.VersionTable, 17)
	off("processed_events", "the closed generation 0")
	off("effectively_claims_g1", "the open generation")
	off("effectively_claims_g2", "the generation created ahead of it")
	require.Equal(t, int64(200), claims(), "the migration changes no claim")

	require.Equal(t, int32(1), db.RotateClaims(t), "generation 1 closes, 2 opens")
	claimRange(t, db, 2, "c", 0, 1, 100)
	off("effectively_claims_g3", "a generation created after the migration")
	require.Equal(t, int64(300), claims())

	_, err := gooseProvider(t, db, schema.Migrations(), schema.VersionTable).DownTo(ctx, 16)
	require.NoError(t, err)
	for _, g := range []string{"processed_events", "effectively_claims_g1", "effectively_claims_g2", "effectively_claims_g3"} {
		rel, toast := options(g)
		require.Empty(t, rel, "%s has autovacuum back after the down migration", g)
		require.Empty(t, toast, "%s's TOAST table has autovacuum back", g)
	}
	require.Equal(t, int32(2), db.RotateClaims(t))
	rel, _ := options("effectively_claims_g4")
	require.Empty(t, rel, "a generation created after the down migration has the default")
	require.Equal(t, int64(300), claims())
}
