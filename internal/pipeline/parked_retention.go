package pipeline

import "github.com/effectively-io/effectively/internal/dedupe"

// ParkedPruned is parked_events as the retention pruner sees it: resolved
// parked events (released, dead-lettered or dropped) go after
// dedupe.retention; the ones still waiting stay.
var ParkedPruned = dedupe.PrunedTable{
	Name:  "parked_events",
	Count: `SELECT count(*) FROM parked_events WHERE state <> 'parked' AND coalesce(resolved_at, parked_at) < $1`,
	Prune: dedupe.PruneStatement(`
    SELECT event_key FROM parked_events
    WHERE state <> 'parked' AND coalesce(resolved_at, parked_at) < $1
    ORDER BY coalesce(resolved_at, parked_at)
    LIMIT $2
    FOR UPDATE SKIP LOCKED`, `
    DELETE FROM parked_events pe USING doomed d
    WHERE pe.event_key = d.event_key
    RETURNING pe.event_key`, false),
}
