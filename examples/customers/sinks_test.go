// Package customers_test tests the example's config-only sinks over
// Debezium change events with the test kit.
package customers_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/dedupe"
	"github.com/effectively-io/effectively/effectivelytest"
	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/examples/customers"
	"github.com/effectively-io/effectively/service"
)

// change is a change event of public.customers as a kit record.
func change(op string, id, lsn, tsMs int64, before, after map[string]any) effectivelytest.Record {
	key, value := customers.Change(op, id, lsn, tsMs, before, after)
	return effectivelytest.Record{Key: key, Value: value}
}

var row = customers.Row

// newKit runs the example's configuration (effectively.yaml) through the
// test kit, on a fresh schema.
func newKit(t *testing.T) *effectivelytest.Kit {
	t.Helper()
	app := service.New("customers")
	cfg, err := app.LoadConfig("effectively.yaml")
	require.NoError(t, err)
	dir, err := filepath.Abs("migrations")
	require.NoError(t, err)
	cfg.Postgres.Migrations = []string{dir}
	kit := effectivelytest.New(t, app, effectivelytest.Options{Config: &cfg, Topic: "src.public.customers"})
	return kit
}

func TestSinksOverChangeEvents(t *testing.T) {
	t.Parallel()
	kit := newKit(t)

	res := kit.Apply(
		change("r", 1, 100, 1, nil, row(1, "new")),              // snapshot
		change("r", 2, 100, 1, nil, row(2, "new")),              // snapshot
		change("u", 1, 200, 2, row(1, "new"), row(1, "active")), // streamed
		change("u", 1, 300, 3, row(1, "active"), row(1, "vip")), //
		change("u", 1, 200, 9, row(1, "new"), row(1, "active")), // re-sent after a restart, new ts_ms: a duplicate
		change("d", 2, 400, 4, row(2, "new"), nil),              // delete
		effectivelytest.Record{Key: []byte(`{"id":2}`)},         // its tombstone: skipped
		change("u", 2, 150, 5, row(2, "new"), row(2, "late")),   // older than the delete: stale
		change("c", 3, 500, 6, nil, row(3, "new")),              // insert
		change("r", 4, 1000, 7, nil, row(4, "new")),             // snapshot
		change("u", 4, 900, 8, row(4, "new"), row(4, "moved")),  // committed after the snapshot, begun before it: a lower LSN
	)
	require.Equal(t, 1, res.Counts[dedupe.Duplicate], "the re-sent change")
	require.Equal(t, 1, res.Counts[dedupe.Skipped], "the tombstone")
	require.Empty(t, res.DeadLetters)

	rows, err := kit.Pool.Query(t.Context(), `SELECT id, version, status FROM customers ORDER BY id`)
	require.NoError(t, err)
	var got []string
	for rows.Next() {
		var id, version int64
		var status string
		require.NoError(t, rows.Scan(&id, &version, &status))
		got = append(got, fmt.Sprintf("%d@%d:%s", id, version, status))
	}
	require.NoError(t, rows.Err())
	streamed := func(lsn int64) int64 { return event.StreamedVersion + lsn }
	require.Equal(t, []string{
		fmt.Sprintf("1@%d:vip", streamed(300)), fmt.Sprintf("3@%d:new", streamed(500)), fmt.Sprintf("4@%d:moved", streamed(900)),
	}, got, "each row at its newest change; the deleted one gone, not brought back by an older change; a streamed change over the snapshot's read whatever its LSN")
	var lsns []int64
	require.NoError(t, kit.Pool.QueryRow(t.Context(), `SELECT array_agg(lsn ORDER BY lsn) FROM customer_changes WHERE id = 1`).Scan(&lsns))
	require.Equal(t, []int64{100, 200, 300}, lsns, "the history's lsn is source.lsn")

	var changes int
	require.NoError(t, kit.Pool.QueryRow(t.Context(), `SELECT count(*) FROM customer_changes`).Scan(&changes))
	require.Equal(t, 9, changes, "one history row per distinct change (the re-sent one and the tombstone write none)")
	var counts []string
	rows, err = kit.Pool.Query(t.Context(), `SELECT id, changes FROM customer_change_counts ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var id, n int64
		require.NoError(t, rows.Scan(&id, &n))
		counts = append(counts, fmt.Sprintf("%d:%d", id, n))
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"1:3", "2:3", "3:1", "4:2"}, counts, "each customer's changes, each counted once")
}

// A connector restarted with provide.transaction.metadata turned on re-sends
// the changes since its last committed offset with a transaction block
// where the first sending had null: still the same change (a duplicate),
// not a conflict dead-lettered.
func TestAResentChangeWithTransactionMetadataIsADuplicate(t *testing.T) {
	t.Parallel()
	kit := newKit(t)

	first := change("u", 1, 200, 2, row(1, "new"), row(1, "active"))
	again := first
	again.Value = []byte(strings.Replace(string(first.Value), `"transaction":null`,
		`"transaction":{"id":"25:200","total_order":1,"data_collection_order":1}`, 1))
	require.NotEqual(t, string(first.Value), string(again.Value))
	res := kit.Apply(change("r", 1, 100, 1, nil, row(1, "new")), first, again)
	require.Empty(t, res.DeadLetters)
	require.Equal(t, 1, res.Counts[dedupe.Duplicate])
}
