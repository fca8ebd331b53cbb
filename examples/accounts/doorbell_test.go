package accounts_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/examples/accounts"
	"github.com/effectively-io/effectively/internal/consumer"
	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/handling"
	"github.com/effectively-io/effectively/internal/outbox"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/internal/pipeline"
)

// sourceAPI is a local accounts API whose answers the test sets.
type sourceAPI struct {
	mu       sync.Mutex
	accounts map[string]map[string]any
	status   int // when non-zero, every request gets it
	requests int
}

func (s *sourceAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	if s.status != 0 {
		w.WriteHeader(s.status)
		return
	}
	a, ok := s.accounts[strings.TrimPrefix(r.URL.Path, "/accounts/")]
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	_ = json.NewEncoder(w).Encode(a)
}

func (s *sourceAPI) set(id string, version int64, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.accounts[id] = map[string]any{"id": id, "version": version, "name": name, "email": name + "@example.com", "plan": "pro", "status": "open"}
}

func setupDoorbell(t *testing.T) (*bundle, *sourceAPI) {
	t.Helper()
	api := &sourceAPI{accounts: map[string]map[string]any{}}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	db := pgtest.New(t, accounts.Migrations())
	dec, err := event.NewDecoder(event.DecoderConfig{Topic: topic})
	require.NoError(t, err)
	reg := registry()
	a := pipeline.NewApplier(db.Pool, pipeline.Options{
		Decoders: map[string]*event.Decoder{topic: dec},
		Handlers: reg,
		Env:      handling.Of(reg).Env(map[string]outbox.Endpoint{accounts.TargetSource: {URL: srv.URL + "/accounts"}}, outbox.Expiry{}, nil, 0),
		Logger:   zaptest.NewLogger(t),
	})
	return &bundle{db: db, applier: a, offsets: map[int32]int64{}}, api
}

func bell(id, subject string) *kgo.Record {
	return ce(id, accounts.TypeAccountRefreshed, subject, 0, nil)
}

// Doorbells fetch the current state and apply it through the version gate:
// duplicates and disorder converge to the source's latest version.
func TestDoorbellConvergesToTheSourcesLatestVersion(t *testing.T) {
	t.Parallel()
	b, api := setupDoorbell(t)
	api.set("a1", 3, "v3")
	res := b.apply(t, 0, bell("d1", "a1"), bell("d1", "a1"))
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 1, dedupe.Duplicate: 1}, res.Counts)
	require.Equal(t, int64(3), b.version(t, "a1"))
	api.set("a1", 5, "v5")
	b.apply(t, 0, bell("d2", "a1"))
	// A late account event with an older version is stale.
	res = b.apply(t, 0, acct("u4", "account.updated", "a1", 4, "v4"), bell("d3", "a1"))
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Stale: 2}, res.Counts)
	require.Equal(t, int64(5), b.version(t, "a1"))
}

// The source down (5xx, 429): the batch fails transiently (the consumer
// retries it with backoff), nothing is dead-lettered; once the source is
// back the same batch applies.
func TestDoorbellSourceDownIsTransient(t *testing.T) {
	t.Parallel()
	b, api := setupDoorbell(t)
	api.set("a1", 2, "v2")
	rec := bell("d1", "a1")
	rec.Partition, rec.Offset = 0, 0
	batch := consumer.Batch{Group: "g", Topic: topic, Partition: 0, Records: []*kgo.Record{rec}}
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusTooManyRequests} {
		api.status = status
		_, err := b.applier.ApplyBatch(context.Background(), batch)
		require.ErrorIs(t, err, accounts.ErrSourceUnavailable)
	}
	require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM dead_letters`))
	require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM effectively_claims`), "a transient failure claims nothing")
	api.status = 0
	res, err := b.applier.ApplyBatch(context.Background(), batch)
	require.NoError(t, err)
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 1}, res.Counts)
}

// 404: parked until the account exists; other 4xx: dead-lettered with the
// status.
func TestDoorbellNotFoundParksAndRejectedDeadLetters(t *testing.T) {
	t.Parallel()
	b, api := setupDoorbell(t)
	res := b.apply(t, 0, bell("d1", "a1"), ledger("l1", "ledger.credited", "a1", 5, "EUR"))
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Parked: 2}, res.Counts)
	res = b.apply(t, 0, acct("o1", "account.opened", "a1", 1, "ann"))
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 2}, res.Released)
	require.Equal(t, int64(5), b.count(t, `SELECT sum(amount_cents) FROM ledger_entries`))

	api.status = http.StatusForbidden
	res = b.apply(t, 0, bell("d2", "a1"))
	require.Equal(t, 1, res.DeadLetters[accounts.ReasonSourceRejected])
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM dead_letters WHERE reason = 'source_rejected' AND error LIKE '%403%'`))
}
