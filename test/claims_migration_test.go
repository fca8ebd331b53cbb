package test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/examples/accounts"
	"github.com/effectively-io/effectively/internal/cetest"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/schema"
)

// legacyClaimSQL is the claim statement of the release before claims
// generations (dedupe/claims.go at b5f7abb), verbatim: what a worker of
// that release keeps sending while the migration runs and after it.
const legacyClaimSQL = `
INSERT INTO processed_events
    (event_key, key_strategy, payload_hash, event_type, subject, disposition, consumer_group, topic, "partition", "offset")
SELECT k, s, h, t, subj, 'applied', $1, $2, $3, o
FROM unnest($4::text[], $5::text[], $6::bytea[], $7::text[], $8::text[], $9::bigint[]) AS c(k, s, h, t, subj, o)
ORDER BY k
ON CONFLICT (event_key) DO NOTHING
RETURNING event_key`

// A database of the release before claims generations, holding many
// claims, is migrated while a worker of that release keeps claiming; then
// a worker of this build takes the same events on, racing it key by key,
// while its pruner closes generation 0 (the old table) and opens
// generation 1. Nothing is lost and nothing is applied twice:
//
//   - the old worker's claims go on through the migration (its longest
//     transaction is reported) and are honoured by the new worker, which
//     finds them in generation 0;
//   - events claimed before the migration are duplicates when they arrive
//     again;
//   - once generation 0 is closed, the old worker's next claim is refused
//     by the fence, not applied;
//   - every event of the race has exactly one effect: the old worker's or
//     the new one's;
//   - the whole stream produced again is all duplicates;
//   - dropping generation 0, with every historical claim in it, is one
//     statement (its time is reported).
//
// EFFECTIVELY_MIGRATION_CLAIMS sets the historical claims (default
// 300,000; the closing note's run used millions).
func TestClaimsMigrateToGenerationsWithTheWorkerRunning(t *testing.T) {
	t.Parallel()
	historical := 300_000
	if s := os.Getenv("EFFECTIVELY_MIGRATION_CLAIMS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "EFFECTIVELY_MIGRATION_CLAIMS")
		historical = n
	}
	ctx := context.Background()
	r := newRig(t, 4)
	old := pgtest.NewEmpty(t)
	migrateBeforeGenerations(t, old)
	r.db = old
	r.env = withEnv(r.env, "EFFECTIVELY_POSTGRES_URL="+old.URL)

	dec, err := event.NewDecoder(event.DecoderConfig{Topic: r.topic, KeyStrategy: event.StrategyCloudEvents})
	require.NoError(t, err)
	decode := func(rec *kgo.Record) event.Event {
		ev, err := dec.Decode(event.Record{Topic: rec.Topic, Key: rec.Key, Value: rec.Value})
		require.NoError(t, err)
		return ev
	}

	// The history: many claims of long-applied events (another topic), and
	// 100 of this topic's events the old release applied, which arrive
	// again after the upgrade.
	start := time.Now()
	_, err = old.Pool.Exec(ctx, `
INSERT INTO processed_events (event_key, key_strategy, payload_hash, event_type, subject, disposition, consumer_group, topic, "partition", "offset", claimed_at, updated_at)
SELECT 'ce:20:urn:test:history:' || lpad(i::text, 10, '0'), 'cloudevents', sha256(int8send(i)), 'account.opened', 'h-' || (i % 1000),
       'applied', 'old-group', 'history', (i % 8)::int, i / 8, now() - interval '3 days', now() - interval '3 days'
FROM generate_series(1, $1::bigint) AS i`, historical)
	require.NoError(t, err)
	_, err = old.Pool.Exec(ctx, `VACUUM ANALYZE processed_events`)
	require.NoError(t, err)
	t.Logf("%d historical claims inserted in %s", historical, time.Since(start).Round(time.Millisecond))
	_, err = old.Pool.Exec(ctx, `CREATE TABLE legacy_effects (event_key text NOT NULL, subject text NOT NULL)`)
	require.NoError(t, err)
	var resent []*kgo.Record
	for i := range 100 {
		resent = append(resent, cetest.Account(r.topic, fmt.Sprintf("hist-%d", i), "account.opened", fmt.Sprintf("hist-%d", i), 1, "hist"))
	}
	legacyClaim(t, old, r.topic, decodeAll(resent, decode))

	// The old worker: it claims the race's events in order, 10 every
	// 20 ms, each batch one transaction with its effect, until the fence
	// refuses it.
	const raced = 4000
	var race []*kgo.Record
	for i := range raced {
		race = append(race, cetest.Account(r.topic, fmt.Sprintf("race-%d", i), "account.opened", fmt.Sprintf("race-%d", i), 1, "race"))
	}
	lw := &legacyWorker{db: old, topic: r.topic, events: decodeAll(race, decode)}
	lwDone := make(chan struct{})
	go func() { defer close(lwDone); lw.run(ctx) }()
	waitUntil(t, "the old worker claiming", time.Minute, func(context.Context) bool { return lw.claimed() > 0 })

	// The migration, while it claims.
	migStart := time.Now()
	code, stdout, stderr := runCmd(t, r.env, "migrate")
	require.Equal(t, 0, code, stderr)
	migTook := time.Since(migStart)
	require.Contains(t, stdout, "effectively migrations at version 19 (applied [14 15 16 17 18 19])")
	require.Equal(t, int64(0), old.Count(t, `SELECT generation FROM claim_generations WHERE opened_at IS NOT NULL AND closed_at IS NULL`),
		"a claims table with claims stays the open generation 0")
	require.Equal(t, int64(historical+100), old.Count(t, `SELECT count(*) FROM effectively_claims WHERE event_key NOT LIKE '%:race-%'`))
	worst, during := lw.worstDuring(migStart, time.Now())
	t.Logf("migrate took %s over %d claims; the old worker committed %d batches meanwhile, its longest transaction %s",
		migTook.Round(time.Millisecond), historical, during, worst.Round(time.Millisecond))
	require.Positive(t, during, "the old worker kept claiming during the migration")

	// The new worker, on the same events: the last 3,000 first, newest
	// first, so the two meet; its pruner closes generation 0 four seconds
	// after the migration opened it, and the old worker is refused.
	slices.Reverse(race)
	produceRecords(t, r.topic, race[:raced-1000]...)
	w := r.worker(t, "EFFECTIVELY_DEDUPE_GENERATION_INTERVAL=4s", "EFFECTIVELY_DEDUPE_PRUNE_INTERVAL=1s")
	r.waitApplied(t, raced-1000, 2*time.Minute)
	select {
	case <-lwDone:
	case <-time.After(time.Minute):
		t.Fatal("the old worker was never refused: generation 0 was not closed")
	}
	require.Error(t, lw.err)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, lw.err, &pgErr, "the old worker stopped on the fence, not on something else: %v", lw.err)
	require.Equal(t, "23514", pgErr.Code)
	require.Equal(t, "effectively_claims_closed", pgErr.ConstraintName)
	t.Logf("the old worker claimed %d of %d raced events before the fence refused it: %v", lw.claimed(), raced, lw.err)

	// Then, in generation 1, the first 1,000 (which the old worker claimed
	// in generation 0 as far as it got), the 100 re-sent ones and 100 new
	// ones.
	var fresh []*kgo.Record
	for i := range 100 {
		fresh = append(fresh, cetest.Account(r.topic, fmt.Sprintf("fresh-%d", i), "account.opened", fmt.Sprintf("fresh-%d", i), 1, "fresh"))
	}
	produceRecords(t, r.topic, race[raced-1000:]...)
	produceRecords(t, r.topic, resent...)
	produceRecords(t, r.topic, fresh...)
	total := raced + 200
	r.waitApplied(t, total, 2*time.Minute)
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
	require.Equal(t, int64(100), old.Count(t, `SELECT count(*) FROM effectively_claims WHERE generation > 0 AND event_key LIKE '%:fresh-%'`), "the new events were claimed in generation 1")
	require.Equal(t, int64(100), old.Count(t, `SELECT count(*) FROM accounts WHERE id LIKE 'fresh-%'`))
	st := r.status(t)
	require.NotNil(t, st.Claims)
	require.Positive(t, st.Claims.Open, "`effectively status` shows the open generation")
	require.GreaterOrEqual(t, st.Claims.Closed, 1, "and generation 0, closed")
	require.NotNil(t, st.Claims.OldestClosedAt)
	_, text, _ := runCmd(t, r.env, "status")
	require.Regexp(t, `claims: ~\d+ kept; generation \d+ open since `, text)

	// Exactly one effect per raced event: the old worker's or the new one's.
	oldWon := old.Count(t, `SELECT count(*) FROM legacy_effects WHERE subject LIKE 'race-%'`)
	newWon := old.Count(t, `SELECT count(*) FROM accounts WHERE id LIKE 'race-%'`)
	require.Positive(t, oldWon, "the old worker won some keys")
	require.Positive(t, newWon, "the new worker won some keys")
	require.Equal(t, int64(raced), oldWon+newWon, "every raced event has an effect")
	require.Zero(t, old.Count(t, `SELECT count(*) FROM legacy_effects l JOIN accounts a ON a.id = l.subject`), "no event has two effects")
	require.Equal(t, oldWon, old.Count(t, `SELECT count(DISTINCT event_key) FROM legacy_effects WHERE subject LIKE 'race-%'`), "the old worker applied each of its keys once")
	require.Zero(t, old.Count(t, `SELECT count(*) FROM accounts WHERE id LIKE 'hist-%'`), "events claimed before the migration are duplicates")
	require.Equal(t, int64(raced+100), old.Count(t, `SELECT count(DISTINCT event_key) FROM effectively_claims WHERE event_key LIKE '%:race-%' OR event_key LIKE '%:hist-%'`))
	require.Equal(t, int64(raced+100), old.Count(t, `SELECT count(*) FROM effectively_claims WHERE event_key LIKE '%:race-%' OR event_key LIKE '%:hist-%'`), "one claim per event, across the generations")
	require.GreaterOrEqual(t, old.Count(t, `SELECT count(*) FROM effectively_claims WHERE generation = 0 AND (event_key LIKE '%race-%' OR event_key LIKE '%hist-%')`), oldWon+100,
		"the old worker's claims are generation 0's (the new worker's too, until the rotation)")
	require.Equal(t, int64(historical+total), old.Count(t, `SELECT count(*) FROM effectively_claims`), "no claim lost")

	// The whole stream again: all duplicates.
	before := old.Count(t, `SELECT count(*) FROM accounts`)
	produceRecords(t, r.topic, again(race)...)
	produceRecords(t, r.topic, again(resent)...)
	produceRecords(t, r.topic, again(fresh)...)
	w = r.worker(t)
	r.waitApplied(t, 2*total, 2*time.Minute)
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
	require.Equal(t, before, old.Count(t, `SELECT count(*) FROM accounts`))
	require.Equal(t, int64(historical+total), old.Count(t, `SELECT count(*) FROM effectively_claims`))
	require.Zero(t, old.Count(t, `SELECT count(*) FROM dead_letters`))

	// Generation 0 expires: one drop, whatever it holds.
	old.AgeClosedClaims(t, 30*24*time.Hour)
	code, stdout, stderr = runCmd(t, r.env, "prune", "--yes")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "effectively_claims: dropped generation 0 (processed_events")
	t.Logf("prune:\n%s", stdout)
	require.Zero(t, old.Count(t, `SELECT count(*) FROM pg_class WHERE relname = 'processed_events' AND relnamespace = current_schema()::regnamespace`))
	require.Equal(t, old.Count(t, `SELECT count(*) FROM effectively_claims WHERE generation > 0`), old.Count(t, `SELECT count(*) FROM effectively_claims`), "only generation 0 went")
	require.Positive(t, old.Count(t, `SELECT count(*) FROM effectively_claims`), "the new worker's claims in generation 1 stay")
}

// migrateBeforeGenerations migrates db as the release before claims
// generations left it: the engine at version 13, the reference domain.
func migrateBeforeGenerations(t *testing.T, db pgtest.DB) {
	t.Helper()
	gooseUp(t, db, schema.Migrations(), schema.VersionTable, 13)
	gooseUp(t, db, accounts.Migrations().FS, accounts.Migrations().Table, 0)
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) WHERE to_regclass('processed_events') IS NOT NULL AND to_regclass('effectively_claims') IS NULL`))
}

// again copies recs for producing them again (a produced record keeps
// its producer's context).
func again(recs []*kgo.Record) []*kgo.Record {
	out := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		out[i] = &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers}
	}
	return out
}

func decodeAll(recs []*kgo.Record, decode func(*kgo.Record) event.Event) []event.Event {
	out := make([]event.Event, len(recs))
	for i, r := range recs {
		out[i] = decode(r)
	}
	return out
}

// legacyClaim claims evs with the old release's statement, in one
// transaction.
func legacyClaim(t *testing.T, db pgtest.DB, topic string, evs []event.Event) {
	t.Helper()
	_, err := legacyClaimTx(context.Background(), db, topic, evs)
	require.NoError(t, err)
}

func legacyClaimTx(ctx context.Context, db pgtest.DB, topic string, evs []event.Event) ([]string, error) {
	n := len(evs)
	keys, strategies, types, subjects := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	hashes, offsets := make([][]byte, n), make([]int64, n)
	for i, ev := range evs {
		keys[i], strategies[i], hashes[i], types[i], subjects[i], offsets[i] = ev.Key, ev.Strategy, ev.PayloadHash[:], ev.Type, ev.Subject, int64(i)
	}
	var claimed []string
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, legacyClaimSQL, "old-group", topic, int32(0), keys, strategies, hashes, types, subjects, offsets)
		if err != nil {
			return err
		}
		claimed, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, ev := range evs {
			if slices.Contains(claimed, ev.Key) {
				if _, err := tx.Exec(ctx, `INSERT INTO legacy_effects VALUES ($1, $2)`, ev.Key, ev.Subject); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return claimed, err
}

// legacyWorker is a worker of the release before claims generations, as
// far as claims go: batches of 10 claims, each with its effect, one
// transaction each, every 20 ms, until an error.
type legacyWorker struct {
	db     pgtest.DB
	topic  string
	events []event.Event

	mu    sync.Mutex
	n     int
	spans [][2]time.Time // each committed batch's begin and end
	err   error
}

func (lw *legacyWorker) run(ctx context.Context) {
	for i := 0; ; i = (i + 10) % len(lw.events) {
		begin := time.Now()
		got, err := legacyClaimTx(ctx, lw.db, lw.topic, lw.events[i:min(i+10, len(lw.events))])
		lw.mu.Lock()
		if err != nil {
			lw.err = err
			lw.mu.Unlock()
			return
		}
		lw.n += len(got)
		lw.spans = append(lw.spans, [2]time.Time{begin, time.Now()})
		lw.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
}

func (lw *legacyWorker) claimed() int {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.n
}

// worstDuring is the longest batch that overlapped [from, to], and how many
// did.
func (lw *legacyWorker) worstDuring(from, to time.Time) (time.Duration, int) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	var worst time.Duration
	n := 0
	for _, s := range lw.spans {
		if s[1].Before(from) || s[0].After(to) {
			continue
		}
		n++
		worst = max(worst, s[1].Sub(s[0]))
	}
	return worst, n
}
