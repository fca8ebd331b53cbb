package accounts_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/examples/accounts"
	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/handling"
	"github.com/effectively-io/effectively/internal/outbox"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/internal/pipeline"
)

func setupOutbox(t *testing.T) *bundle {
	t.Helper()
	return setupOutboxWith(t, outbox.Expiry{})
}

// targets are the reference domain's, configured.
var targets = map[string]outbox.Endpoint{accounts.TargetCRM: {URL: "http://crm.test/"}, accounts.TargetMail: {URL: "http://mail.test/send"}}

func setupOutboxWith(t *testing.T, expiry outbox.Expiry) *bundle {
	t.Helper()
	db := pgtest.New(t, accounts.Migrations())
	dec, err := event.NewDecoder(event.DecoderConfig{Topic: topic})
	require.NoError(t, err)
	reg := registry()
	a := pipeline.NewApplier(db.Pool, pipeline.Options{
		Decoders: map[string]*event.Decoder{topic: dec},
		Handlers: reg,
		Env:      handling.Of(reg).Env(targets, expiry, nil, 0),
		Logger:   zaptest.NewLogger(t),
	})
	return &bundle{db: db, applier: a, offsets: map[int32]int64{}}
}

// account.opened records its two intents with its effect, once, even when
// its state arrives stale; other account events record none.
func TestAccountOpenedRecordsIntentsOnce(t *testing.T) {
	t.Parallel()
	b := setupOutbox(t)
	res := b.apply(t, 0, acct("u5", "account.updated", "a1", 5, "v5"), acct("o1", "account.opened", "a1", 1, "v1"), acct("o1", "account.opened", "a1", 1, "v1"))
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 1, dedupe.Stale: 1, dedupe.Duplicate: 1}, res.Counts)
	b.apply(t, 0, acct("o1", "account.opened", "a1", 1, "v1"), acct("o2", "account.opened", "a2", 1, "ann"))

	require.Equal(t, int64(4), b.count(t, `SELECT count(*) FROM outbox`))
	require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM outbox o JOIN effectively_claims p ON p.event_key = o.event_key WHERE p.subject = 'a1' AND o.state = 'pending'`))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM outbox WHERE operation = $1 AND target_name = 'crm' AND target = '/contacts/a2' AND method = 'PUT' AND idempotent`, accounts.OpCRMUpsertContact))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM outbox WHERE operation = $1 AND target_name = 'mail' AND target = '' AND method = 'POST' AND NOT idempotent AND request->>'to' = 'ann@example.com'`, accounts.OpMailWelcome))
	var key, eventKey string
	require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT idempotency_key, event_key FROM outbox WHERE operation = $1 AND resource = 'crm:contact:a2'`, accounts.OpCRMUpsertContact).Scan(&key, &eventKey))
	require.Equal(t, outbox.IdempotencyKey(eventKey, accounts.OpCRMUpsertContact), key)
}

// An account.opened whose record is older than the outbox retention (a
// replay of history whose intents may have been pruned) records its intents
// as suppressed, never pending; outbox.resend_expired records them pending.
// The record's age decides, not the event's own time attribute.
func TestOldEventsRecordSuppressedIntents(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	expiry := outbox.Expiry{Retention: 7 * 24 * time.Hour, Now: func() time.Time { return now }}
	at := func(r *kgo.Record, age time.Duration) *kgo.Record { r.Timestamp = now.Add(-age); return r }

	b := setupOutboxWith(t, expiry)
	b.apply(t, 0, at(acct("o1", "account.opened", "a1", 1, "old"), 8*24*time.Hour), at(acct("o2", "account.opened", "a2", 1, "recent"), 6*24*time.Hour))
	require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM outbox o JOIN effectively_claims p USING (event_key) WHERE p.subject = 'a1' AND o.state = 'suppressed' AND o.last_error LIKE '%outbox.resend_expired%'`))
	require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM outbox o JOIN effectively_claims p USING (event_key) WHERE p.subject = 'a2' AND o.state = 'pending'`))
	require.Equal(t, int64(1), b.version(t, "a1"), "the effect itself is applied; only its side effects are suppressed")

	expiry.ResendExpired = true
	b = setupOutboxWith(t, expiry)
	b.apply(t, 0, at(acct("o1", "account.opened", "a1", 1, "old"), 8*24*time.Hour))
	require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM outbox WHERE state = 'pending'`))
	require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM outbox WHERE state = 'suppressed'`))
}
