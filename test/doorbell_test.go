package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/internal/cetest"
	"github.com/effectively-io/effectively/internal/kafkatest"
)

// sourceAPI is the accounts source API, local to the test: it serves each
// account's latest state, counts requests, and can be taken down.
type sourceAPI struct {
	mu       sync.Mutex
	versions map[string]int64
	down     bool
	served   int
	refused  int
}

func (s *sourceAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		s.refused++
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	id := strings.TrimPrefix(r.URL.Path, "/accounts/")
	v, ok := s.versions[id]
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	s.served++
	_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "version": v, "name": fmt.Sprintf("%s-v%d", id, v),
		"email": id + "@example.com", "plan": "pro", "status": "open"})
}

func (s *sourceAPI) set(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
}

// Doorbells (account.refreshed) carry no state: the worker fetches it. Their
// duplicates and disorder converge to the source's latest version; with the
// source down for 20 s under traffic nothing is lost or dead-lettered and
// processing resumes.
func TestDoorbellsConvergeAndSurviveASourceOutage(t *testing.T) {
	t.Parallel()
	api := &sourceAPI{versions: map[string]int64{}}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	r := newRig(t, 2, "EFFECTIVELY_TARGETS_ACCOUNTS_URL="+srv.URL+"/accounts", "EFFECTIVELY_RETRY_MAX=2s")
	cl := kafkatest.Producer(t, kgo.DefaultProduceTopic(r.topic))
	send := func(recs ...*kgo.Record) {
		t.Helper()
		require.NoError(t, cl.ProduceSync(context.Background(), recs...).FirstErr())
	}
	const accounts = 20
	bell := func(i, n int) *kgo.Record {
		return cetest.Record(r.topic, fmt.Sprintf("bell-%d-%d", i, n), "account.refreshed", fmt.Sprintf("acct-%d", i), 0, nil)
	}
	// Round 1: every account at version 3 at the source; doorbells with
	// duplicates.
	api.set(func() {
		for i := 0; i < accounts; i++ {
			api.versions[fmt.Sprintf("acct-%d", i)] = 3
		}
	})
	for i := 0; i < accounts; i++ {
		send(bell(i, 1), bell(i, 1), bell(i, 2))
	}
	w := r.worker(t)
	r.waitApplied(t, 3*accounts, time.Minute)
	require.Equal(t, int64(accounts), r.db.Count(t, `SELECT count(*) FROM accounts WHERE version = 3`))

	// The source goes down; the accounts move on to version 7 meanwhile
	// and doorbells keep arriving, some late (an account event of an older
	// version arrives after them).
	api.set(func() { api.down = true })
	for i := 0; i < accounts; i++ {
		send(bell(i, 3), cetest.Account(r.topic, fmt.Sprintf("old-%d", i), "account.updated", fmt.Sprintf("acct-%d", i), 5, "old"))
	}
	api.set(func() {
		for i := 0; i < accounts; i++ {
			api.versions[fmt.Sprintf("acct-%d", i)] = 7
		}
	})
	time.Sleep(20 * time.Second)
	api.set(func() { api.down = false })
	r.waitApplied(t, 5*accounts, 2*time.Minute)

	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
	api.mu.Lock()
	refused := api.refused
	api.mu.Unlock()
	t.Logf("source refused %d requests during its 20 s outage", refused)
	require.Positive(t, refused, "the outage must have been felt")
	require.Equal(t, int64(accounts), r.db.Count(t, `SELECT count(*) FROM accounts WHERE version = 7`), "converged to the source's latest version")
	require.Equal(t, int64(0), r.db.Count(t, `SELECT count(*) FROM dead_letters`), "nothing dead-lettered for a transient cause")
	require.Equal(t, int64(4*accounts), r.db.Count(t, `SELECT count(*) FROM effectively_claims`), "every distinct event claimed once")
}

// A source that always fails (500) for one account and answers for the
// others does not stop the partition: the failing doorbell is retried while
// its batch-mates are read, then dead-lettered with reason
// source_unavailable after prefetch.max_attempts; the partition moves on
// and a later good record of it is applied.
func TestDoorbellFailingForOneAccountDoesNotStopThePartition(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	badCalls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimPrefix(r.URL.Path, "/accounts/")
		if id == "acct-bad" {
			mu.Lock()
			badCalls++
			mu.Unlock()
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "version": 1, "name": id,
			"email": id + "@example.com", "plan": "pro", "status": "open"})
	}))
	t.Cleanup(srv.Close)
	r := newRig(t, 1, "EFFECTIVELY_TARGETS_ACCOUNTS_URL="+srv.URL+"/accounts",
		"EFFECTIVELY_PREFETCH_MAX_ATTEMPTS=3", "EFFECTIVELY_RETRY_MAX=1s")
	cl := kafkatest.Producer(t, kgo.DefaultProduceTopic(r.topic))
	bell := func(id, account string) *kgo.Record {
		return cetest.Record(r.topic, id, "account.refreshed", account, 0, nil)
	}
	// One produce call, produced before the worker starts: the failing
	// doorbell and its batch-mates are read in one batch.
	require.NoError(t, cl.ProduceSync(context.Background(),
		bell("bell-1", "acct-1"), bell("bell-bad", "acct-bad"), bell("bell-2", "acct-2"), bell("bell-3", "acct-3")).FirstErr())
	w := r.worker(t)
	r.waitApplied(t, 4, 2*time.Minute)
	require.Equal(t, int64(1), r.db.Count(t,
		`SELECT count(*) FROM dead_letters WHERE reason = 'source_unavailable' AND "offset" = 1 AND error LIKE '%500 Internal Server Error%'`))
	require.Equal(t, int64(3), r.db.Count(t, `SELECT count(*) FROM accounts WHERE id IN ('acct-1', 'acct-2', 'acct-3')`))

	// The partition keeps moving: the next good record is applied.
	require.NoError(t, cl.ProduceSync(context.Background(), bell("bell-4", "acct-4")).FirstErr())
	r.waitApplied(t, 5, 2*time.Minute)
	require.Equal(t, int64(1), r.db.Count(t, `SELECT count(*) FROM accounts WHERE id = 'acct-4'`))

	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, badCalls, 4, "one uncounted failure, then three counted ones")
	require.Equal(t, int64(1), r.db.Count(t, `SELECT count(*) FROM dead_letters`))
	require.Equal(t, int64(4), r.db.Count(t, `SELECT count(*) FROM effectively_claims WHERE disposition = 'applied'`))
}
