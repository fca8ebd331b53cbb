package test

import (
	"context"
	"encoding/json"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/internal/cetest"
	"github.com/effectively-io/effectively/internal/kafkatest"
)

// Through the real worker and the CLI: ledger events before their account
// are parked and listed; the account's arrival applies them exactly once, in
// order; a never-arriving account's events can be dropped by an operator
// and end up dead-lettered (reason dropped), not lost.
func TestParkingEndToEnd(t *testing.T) {
	t.Parallel()
	r := newRig(t, 2)
	send := func(recs ...*kgo.Record) {
		t.Helper()
		cl := kafkatest.Producer(t, kgo.DefaultProduceTopic(r.topic))
		for _, rec := range recs {
			rec.Topic = r.topic
		}
		require.NoError(t, cl.ProduceSync(context.Background(), recs...).FirstErr())
	}
	w := r.worker(t)
	send(
		cetest.Ledger(r.topic, "l1", "ledger.credited", "late", 100, "EUR"),
		cetest.Ledger(r.topic, "l2", "ledger.debited", "late", 40, "EUR"),
		cetest.Ledger(r.topic, "g1", "ledger.credited", "ghost", 5, "EUR"),
	)
	r.waitApplied(t, 3, time.Minute)

	code, out, stderr := runCmd(t, r.env, "parked", "list", "--json")
	require.Equal(t, 0, code, stderr)
	var listed []struct {
		EventKey string `json:"event_key"`
		Resource string `json:"resource"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	require.Len(t, listed, 3)
	require.Equal(t, []string{"ghost", "late", "late"}, []string{listed[0].Resource, listed[1].Resource, listed[2].Resource})
	require.Equal(t, cetest.Key("l1"), listed[1].EventKey, "listed in release order")

	send(cetest.Account(r.topic, "o1", "account.opened", "late", 1, "late"), cetest.Ledger(r.topic, "l3", "ledger.credited", "late", 1, "EUR"))
	r.waitApplied(t, 5, time.Minute)
	waitUntil(t, "late's ledger applied", time.Minute, func(context.Context) bool {
		return r.db.Count(t, `SELECT count(*) FROM ledger_entries WHERE account_id = 'late'`) == 3
	})
	require.Equal(t, int64(61), r.db.Count(t, `SELECT balance_cents FROM account_balances WHERE account_id = 'late'`))
	require.Equal(t, int64(1), r.db.Count(t, `SELECT count(*) FROM parked_events WHERE state = 'parked'`))

	// Release and drop change rows at once: they count them and ask first.
	// From a script (no terminal) they refuse without --yes and change
	// nothing; on a terminal they show the count and act only on y.
	nextAttempt := func() time.Time {
		var at time.Time
		require.NoError(t, r.db.Pool.QueryRow(context.Background(), `SELECT next_attempt_at FROM parked_events WHERE resource = 'ghost'`).Scan(&at))
		return at
	}
	due := nextAttempt()
	code, _, stderr = runCmd(t, r.env, "parked", "release")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "this would make 1 parked events of every resource due now")
	require.Contains(t, stderr, "confirm with --yes")
	require.Equal(t, due, nextAttempt(), "nothing released")
	code, out, stderr = runCmd(t, r.env, "parked", "release", "--resource", "ghost", "--yes")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "1 parked events are due now")

	dropArgs := []string{"parked", "drop", "--resource", "ghost", "--reason", "account deleted upstream"}
	code, _, stderr = runCmd(t, r.env, dropArgs...)
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, `this would dead-letter 1 parked events of resource ghost with reason dropped ("account deleted upstream"); confirm with --yes`)
	code, out, stderr = runOnTerminal(t, r.env, "n\n", dropArgs...)
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "This will dead-letter 1 parked events of resource ghost")
	require.Contains(t, stderr, "Continue? [y/N]")
	require.Contains(t, stderr, "not confirmed: nothing was changed")
	require.Empty(t, out)
	require.Equal(t, int64(1), r.db.Count(t, `SELECT count(*) FROM parked_events WHERE state = 'parked'`), "nothing dropped")
	require.Zero(t, r.db.Count(t, `SELECT count(*) FROM dead_letters WHERE reason = 'dropped'`))

	code, out, stderr = runOnTerminal(t, r.env, "y\n", dropArgs...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "Continue? [y/N]")
	require.Contains(t, out, "1 parked events dead-lettered")
	require.Equal(t, int64(1), r.db.Count(t, `SELECT count(*) FROM dead_letters WHERE reason = 'dropped' AND error LIKE '%account deleted upstream%'`))
	require.Equal(t, int64(0), r.db.Count(t, `SELECT count(*) FROM parked_events WHERE state = 'parked'`))
	require.Equal(t, int64(0), r.db.Count(t, `SELECT count(*) FROM effectively_claims WHERE disposition = 'parked'`))

	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
}
