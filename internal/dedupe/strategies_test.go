package dedupe_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/pgtest"
)

// A topic's key strategy cannot change while claims made with the old one
// exist: a redelivered event would get a new key and apply twice.
func TestKeyStrategyChangeIsRefusedWhileClaimsExist(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	require.NoError(t, dedupe.RecordStrategies(ctx, db.Pool, map[string]string{"orders": "cloudevents"}))
	// No claims yet: a change is allowed.
	require.NoError(t, dedupe.RecordStrategies(ctx, db.Pool, map[string]string{"orders": "field"}))
	require.NoError(t, dedupe.RecordStrategies(ctx, db.Pool, map[string]string{"orders": "cloudevents"}))

	_, err := db.Pool.Exec(ctx, `INSERT INTO effectively_claims (event_key, key_strategy, payload_hash, event_type, subject, disposition, consumer_group, topic, "partition", "offset", generation)
		VALUES ('ce:1:s:1', 'cloudevents', decode(repeat('00', 32), 'hex'), 'x', 'a', 'applied', 'g', 'orders', 0, 0, `+pgtest.OpenGeneration+`)`)
	require.NoError(t, err)
	err = dedupe.RecordStrategies(ctx, db.Pool, map[string]string{"orders": "content-hash"})
	var sce *dedupe.StrategyChangeError
	require.ErrorAs(t, err, &sce)
	require.Contains(t, err.Error(), "from cloudevents to content-hash")
	require.Contains(t, err.Error(), "fix: keep key_strategy cloudevents for topic orders")
	// The same strategy is fine; other topics are unaffected.
	require.NoError(t, dedupe.RecordStrategies(ctx, db.Pool, map[string]string{"orders": "cloudevents", "webhooks": "field"}))
}
