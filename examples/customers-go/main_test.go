package main

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/dedupe"
	"github.com/effectively-io/effectively/effectivelytest"
	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/examples/customers"
)

func change(op string, id, lsn, tsMs int64, before, after map[string]any) effectivelytest.Record {
	key, value := customers.Change(op, id, lsn, tsMs, before, after)
	return effectivelytest.Record{Key: key, Value: value}
}

var row = customers.Row

// The build's handlers with the test kit: the replica and its history as
// the config-only sinks keep them, and one notification per transition to
// shipped — not for a re-sent change, not for an update that keeps a row
// shipped, not for a snapshot row that is already shipped.
func TestChangesWithTheKit(t *testing.T) {
	t.Parallel()
	app := newApp()
	cfg, err := app.LoadConfig("") // the build's defaults: topic src.public.customers
	require.NoError(t, err)
	cfg.Targets = map[string]config.Target{TargetNotify: {URL: "https://notify.example.com"}}
	kit := effectivelytest.New(t, app, effectivelytest.Options{Config: &cfg, Topic: "src.public.customers"})

	res := kit.Apply(
		change("r", 1, 100, 1, nil, row(1, "packed")),                        // snapshot
		change("r", 2, 100, 1, nil, row(2, StatusShipped)),                   // snapshot, already shipped: no transition seen
		change("u", 1, 200, 2, row(1, "packed"), row(1, StatusShipped)),      // packed → shipped: notified
		change("u", 1, 200, 7, row(1, "packed"), row(1, StatusShipped)),      // re-sent by Connect: a duplicate
		change("u", 1, 300, 3, row(1, StatusShipped), row(1, StatusShipped)), // shipped → shipped (name edited): none
		change("d", 2, 400, 4, row(2, StatusShipped), nil),                   // delete
		effectivelytest.Record{Key: []byte(`{"id":2}`)},                      // its tombstone: skipped
		change("u", 2, 150, 5, row(2, "packed"), row(2, StatusShipped)),      // older than the delete: stale, yet a transition that happened
		change("c", 3, 500, 6, nil, row(3, "new")),                           // insert
	)
	require.Empty(t, res.DeadLetters, "%+v", res.DeadLetters)
	require.Equal(t, 1, res.Counts[dedupe.Duplicate], "the re-sent change: %v", res.Counts)
	require.Equal(t, 1, res.Counts[dedupe.Skipped], "the tombstone")
	require.Equal(t, 1, res.Counts[dedupe.Stale], "the change older than the delete")
	require.Empty(t, res.DeadLetters, "%+v", res.DeadLetters)

	var got []string
	rows, err := kit.Pool.Query(t.Context(), `SELECT id, version, status FROM customers ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var id, version int64
		var status string
		require.NoError(t, rows.Scan(&id, &version, &status))
		got = append(got, fmt.Sprintf("%d@%d:%s", id, version, status))
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{fmt.Sprintf("1@%d:shipped", event.StreamedVersion+300), fmt.Sprintf("3@%d:new", event.StreamedVersion+500)}, got)

	var changes int
	require.NoError(t, kit.Pool.QueryRow(t.Context(), `SELECT count(*) FROM customer_changes`).Scan(&changes))
	require.Equal(t, 7, changes, "one history row per distinct change")
	var counts []string
	rows, err = kit.Pool.Query(t.Context(), `SELECT id, changes FROM customer_change_counts ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var id, n int64
		require.NoError(t, rows.Scan(&id, &n))
		counts = append(counts, fmt.Sprintf("%d:%d", id, n))
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"1:3", "2:3", "3:1"}, counts, "each customer's changes, each counted once")

	intents := kit.Intents()
	require.Len(t, intents, 2, "one notification per transition to shipped")
	var bodies []notification
	for _, in := range intents {
		require.Equal(t, TargetNotify, in.Target)
		require.Equal(t, OpShipped, in.Operation)
		var n notification
		require.NoError(t, json.Unmarshal(in.Body, &n))
		bodies = append(bodies, n)
	}
	require.Equal(t, []notification{{1, "customer 1", StatusShipped}, {2, "customer 2", StatusShipped}}, bodies)

	// A record that is no change event is the event's fault.
	res = kit.Apply(effectivelytest.Record{Key: []byte(`{"id":9}`), Value: []byte(`{"op":"u","before":null,"after":{"id":"nine"},"source":{"lsn":900,"schema":"public","table":"customers"}}`)})
	require.Len(t, res.DeadLetters, 1)
}
