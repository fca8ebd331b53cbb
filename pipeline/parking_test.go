package pipeline_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/dedupe"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/pipeline"
)

func (b *bundle) ledgerOrder(t *testing.T, account string) []string {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `SELECT event_key FROM ledger_entries WHERE account_id = $1 ORDER BY seq`, account)
	require.NoError(t, err)
	var keys []string
	for rows.Next() {
		var k string
		require.NoError(t, rows.Scan(&k))
		keys = append(keys, k)
	}
	require.NoError(t, rows.Err())
	return keys
}

func key(id string) string { return "ce:8:urn:test:" + id }

// Ledger events for an account that does not exist yet are parked, then
// applied exactly once, in their original order, when the account arrives.
func TestLedgerBeforeAccountIsParkedThenReleasedInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := b.apply(t, 0, ledger("l1", "ledger.credited", "a1", 100, "EUR"), ledger("l2", "ledger.debited", "a1", 30, "EUR"))
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Parked: 2}, res.Counts)
	require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM parked_events WHERE state = 'parked'`))
	require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM processed_events WHERE disposition = 'parked'`))
	// A redelivery of a parked event is a duplicate: it cannot park twice.
	res = b.apply(t, 0, ledger("l1", "ledger.credited", "a1", 100, "EUR"))
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Duplicate: 1}, res.Counts)

	// The account arrives; a ledger event after it in the same batch queues
	// behind the parked ones and everything lands in offset order.
	res = b.apply(t, 0, acct("o1", "account.opened", "a1", 1, "ann"), ledger("l3", "ledger.credited", "a1", 5, "EUR"))
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 2}, res.Counts)
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 3}, res.Released)
	require.Equal(t, []string{key("l1"), key("l2"), key("l3")}, b.ledgerOrder(t, "a1"))
	require.Equal(t, int64(75), b.count(t, `SELECT balance_cents FROM account_balances WHERE account_id = 'a1'`))
	require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM parked_events WHERE state = 'parked'`))
	require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM processed_events WHERE disposition <> 'applied'`))

	// Later ledger events apply directly.
	res = b.apply(t, 0, ledger("l4", "ledger.credited", "a1", 1, "EUR"))
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 1}, res.Counts)
	require.Empty(t, res.Released)
}

// Park and release inside one batch: ledger, account, ledger.
func TestParkAndReleaseWithinOneBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := b.apply(t, 0,
		ledger("l1", "ledger.credited", "a1", 10, "USD"),
		acct("o1", "account.opened", "a1", 1, "ann"),
		ledger("l2", "ledger.credited", "a1", 20, "USD"),
	)
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 3}, res.Counts)
	require.Equal(t, []string{key("l1"), key("l2")}, b.ledgerOrder(t, "a1"))
	require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM processed_events WHERE disposition <> 'applied'`))
	require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM parked_events WHERE state = 'released'`))
}

// Parking is bounded per resource: past the bound, events are dead-lettered
// with prerequisite_missing instead of piling up.
func TestParkingIsBoundedPerResource(t *testing.T) {
	t.Parallel()
	b := setupWith(t, pipeline.Options{Parking: handlers.ParkingLimits{MaxPerResource: 2}})
	res := b.apply(t, 0,
		ledger("l1", "ledger.credited", "a1", 1, "EUR"),
		ledger("l2", "ledger.credited", "a1", 1, "EUR"),
		ledger("l3", "ledger.credited", "a1", 1, "EUR"),
		ledger("m1", "ledger.credited", "a2", 1, "EUR"),
	)
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Parked: 3, dedupe.DeadLettered: 1}, res.Counts)
	require.Equal(t, 1, res.DeadLetters[handlers.ReasonPrerequisiteMissing])
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM dead_letters WHERE reason = 'prerequisite_missing' AND event_key = $1`, key("l3")))
}
