package accounts_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/examples/accounts"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/consumer"
	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/handling"
	"github.com/effectively-io/effectively/internal/outbox"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/internal/pipeline"
)

// setupSource is a doorbell applier on a source served by h, with a bound
// of maxAttempts counted failures per event.
func setupSource(t *testing.T, h http.Handler, maxAttempts int) *bundle {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	db := pgtest.New(t, accounts.Migrations())
	dec, err := event.NewDecoder(event.DecoderConfig{Topic: topic})
	require.NoError(t, err)
	reg := registry()
	env := handling.Of(reg).Env(map[string]outbox.Endpoint{accounts.TargetSource: {URL: srv.URL + "/accounts"}}, outbox.Expiry{}, nil, maxAttempts)
	a := pipeline.NewApplier(db.Pool, pipeline.Options{
		Decoders: map[string]*event.Decoder{topic: dec}, Handlers: reg, Env: env, Logger: zaptest.NewLogger(t),
	})
	return &bundle{db: db, applier: a, offsets: map[int32]int64{}}
}

// account answers a source account of version 1 named after its id.
func account(w http.ResponseWriter, id string) {
	_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "version": 1, "name": id, "email": id + "@example.com", "plan": "pro", "status": "open"})
}

// batchOf places recs at offsets 0.. of partition 0.
func batchOf(recs ...*kgo.Record) consumer.Batch {
	for i, r := range recs {
		r.Partition, r.Offset = 0, int64(i)
	}
	return consumer.Batch{Group: "g", Topic: topic, Partition: 0, Records: recs}
}

// A source that always fails for one account and answers for the others:
// the batch is retried while the failures are counted, then the failing
// doorbell is dead-lettered with reason source_unavailable and its
// batch-mates apply.
func TestDoorbellFailingForOneAccountIsDeadLetteredAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	var badCalls atomic.Int64
	b := setupSource(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimPrefix(r.URL.Path, "/accounts/")
		if id == "bad" {
			badCalls.Add(1)
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		account(w, id)
	}), 3)
	batch := batchOf(bell("d1", "good1"), bell("d2", "bad"), bell("d3", "good2"))

	var (
		res      pipeline.Result
		err      error
		failures int
	)
	for range 20 { // a hang guard: the bound is 3
		res, err = b.applier.ApplyBatch(context.Background(), batch)
		if err == nil {
			break
		}
		require.ErrorIs(t, err, accounts.ErrSourceUnavailable)
		require.False(t, event.IsPermanent(err))
		failures++
	}
	require.NoError(t, err)
	// The first failure is not counted; three counted ones follow. A round
	// whose batch-mates were all read after the failing one counts in the
	// next round instead, so up to 2 × 3 + 1 failures.
	require.GreaterOrEqual(t, failures, 3)
	require.LessOrEqual(t, failures, 7)
	require.EqualValues(t, failures+1, badCalls.Load())
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 2, dedupe.DeadLettered: 1}, res.Counts)
	require.Equal(t, 1, res.DeadLetters[handlers.ReasonSourceUnavailable])
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM dead_letters WHERE reason = 'source_unavailable' AND error LIKE '%500 Internal Server Error%'`))
	require.EqualValues(t, 1, b.version(t, "good1"))
	require.EqualValues(t, 1, b.version(t, "good2"))
}

// During an outage (the source answers nobody) nothing is counted: the
// batch fails transiently however often it is tried, and applies once the
// source is back.
func TestDoorbellOutageIsNeverDeadLettered(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	down.Store(true)
	b := setupSource(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		account(w, strings.TrimPrefix(r.URL.Path, "/accounts/"))
	}), 2)
	batch := batchOf(bell("d1", "a1"), bell("d2", "a2"))
	for range 10 {
		_, err := b.applier.ApplyBatch(context.Background(), batch)
		require.ErrorIs(t, err, accounts.ErrSourceUnavailable)
		require.False(t, event.IsPermanent(err))
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM dead_letters`))
	down.Store(false)
	res, err := b.applier.ApplyBatch(context.Background(), batch)
	require.NoError(t, err)
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 2}, res.Counts)
}

// A redirect is not followed: the doorbell is dead-lettered with reason
// source_redirect and the Location, and the other host receives nothing.
func TestDoorbellRedirectIsDeadLettered(t *testing.T) {
	t.Parallel()
	var elsewhereCalls atomic.Int64
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhereCalls.Add(1)
		account(w, strings.TrimPrefix(r.URL.Path, "/accounts/"))
	}))
	t.Cleanup(elsewhere.Close)
	b := setupSource(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+r.URL.Path, http.StatusFound)
	}), 3)
	res := b.apply(t, 0, bell("d1", "a1"))
	require.Equal(t, 1, res.DeadLetters[accounts.ReasonSourceRedirect])
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM dead_letters WHERE reason = 'source_redirect' AND error LIKE $1`,
		`%302 Found: redirected to "`+elsewhere.URL+`/accounts/a1"%`))
	require.Zero(t, elsewhereCalls.Load())
}

// An answer larger than the prefetch cap is not read whole: the doorbell is
// dead-lettered with reason source_invalid.
func TestDoorbellHugeAnswerIsCut(t *testing.T) {
	t.Parallel()
	b := setupSource(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(strings.Repeat(" ", 64<<10))
		_, _ = w.Write([]byte(`{"id":"a1",`))
		for range 64 { // 4 MiB of spaces
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}), 3)
	res := b.apply(t, 0, bell("d1", "a1"))
	require.Equal(t, 1, res.DeadLetters[accounts.ReasonSourceInvalid])
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM dead_letters WHERE reason = 'source_invalid' AND error LIKE '%larger than 1048576 bytes%'`))
}
