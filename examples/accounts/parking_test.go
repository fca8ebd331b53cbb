package accounts_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/cetest"
	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/pipeline"
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

func key(id string) string { return cetest.Key(id) }

// Ledger events for an account that does not exist yet are parked, then
// applied exactly once, in their original order, when the account arrives.
func TestLedgerBeforeAccountIsParkedThenReleasedInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := b.apply(t, 0, ledger("l1", "ledger.credited", "a1", 100, "EUR"), ledger("l2", "ledger.debited", "a1", 30, "EUR"))
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Parked: 2}, res.Counts)
	require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM parked_events WHERE state = 'parked'`))
	require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM effectively_claims WHERE disposition = 'parked'`))
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
	require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM effectively_claims WHERE disposition <> 'applied'`))

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
	require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM effectively_claims WHERE disposition <> 'applied'`))
	require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM parked_events WHERE state = 'released'`))
}

// Parking is bounded per resource: past the bound, events are dead-lettered
// with prerequisite_missing instead of piling up.
func TestParkingIsBoundedPerResource(t *testing.T) {
	t.Parallel()
	b := setupWith(t, pipeline.Options{MaxParkedPerResource: 2})
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

func sweeper(b *bundle, opts pipeline.SweeperOptions) *pipeline.Sweeper {
	return pipeline.NewSweeper(b.db.Pool, b.applier, opts)
}

// An account that never arrives: its parked events are dead-lettered with
// prerequisite_missing once they pass the age bound, or the attempts bound.
func TestNeverArrivingPrerequisiteIsDeadLetteredPastTheBound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.apply(t, 0, ledger("l1", "ledger.credited", "ghost", 1, "EUR"), ledger("l2", "ledger.credited", "ghost2", 1, "EUR"))
	ctx := context.Background()
	sw := sweeper(b, pipeline.SweeperOptions{MaxAge: time.Hour, MaxAttempts: 3})

	// Not yet past a bound: retried later, with backoff.
	res, err := sw.SweepOnce(ctx)
	require.NoError(t, err)
	require.Positive(t, res.Oldest, "the oldest parked event's age")
	res.Oldest = 0
	require.Equal(t, pipeline.SweepResult{Retried: 2, Parked: 2}, res)
	require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM parked_events WHERE attempts = 1 AND next_attempt_at > now()`))

	// l1 ages past max_age; l2 runs out of attempts.
	_, err = b.db.Pool.Exec(ctx, `UPDATE parked_events SET next_attempt_at = now(), parked_at = now() - interval '2 hours' WHERE event_key = $1`, key("l1"))
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `UPDATE parked_events SET next_attempt_at = now(), attempts = 2 WHERE event_key = $1`, key("l2"))
	require.NoError(t, err)
	res, err = sw.SweepOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, pipeline.SweepResult{DeadLettered: 2, Parked: 0}, res)
	require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM dead_letters WHERE reason = 'prerequisite_missing'`))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM dead_letters WHERE event_key = $1 AND error LIKE '%parking.max_age%'`, key("l1")))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM dead_letters WHERE event_key = $1 AND error LIKE '%parking.max_attempts%'`, key("l2")))
	require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM effectively_claims WHERE disposition = 'dead_lettered'`))
	require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM ledger_entries`))
}

// A prerequisite that appears by another path (not an event on this
// partition) is found by the sweeper, which releases the parked events in
// order.
func TestSweeperReleasesWhenThePrerequisiteAppearsElsewhere(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.apply(t, 0, ledger("l1", "ledger.credited", "a9", 7, "EUR"), ledger("l2", "ledger.debited", "a9", 2, "EUR"))
	ctx := context.Background()
	_, err := b.db.Pool.Exec(ctx, `INSERT INTO accounts (id, version, name, email, plan, status) VALUES ('a9', 1, 'n', 'n@x', 'pro', 'open')`)
	require.NoError(t, err)
	res, err := sweeper(b, pipeline.SweeperOptions{MaxAge: time.Hour, MaxAttempts: 3}).SweepOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, pipeline.SweepResult{Released: 2, Parked: 0}, res)
	require.Equal(t, []string{key("l1"), key("l2")}, b.ledgerOrder(t, "a9"))
	require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM effectively_claims WHERE disposition <> 'applied'`))
}

func deadLetterID(t *testing.T, b *bundle, reason string) int64 {
	t.Helper()
	return b.count(t, `SELECT id FROM dead_letters WHERE reason = $1`, reason)
}

// Redrive after a fix applies the event once; redriving again applies
// nothing more.
func TestRedriveAppliesOnceAfterAFix(t *testing.T) {
	t.Parallel()
	b := setupWith(t, pipeline.Options{MaxParkedPerResource: 1})
	ctx := context.Background()
	// l2 is dead-lettered: parking for a1 is full.
	b.apply(t, 0, ledger("l1", "ledger.credited", "a1", 10, "EUR"), ledger("l2", "ledger.credited", "a1", 20, "EUR"))
	id := deadLetterID(t, b, "prerequisite_missing")

	// Not fixed yet: still dead, one more attempt.
	res, err := b.applier.Redrive(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "prerequisite_missing", res.Reason)
	require.Equal(t, int64(2), b.count(t, `SELECT attempts FROM dead_letters WHERE id = $1`, id))

	// The fix: the account exists (l1 is released with it).
	b.apply(t, 0, acct("o1", "account.opened", "a1", 1, "ann"))
	res, err = b.applier.Redrive(ctx, id)
	require.NoError(t, err)
	require.Equal(t, pipeline.RedriveResult{ID: id, Resolution: "applied"}, res)
	require.Equal(t, int64(30), b.count(t, `SELECT sum(amount_cents) FROM ledger_entries`))
	require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM effectively_claims WHERE disposition <> 'applied'`))

	// Twice: nothing more.
	res, err = b.applier.Redrive(ctx, id)
	require.NoError(t, err)
	require.True(t, res.Already)
	require.Equal(t, int64(30), b.count(t, `SELECT sum(amount_cents) FROM ledger_entries`))
}

// An undecodable record stays dead when redriven; a conflict stays a
// conflict.
func TestRedriveOfWhatCannotApplyStaysDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.apply(t, 0, &kgo.Record{Key: []byte("k"), Value: []byte("nope")}, acct("o1", "account.opened", "a1", 1, "ann"), acct("o1", "account.opened", "a1", 1, "bob"))
	for _, reason := range []string{"not_json", "conflict"} {
		res, err := b.applier.Redrive(ctx, deadLetterID(t, b, reason))
		require.NoError(t, err)
		require.Equal(t, reason, res.Reason)
		require.Empty(t, res.Resolution)
	}
	var name string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT name FROM accounts WHERE id = 'a1'`).Scan(&name))
	require.Equal(t, "ann", name)
}
