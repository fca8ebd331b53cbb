// Package apitest is a stand-in for the downstream API a handler's outbox
// calls: it honours Idempotency-Key, counting the calls made under each, so a
// test can assert one effect per key however often the worker retried.
package apitest

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Receiver accepts POSTs to one path that carry an Idempotency-Key and
// answers status; anything else is a 400.
type Receiver struct {
	*httptest.Server
	mu   sync.Mutex
	keys map[string]int
}

// NewReceiver starts a Receiver for POST path, closed when the test ends.
func NewReceiver(t testing.TB, path string, status int) *Receiver {
	r := &Receiver{keys: map[string]int{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		key := req.Header.Get("Idempotency-Key")
		if req.Method != http.MethodPost || req.URL.Path != path || key == "" {
			http.Error(w, "want POST "+path+" with an Idempotency-Key", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.keys[key]++
		r.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(r.Close)
	return r
}

// DistinctKeys is how many idempotency keys were seen.
func (r *Receiver) DistinctKeys() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.keys)
}

// Calls is how many calls were accepted, retries included.
func (r *Receiver) Calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.keys {
		n += c
	}
	return n
}
