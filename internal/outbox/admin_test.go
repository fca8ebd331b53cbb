package outbox

import (
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
