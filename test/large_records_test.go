package test

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/examples/orders/webhooks"
	"github.com/effectively-io/effectively/internal/cetest"
	"github.com/effectively-io/effectively/internal/kafkatest"
)

// Records of about 1 MiB — the default consumer.max_payload_bytes — on
// every partition: what used to cost the worker over 100 times their size
// (and be redone after each OOM kill). The stock binary, SIGKILLed once
// while they are in flight, writes each record's rows exactly once with
// the content produced, through a config-only sink with a jsonb column and
// through the reference build's Go handlers. go run ./test/bench -memory
// measures the memory this takes.

// largeRecordBytes is the records' size: within the broker's default
// message.max.bytes (1 MiB + 12) with the batch's framing.
const largeRecordBytes = 1_000_000

// largeProducer produces records up to the broker's limit (franz-go's
// default batch limit is below it).
func largeProducer(t *testing.T) *kgo.Client {
	return kafkatest.Producer(t, kgo.ProducerBatchMaxBytes(2<<20))
}

// untilAppliedThroughAKill starts a worker, SIGKILLs it once it has
// applied something (so that the rest is redone by the next one), and
// starts workers until applied reaches want.
func untilAppliedThroughAKill(t *testing.T, env []string, args []string, applied func() int64, want int64) {
	t.Helper()
	w := start(t, env, args...)
	waitUntil(t, "the first worker applies a large record", 2*time.Minute, func(context.Context) bool { return applied() > 0 || w.exited() })
	require.False(t, w.exited(), "the worker exited: %s", tail(w.stderr.String(), 20))
	w.signal(t, syscall.SIGKILL)
	w.wait(t, time.Minute)
	t.Logf("SIGKILLed the worker with %d of %d records applied", applied(), want)
	w = start(t, env, args...)
	waitUntil(t, "every large record applied", 3*time.Minute, func(context.Context) bool { return applied() >= want || w.exited() })
	require.False(t, w.exited(), "the worker exited: %s", tail(w.stderr.String(), 20))
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
}

// resend is a copy of r to produce again (a record is the producer's
// until it is acknowledged).
func resend(r *kgo.Record) *kgo.Record {
	return &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers}
}

func TestLargeRecordsThroughAConfigOnlySinkAreWrittenOnce(t *testing.T) {
	t.Parallel()
	const partitions = 16
	abs, err := filepath.Abs(filepath.Join(exampleDir, "migrations"))
	require.NoError(t, err)
	r := newExampleRig(t, partitions, abs)

	// Two orders per partition, each a webhook of about 1 MiB; two of
	// them re-sent (duplicates: no second row, no second claim).
	keys := kafkatest.KeysOnEveryPartition("ord_big_", partitions, 2)
	orders := map[string]webhooks.Order{}
	events := map[string]webhooks.Event{}
	var recs []*kgo.Record
	for i, k := range keys {
		line, o, ev := webhooks.Large(i, k, largeRecordBytes)
		orders[k], events[ev.ID] = o, ev
		recs = append(recs, &kgo.Record{Topic: r.topic, Key: []byte(k), Value: line.Value})
	}
	recs = append(recs, resend(recs[3]), resend(recs[20]))
	require.NoError(t, largeProducer(t).ProduceSync(context.Background(), recs...).FirstErr())

	untilAppliedThroughAKill(t, r.env, []string{"--config", r.config, "run"}, func() int64 { return r.applied(t) }, int64(len(recs)))
	verifyOrders(t, r.db, webhooks.Expected{Orders: orders, Events: events})
	require.Equal(t, int64(len(keys)), r.db.Count(t, `SELECT count(*) FROM effectively_claims`), "one claim per distinct webhook")
}

func TestLargeRecordsThroughGoHandlersAreWrittenOnce(t *testing.T) {
	t.Parallel()
	const partitions = 16
	r := newRig(t, partitions)

	// One account per partition: account.opened then ledger.credited, each
	// with about 1 MiB of items beside the fields the handlers read; one
	// of each re-sent.
	keys := kafkatest.KeysOnEveryPartition("acct-big-", partitions, 1)
	var recs []*kgo.Record
	for i, k := range keys {
		items := webhooks.Items(i, largeRecordBytes-300)
		recs = append(recs,
			cetest.Record(r.topic, fmt.Sprintf("big-open-%d", i), "account.opened", k, 1,
				map[string]any{"name": fmt.Sprintf("Holder %d", i), "email": fmt.Sprintf("holder%d@example.com", i), "plan": "pro", "items": items}),
			cetest.Record(r.topic, fmt.Sprintf("big-credit-%d", i), "ledger.credited", k, 0,
				map[string]any{"amount_cents": 1000 + i, "currency": "EUR", "items": items}))
	}
	for _, rec := range recs {
		require.Greater(t, len(rec.Value), largeRecordBytes-1000)
	}
	recs = append(recs, resend(recs[4]), resend(recs[9]))
	require.NoError(t, largeProducer(t).ProduceSync(context.Background(), recs...).FirstErr())

	untilAppliedThroughAKill(t, r.env, []string{"run"}, func() int64 { return r.applied(t) }, int64(len(recs)))

	ctx := context.Background()
	type account struct{ name, email, plan, status string }
	got := map[string]account{}
	rows, err := r.db.Pool.Query(ctx, `SELECT id, name, email, plan, status, version FROM accounts`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		var a account
		var version int64
		require.NoError(t, rows.Scan(&id, &a.name, &a.email, &a.plan, &a.status, &version))
		require.Equal(t, int64(1), version)
		got[id] = a
	}
	require.NoError(t, rows.Err())
	require.Len(t, got, len(keys))
	type entry struct {
		key, currency string
		cents         int64
	}
	ledger := map[string][]entry{}
	rows, err = r.db.Pool.Query(ctx, `SELECT account_id, event_key, amount_cents, currency FROM ledger_entries`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		var e entry
		require.NoError(t, rows.Scan(&id, &e.key, &e.cents, &e.currency))
		ledger[id] = append(ledger[id], e)
	}
	require.NoError(t, rows.Err())
	for i, k := range keys {
		require.Equal(t, account{fmt.Sprintf("Holder %d", i), fmt.Sprintf("holder%d@example.com", i), "pro", "open"}, got[k], k)
		require.Equal(t, []entry{{cetest.Key(fmt.Sprintf("big-credit-%d", i)), "EUR", int64(1000 + i)}}, ledger[k],
			"account %s's ledger: one entry, the one produced", k)
	}
	require.Equal(t, int64(2*len(keys)), r.db.Count(t, `SELECT count(*) FROM effectively_claims`), "one claim per distinct event")
	require.Zero(t, r.db.Count(t, `SELECT count(*) FROM dead_letters`))
}
