package accounts_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/examples/accounts"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/cetest"
	"github.com/effectively-io/effectively/internal/consumer"
	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/internal/pipeline"
)

const topic = "accounts"

type bundle struct {
	db      pgtest.DB
	applier *pipeline.Applier
	offsets map[int32]int64 // next offset to hand out per partition
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return setupWith(t, pipeline.Options{})
}

// setupWith fills in the decoder, the reference handlers and a logger.
func setupWith(t *testing.T, opts pipeline.Options) *bundle {
	t.Helper()
	db := pgtest.New(t, accounts.Migrations())
	dec, err := event.NewDecoder(event.DecoderConfig{Topic: topic})
	require.NoError(t, err)
	opts.Decoders = map[string]*event.Decoder{topic: dec}
	opts.Handlers = registry()
	opts.Logger = zaptest.NewLogger(t)
	return &bundle{db: db, applier: pipeline.NewApplier(db.Pool, opts), offsets: map[int32]int64{}}
}

// registry is the reference domain's handlers.
func registry() *handlers.Registry {
	reg := &handlers.Registry{}
	accounts.Register(reg)
	return reg
}

func ce(id, typ, subject string, version int64, data any) *kgo.Record {
	return cetest.Record(topic, id, typ, subject, version, data)
}

func acct(id, typ, subject string, version int64, name string) *kgo.Record {
	return cetest.Account(topic, id, typ, subject, version, name)
}

func ledger(id, typ, subject string, cents int64, cur string) *kgo.Record {
	return cetest.Ledger(topic, id, typ, subject, cents, cur)
}

// apply hands recs to the applier as one batch of partition p, at the next
// offsets of that partition (so a re-sent record lands at a new offset, as
// a re-produced record would).
func (b *bundle) apply(t *testing.T, p int32, recs ...*kgo.Record) pipeline.Result {
	t.Helper()
	for _, r := range recs {
		r.Partition = p
		r.Offset = b.offsets[p]
		b.offsets[p]++
	}
	res, err := b.applier.ApplyBatch(context.Background(), consumer.Batch{Group: "g", Topic: topic, Partition: p, Records: recs})
	require.NoError(t, err)
	return res
}

func (b *bundle) count(t *testing.T, q string, args ...any) int64 {
	t.Helper()
	return b.db.Count(t, q, args...)
}

func (b *bundle) version(t *testing.T, id string) int64 {
	return b.count(t, `SELECT version FROM accounts WHERE id = $1`, id)
}

func TestDuplicatesHaveExactlyOneEffect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	open := acct("e1", "account.opened", "a1", 1, "ann")
	credit := ledger("e2", "ledger.credited", "a1", 500, "EUR")

	// Inside one batch.
	res := b.apply(t, 0, open, credit, ledger("e2", "ledger.credited", "a1", 500, "EUR"), acct("e1", "account.opened", "a1", 1, "ann"))
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 2, dedupe.Duplicate: 2}, res.Counts)
	// Across batches, re-produced at new offsets.
	res = b.apply(t, 0, ledger("e2", "ledger.credited", "a1", 500, "EUR"))
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Duplicate: 1}, res.Counts)
	res = b.apply(t, 0, acct("e1", "account.opened", "a1", 1, "ann"), ledger("e2", "ledger.credited", "a1", 500, "EUR"))
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Duplicate: 2}, res.Counts)

	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM ledger_entries`))
	require.Equal(t, int64(500), b.count(t, `SELECT balance_cents FROM account_balances WHERE account_id = 'a1' AND currency = 'EUR'`))
	require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM effectively_claims`))
	require.Equal(t, int64(7), b.count(t, `SELECT next_offset FROM consumer_offsets WHERE consumer_group = 'g' AND topic = $1 AND "partition" = 0`, topic))
}

func TestVersionGateDropsStaleUpdates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := b.apply(t, 0, acct("o", "account.opened", "a1", 1, "v1"), acct("u3", "account.updated", "a1", 3, "v3"))
	require.Equal(t, 2, res.Counts[dedupe.Applied])
	res = b.apply(t, 0, acct("u2", "account.updated", "a1", 2, "v2"), acct("c4", "account.closed", "a1", 4, "v4"), acct("u3b", "account.updated", "a1", 3, "v3b"))
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 1, dedupe.Stale: 2}, res.Counts)
	require.Equal(t, int64(4), b.version(t, "a1"))
	var name, status string
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT name, status FROM accounts WHERE id = 'a1'`).Scan(&name, &status))
	require.Equal(t, "v4", name)
	require.Equal(t, "closed", status)
	require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM effectively_claims WHERE disposition = 'stale'`))
}

// Two transactions upserting one account concurrently (a zombie and the new
// owner, or two partitions after a producer keyed badly): the higher
// version wins whatever the interleaving, and no version regresses.
func TestConcurrentUpsertsKeepTheMaxVersion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.apply(t, 0, acct("o", "account.opened", "a1", 1, "v1"))
	const n = 40
	var wg sync.WaitGroup
	for w := int32(1); w <= 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n; i++ {
				v := int64(2 + 2*i + int(w) - 1) // partition 1 writes even versions, 2 odd
				r := acct(fmt.Sprintf("u%d", v), "account.updated", "a1", v, fmt.Sprintf("v%d", v))
				r.Partition, r.Offset = w, int64(i)
				_, err := b.applier.ApplyBatch(context.Background(), consumer.Batch{Group: "g", Topic: topic, Partition: w, Records: []*kgo.Record{r}})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int64(2*n+1), b.version(t, "a1"))
	require.Equal(t, int64(2*n+1), b.count(t, `SELECT count(*) FROM effectively_claims WHERE event_type LIKE 'account.%'`))
}

func TestConflictIsDeadLetteredNotDropped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.apply(t, 0, acct("o", "account.opened", "a1", 1, "ann"), ledger("l1", "ledger.credited", "a1", 100, "EUR"))
	res := b.apply(t, 0, ledger("l1", "ledger.credited", "a1", 999, "EUR"))
	require.Equal(t, map[dedupe.Disposition]int{dedupe.DeadLettered: 1}, res.Counts)
	require.Equal(t, 1, res.DeadLetters[pipeline.ReasonConflict])
	require.Equal(t, int64(100), b.count(t, `SELECT sum(amount_cents) FROM ledger_entries`))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM dead_letters WHERE reason = 'conflict' AND event_key IS NOT NULL AND "offset" = 2`))
	// The original claim keeps its disposition.
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM effectively_claims WHERE disposition = 'applied' AND event_type = 'ledger.credited'`))
	// A redelivery of the conflicting record makes no second dead letter.
	r := ledger("l1", "ledger.credited", "a1", 999, "EUR")
	r.Offset = 2
	_, err := b.applier.ApplyBatch(context.Background(), consumer.Batch{Group: "g2", Topic: topic, Partition: 0, Records: []*kgo.Record{r}})
	require.NoError(t, err)
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM dead_letters`))
	require.Equal(t, int64(2), b.count(t, `SELECT attempts FROM dead_letters`))
}

// Bad input is dead-lettered with its reason and the partition moves on: the
// good records around it are applied, in the same batch.
func TestPoisonIsDeadLetteredAndTheBatchMoves(t *testing.T) {
	t.Parallel()
	b := setup(t)
	nul := acct("bad-nul", "account.updated", "a1", 5, "nul\x00name") // PostgreSQL text cannot hold NUL: a statement failure
	res := b.apply(t, 0,
		acct("o", "account.opened", "a1", 1, "ann"),
		&kgo.Record{Key: []byte("a1"), Value: []byte("not json")},
		ledger("l0", "ledger.credited", "a1", 0, "EUR"),
		ledger("lx", "ledger.credited", "a1", 10, "XXQ"),
		ce("t1", "account.exploded", "a1", 1, map[string]any{}),
		ledger("l-orphan", "ledger.credited", "nobody", 10, "EUR"),
		nul,
		ledger("l1", "ledger.credited", "a1", 250, "EUR"),
	)
	require.True(t, res.Isolated, "the NUL statement failure forces isolation")
	// The ledger event for an account that does not exist is parked, not
	// dead-lettered: its account may still arrive.
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 2, dedupe.DeadLettered: 5, dedupe.Parked: 1}, res.Counts)
	require.Equal(t, map[event.Reason]int{
		event.ReasonNotJSON: 1, accounts.ReasonInvalidAmount: 1, accounts.ReasonInvalidCurrency: 1,
		handlers.ReasonUnknownType: 1, pipeline.ReasonDataException: 1,
	}, res.DeadLetters)
	require.Equal(t, int64(250), b.count(t, `SELECT sum(amount_cents) FROM ledger_entries`))
	require.Equal(t, int64(1), b.version(t, "a1"))
	require.Equal(t, int64(5), b.count(t, `SELECT count(*) FROM dead_letters`))
	// Dead letters of claimed events are claims with that disposition (a
	// redelivery is then a duplicate); undecodable ones have no claim.
	require.Equal(t, int64(4), b.count(t, `SELECT count(*) FROM effectively_claims WHERE disposition = 'dead_lettered'`))
	require.Equal(t, int64(8), b.count(t, `SELECT next_offset FROM consumer_offsets`))
}

// A zombie — a member that lost its partition but still holds a batch —
// applies nothing below the stored position and never moves it back.
func TestZombieBatchBelowTheStoredPositionIsSkipped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	recs := []*kgo.Record{acct("o", "account.opened", "a1", 1, "ann"), ledger("l1", "ledger.credited", "a1", 100, "EUR"), ledger("l2", "ledger.credited", "a1", 100, "EUR")}
	b.apply(t, 0, recs...) // the new owner got there first: position 3
	// The zombie's batch covers offsets 1..2 with different content at
	// those offsets (as if it read them before a replay): nothing applies.
	z1, z2 := ledger("z1", "ledger.credited", "a1", 7, "EUR"), ledger("z2", "ledger.credited", "a1", 7, "EUR")
	z1.Offset, z2.Offset = 1, 2
	res, err := b.applier.ApplyBatch(context.Background(), consumer.Batch{Group: "g", Topic: topic, Partition: 0, Records: []*kgo.Record{z1, z2}})
	require.NoError(t, err)
	require.Empty(t, res.Counts)
	require.Equal(t, int64(3), b.count(t, `SELECT next_offset FROM consumer_offsets`))
	require.Equal(t, int64(200), b.count(t, `SELECT sum(amount_cents) FROM ledger_entries`))
}

// Every record of a run gets exactly one disposition: claims by disposition
// plus duplicates plus undecodable dead letters = records.
func TestEveryRecordIsAccountedFor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var recs []*kgo.Record
	for i := 0; i < 20; i++ {
		a := fmt.Sprintf("a%d", i)
		recs = append(recs, acct("o"+a, "account.opened", a, 1, a), ledger("l"+a, "ledger.debited", a, 5, "USD"),
			ledger("l"+a, "ledger.debited", a, 5, "USD"), acct("u"+a, "account.updated", a, 2, a+"x"))
	}
	recs = append(recs, &kgo.Record{Key: []byte("k"), Value: nil})
	total := map[dedupe.Disposition]int{}
	for i := 0; i < len(recs); i += 7 {
		res := b.apply(t, 0, recs[i:min(i+7, len(recs))]...)
		for d, n := range res.Counts {
			total[d] += n
		}
	}
	claims := b.count(t, `SELECT count(*) FROM effectively_claims`)
	undecodable := b.count(t, `SELECT count(*) FROM dead_letters WHERE event_key IS NULL`)
	require.Equal(t, int64(len(recs)), claims+int64(total[dedupe.Duplicate])+undecodable)
	require.Equal(t, 20, total[dedupe.Duplicate])
	require.Equal(t, int64(-100), b.count(t, `SELECT sum(balance_cents) FROM account_balances`))
}
