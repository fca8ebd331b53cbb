package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/dedupe"
	"github.com/effectively-io/effectively/effectivelytest"
)

// The build's handlers with the test kit: an order's lines wait for it,
// a stale update changes nothing, a malformed line is dead-lettered with
// its reason, and the reservation is recorded once however often the
// order is delivered.
func TestOrdersWithTheKit(t *testing.T) {
	t.Parallel()
	app := newApp()
	cfg, err := app.LoadConfig("") // the build's defaults: topic orders
	require.NoError(t, err)
	cfg.Targets = map[string]config.Target{TargetWarehouse: {URL: "https://warehouse.example.com"}}
	kit := effectivelytest.New(t, app, effectivelytest.Options{Config: &cfg, Topic: "orders"})

	line := func(id, order, lineID string, qty int) effectivelytest.Record {
		return kit.CloudEvent(id, TypeLineAdded, order, 0, map[string]any{"line_id": lineID, "sku": "sku-1", "quantity": qty, "unit_price_cents": 250})
	}
	placed := kit.CloudEvent("p1", TypePlaced, "o1", 1, map[string]any{"customer": "c1", "total_cents": 500})
	res := kit.Apply(
		line("l1", "o1", "L1", 2), // before its order: parked
		line("l2", "o1", "L2", 0), // quantity 0: never applies
	)
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Parked: 1, dedupe.DeadLettered: 1}, res.Counts)
	require.EqualValues(t, ReasonInvalidLine, res.DeadLetters[0].Reason)
	require.Len(t, kit.Parked(), 1)

	res = kit.Apply(placed, placed, kit.CloudEvent("u0", TypeUpdated, "o1", 1, map[string]any{"customer": "c9", "total_cents": 1}))
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 1, dedupe.Duplicate: 1, dedupe.Stale: 1}, res.Counts)
	require.Equal(t, 1, res.Released[dedupe.Applied], "the parked line applies with its order")
	require.Empty(t, kit.Parked())

	intents := kit.Intents()
	require.Len(t, intents, 1, "one reservation however often the order arrives")
	require.Equal(t, TargetWarehouse, intents[0].Target)
	var body reservation
	require.NoError(t, json.Unmarshal(intents[0].Body, &body))
	require.Equal(t, reservation{OrderID: "o1", Customer: "c1", TotalCents: 500}, body)

	var customer string
	var lines int
	require.NoError(t, kit.Pool.QueryRow(t.Context(), `SELECT customer, (SELECT count(*) FROM order_lines) FROM orders WHERE id = 'o1'`).Scan(&customer, &lines))
	require.Equal(t, "c1", customer)
	require.Equal(t, 1, lines)
}
