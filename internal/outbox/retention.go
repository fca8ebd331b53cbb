package outbox

import "github.com/effectively-io/effectively/internal/dedupe"

// Pruned is the outbox as the retention pruner sees it: sent and
// suppressed intents go after outbox.retention; pending, unknown and
// dead-lettered ones wait for delivery or an operator.
var Pruned = dedupe.PrunedTable{
	Name:            "outbox",
	OutboxRetention: true,
	Count:           `SELECT count(*) FROM outbox WHERE state IN ('sent', 'suppressed') AND updated_at < $1`,
	Prune: dedupe.PruneStatement(`
    SELECT id FROM outbox
    WHERE state IN ('sent', 'suppressed') AND updated_at < $1
    ORDER BY updated_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED`, `
    DELETE FROM outbox o USING doomed d
    WHERE o.id = d.id
    RETURNING o.id`, false),
}
