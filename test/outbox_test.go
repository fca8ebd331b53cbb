package test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/workload"
)

// effectsServer is a local CRM or mail API that counts what it receives.
type effectsServer struct {
	mu sync.Mutex
	// keys: idempotency key → requests carrying it; byPath: path → requests.
	keys   map[string]int
	byPath map[string]int
	// failFirst makes the first request of each key fail with 500.
	failFirst bool
}

func newEffectsServer(t *testing.T, failFirst bool) (*effectsServer, string) {
	t.Helper()
	s := &effectsServer{keys: map[string]int{}, byPath: map[string]int{}, failFirst: failFirst}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv.URL
}

func (s *effectsServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := r.Header.Get("Idempotency-Key")
	s.keys[k]++
	if s.failFirst && k != "" && s.keys[k] == 1 {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	s.byPath[r.URL.Path]++
	w.WriteHeader(http.StatusOK)
}

func (s *effectsServer) snapshot() (keys, paths map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys, paths = map[string]int{}, map[string]int{}
	for k, v := range s.keys {
		keys[k] = v
	}
	for k, v := range s.byPath {
		paths[k] = v
	}
	return keys, paths
}

// Side effects of account.opened leave through the outbox: the CRM sees one
// idempotency key per opened account (a retry after a 500 carries the same
// key), the mail API one welcome mail per account, and producing every
// event again sends nothing more to either.
func TestSideEffectsLeaveOnce(t *testing.T) {
	t.Parallel()
	crm, crmURL := newEffectsServer(t, true)
	mail, mailURL := newEffectsServer(t, false)
	r := newRig(t, 3, "EFFECTIVELY_EFFECTS_CRM_URL="+crmURL, "EFFECTIVELY_EFFECTS_MAIL_URL="+mailURL+"/welcome",
		"EFFECTIVELY_RETRY_INITIAL=50ms", "EFFECTIVELY_RETRY_MAX=500ms")
	cfg := workload.Config{Accounts: 60, Events: 1500, Duplicates: 0.1, OutOfOrder: 0.1, Seed: 41}
	exp := r.produce(t, cfg)
	opened := exp.ByType[workload.TypeAccountOpened]
	w := r.worker(t)
	r.waitApplied(t, exp.Records, 2*time.Minute)
	drained := func(context.Context) bool {
		return r.db.Count(t, `SELECT count(*) FROM outbox WHERE state <> 'sent'`) == 0 &&
			r.db.Count(t, `SELECT count(*) FROM outbox`) == int64(2*opened)
	}
	waitUntil(t, "the outbox delivered", time.Minute, drained)

	check := func() {
		t.Helper()
		keys, paths := crm.snapshot()
		delete(keys, "")
		require.Len(t, keys, opened, "one idempotency key per opened account")
		retried := 0
		for _, n := range keys {
			require.LessOrEqual(t, n, 3)
			if n > 1 {
				retried++
			}
		}
		require.Equal(t, opened, retried, "each contact's 500 was retried with the same key")
		require.Len(t, paths, opened, "one contact per account")
		for p := range paths {
			require.True(t, strings.HasPrefix(p, "/contacts/acct-"), p)
		}
		mkeys, mpaths := mail.snapshot()
		require.Equal(t, map[string]int{"": opened}, mkeys, "no idempotency key on mail: its API has none")
		require.Equal(t, map[string]int{"/welcome": opened}, mpaths, "exactly one welcome mail per opened account")
	}
	check()

	// Every event again: all duplicates, nothing more leaves.
	r.produce(t, cfg)
	r.waitApplied(t, 2*exp.Records, 2*time.Minute)
	time.Sleep(2 * time.Second) // a dispatcher round or more
	check()
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
	r.verify(t, exp)
}
