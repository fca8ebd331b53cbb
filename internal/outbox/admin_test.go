package outbox

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// A dead-lettered intent is delivered again after `outbox retry` (the
// target was fixed), with the same idempotency key; a suppressed one only
// when an operator retries it; sent and unknown ones are never retried.
func TestRetryQueuesDeadLetteredAndSuppressedOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	erp := newServer(t, status(http.StatusBadRequest), status(http.StatusOK))
	b.record(t, crmIntent(erp.URL, "ev-1", "acct-1"))
	old := crmIntent(erp.URL, "ev-2", "acct-2")
	old.Suppressed = true
	b.record(t, old)

	_, err := b.d.DeliverOnce(b.ctx)
	require.NoError(t, err)
	st, _, _, _ := b.state(t, "ev-1", "erp.upsert_contact")
	require.Equal(t, "dead_lettered", st)
	st, _, _, _ = b.state(t, "ev-2", "erp.upsert_contact")
	require.Equal(t, "suppressed", st, "a suppressed intent is never delivered on its own")
	require.Len(t, erp.requests(), 1)

	listed, err := List(b.ctx, b.db.Pool, Filter{State: DeadLettered})
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.Equal(t, "ev-1", listed[0].EventKey)
	require.Equal(t, 400, *listed[0].LastStatus)

	n, err := Retry(b.ctx, b.db.Pool, Filter{}, listed[0].ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	b.deliverUntil(t, 5*time.Second)
	got := erp.requests()
	require.Len(t, got, 2)
	require.Equal(t, got[0].key, got[1].key, "the retried call carries the same idempotency key")
	st, _, _, _ = b.state(t, "ev-1", "erp.upsert_contact")
	require.Equal(t, "sent", st)

	_, err = Retry(b.ctx, b.db.Pool, Filter{}, listed[0].ID)
	require.ErrorIs(t, err, ErrNotRetryable, "a sent intent is not retried")
	_, err = Retry(b.ctx, b.db.Pool, Filter{State: Unknown})
	require.ErrorIs(t, err, ErrNotRetryable, "unknown intents are resolved, not retried")
	_, err = List(b.ctx, b.db.Pool, Filter{State: "lost"})
	require.ErrorIs(t, err, ErrBadFilter)

	n, err = Retry(b.ctx, b.db.Pool, Filter{State: Suppressed})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	b.deliverUntil(t, 5*time.Second)
	require.Len(t, erp.requests(), 3)

	counts, err := Counts(b.ctx, b.db.Pool)
	require.NoError(t, err)
	require.Equal(t, int64(2), counts[Sent])
	require.Zero(t, counts[Suppressed]+counts[DeadLettered]+counts[Pending])
}

// The metrics count deliveries by outcome and show the queue.
func TestMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reg := prometheus.NewRegistry()
	b.d.opts.Metrics = NewMetrics(reg)
	erp := newServer(t, status(http.StatusInternalServerError), status(http.StatusOK))
	chat := newServer(t, status(http.StatusOK))
	b.record(t, crmIntent(erp.URL, "ev-1", "acct-1"), mailIntent(chat.URL, "ev-1", "acct-1"), crmIntent(erp.URL, "ev-2", "acct-2"))

	depth, err := QueueDepth(b.ctx, b.db.Pool)
	require.NoError(t, err)
	require.Equal(t, int64(3), depth.ByState[Pending])
	require.Positive(t, depth.OldestPending)

	b.deliverUntil(t, 5*time.Second)
	m := b.d.opts.Metrics
	require.Equal(t, 1.0, testutil.ToFloat64(m.deliveries.WithLabelValues("erp.upsert_contact", "retry")), "the first call got a 500")
	require.Equal(t, 2.0, testutil.ToFloat64(m.deliveries.WithLabelValues("erp.upsert_contact", "sent")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.deliveries.WithLabelValues("chat.welcome", "sent")))

	depth, err = QueueDepth(b.ctx, b.db.Pool)
	require.NoError(t, err)
	m.setDepth(depth)
	require.Equal(t, 0.0, testutil.ToFloat64(m.depth.WithLabelValues("pending")))
	require.Equal(t, 0.0, testutil.ToFloat64(m.oldest))
}

// ResolveAll settles the unknown intents among many IDs in one statement
// and names the rest with their state; on a database error it settles none
// (so the operator runs the same command again).
func TestResolveAllSettlesTheUnknownAndNamesTheRest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := range 4 {
		b.record(t, mailIntent("http://chat.invalid/welcome", fmt.Sprintf("ev-%d", i), fmt.Sprintf("inv-%d", i)))
	}
	id := func(i int) int64 { return b.id(t, fmt.Sprintf("ev-%d", i), "chat.welcome") }
	_, err := b.db.Pool.Exec(b.ctx, `UPDATE outbox SET state = 'unknown' WHERE id = ANY($1)`, []int64{id(0), id(1), id(2)})
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(b.ctx, `UPDATE outbox SET state = 'sent', sent_at = now() WHERE id = $1`, id(3))
	require.NoError(t, err)

	// A trigger refuses intent 2: the statement fails, nothing is settled.
	_, err = b.db.Pool.Exec(b.ctx, fmt.Sprintf(`
CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
  IF NEW.id = %d THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$;
CREATE TRIGGER refuse BEFORE UPDATE ON outbox FOR EACH ROW EXECUTE FUNCTION refuse()`, id(2)))
	require.NoError(t, err)
	settled, left, err := ResolveAll(b.ctx, b.db.Pool, []int64{id(0), id(1), id(2)}, ResolveResend)
	require.ErrorContains(t, err, "refused by the test")
	require.Empty(t, settled)
	require.Empty(t, left)
	require.Equal(t, int64(3), b.db.Count(t, `SELECT count(*) FROM outbox WHERE state = 'unknown'`), "all or none")
	_, err = b.db.Pool.Exec(b.ctx, `DROP TRIGGER refuse ON outbox`)
	require.NoError(t, err)

	// Again, with a sent intent and a missing ID among them.
	settled, left, err = ResolveAll(b.ctx, b.db.Pool, []int64{id(2), id(3), 999999, id(0)}, ResolveResend)
	require.NoError(t, err)
	require.Equal(t, []int64{id(2), id(0)}, settled, "in the order given")
	require.Equal(t, []NotSettled{{ID: id(3), State: Sent}, {ID: 999999}}, left)
	require.ErrorIs(t, left[0], ErrNotUnknown)
	require.ErrorContains(t, left[0], fmt.Sprintf("outbox intent %d: it is sent", id(3)))
	require.ErrorIs(t, left[1], ErrNotFound)
	require.Equal(t, int64(2), b.db.Count(t, `SELECT count(*) FROM outbox WHERE state = 'pending'`))
	require.Equal(t, "unknown", func() string { s, _, _, _ := b.state(t, "ev-1", "chat.welcome"); return s }(), "an ID not given is not touched")

	_, _, err = ResolveAll(b.ctx, b.db.Pool, []int64{id(1)}, "maybe")
	require.Error(t, err)
}
