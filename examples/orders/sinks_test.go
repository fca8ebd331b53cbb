// Package orders_test tests the config-only sinks of effectively.yaml with
// the test kit: no Go handler, the configuration alone.
package orders_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/dedupe"
	"github.com/effectively-io/effectively/effectivelytest"
	"github.com/effectively-io/effectively/service"
)

func TestSinksWithTheKit(t *testing.T) {
	t.Parallel()
	app := service.New("orders")
	cfg, err := app.LoadConfig("effectively.yaml")
	require.NoError(t, err)
	// The file names its migrations from the repository's root, where the
	// README runs it; the test runs here.
	dir, err := filepath.Abs("migrations")
	require.NoError(t, err)
	cfg.Postgres.Migrations = []string{dir}
	kit := effectivelytest.New(t, app, effectivelytest.Options{Config: &cfg, Topic: "shop.webhooks"})

	order := func(id, typ string, version int, status string) effectivelytest.Record {
		return kit.JSON("ord-1", map[string]any{"id": id, "type": typ, "created_at": "2026-12-01T10:00:00Z", "data": map[string]any{"order": map[string]any{
			"id": "ord-1", "version": version, "status": status, "customer": map[string]any{"id": "cus-1"},
			"total": "12.50", "currency": "EUR", "items": []any{map[string]any{"sku": "a"}}, "placed_at": "2026-12-01T10:00:00Z"}}})
	}
	res := kit.Apply(
		order("w1", "order.created", 1, "placed"),
		order("w3", "order.updated", 3, "shipped"),
		order("w2", "order.updated", 2, "packed"),  // older than 3: stale for the row, still a fact for the history
		order("w3", "order.updated", 3, "shipped"), // a redelivery
		kit.JSON("ord-1", map[string]any{"id": "w4", "type": "order.updated", "created_at": "2026-12-01T10:00:00Z", "data": map[string]any{"order": map[string]any{"id": "ord-1", "version": 4}}}),
	)
	require.Equal(t, 1, res.Counts[dedupe.Duplicate])
	require.Equal(t, 1, res.Counts[dedupe.DeadLettered], "a missing required column is the event's fault")
	require.Len(t, kit.DeadLetters(), 1)
	require.Contains(t, kit.DeadLetters()[0].Error, "column status (from /data/order/status): is missing or null")

	var status string
	var version, history int
	require.NoError(t, kit.Pool.QueryRow(t.Context(), `SELECT status, version, (SELECT count(*) FROM order_events) FROM orders WHERE id = 'ord-1'`).Scan(&status, &version, &history))
	require.Equal(t, "shipped", status)
	require.Equal(t, 3, version)
	require.Equal(t, 3, history, "one history row per distinct event")
}
