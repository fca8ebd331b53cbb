package handlers

import "github.com/effectively-io/effectively/internal/dedupe"

// TombstonesPruned is effectively_tombstones as the retention pruner sees
// it: a tombstone goes after dedupe.retention, like the claim of the
// deletion that left it. An upsert older than the deletion that arrives
// later than that is past the window in which the producer contract
// allows redeliveries (upstream.max_retry_horizon).
var TombstonesPruned = dedupe.PrunedTable{
	Name:  tombstones,
	Count: `SELECT count(*) FROM effectively_tombstones WHERE deleted_at < $1`,
	Prune: dedupe.PruneStatement(`
    SELECT table_name, key FROM effectively_tombstones
    WHERE deleted_at < $1
    ORDER BY deleted_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED`, `
    DELETE FROM effectively_tombstones t USING doomed d
    WHERE t.table_name = d.table_name AND t.key = d.key
    RETURNING t.key`, false),
}

// tombstones is the table gated deletes leave their tombstones in.
const tombstones = "effectively_tombstones"
