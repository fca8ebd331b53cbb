package deadletter

import "github.com/effectively-io/effectively/internal/dedupe"

// Pruned is dead_letters as the retention pruner sees it: only dead letters
// already published to their dead-letter topic (which keeps them from then
// on) and last seen before dedupe.retention go.
var Pruned = dedupe.PrunedTable{
	Name:  "dead_letters",
	Count: `SELECT count(*) FROM dead_letters WHERE published_at IS NOT NULL AND last_seen_at < $1`,
	Prune: dedupe.PruneStatement(`
    SELECT id FROM dead_letters
    WHERE published_at IS NOT NULL AND last_seen_at < $1
    ORDER BY last_seen_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED`, `
    DELETE FROM dead_letters dl USING doomed d
    WHERE dl.id = d.id
    RETURNING dl.topic, dl."partition", dl."offset"`, true),
}
