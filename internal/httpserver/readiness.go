package httpserver

import (
	"context"
	"sync"
	"time"
)

// checkTimeout bounds one evaluation of the readiness checks.
const checkTimeout = 2 * time.Second

// readiness runs the checks at most once per maxAge and hands every probe in
// between the last result. The evaluation holds mu, so probes that arrive
// while it runs wait for it and share its result instead of starting their
// own: N concurrent probes cost one ping of the pool, not N.
type readiness struct {
	checks []Check
	maxAge time.Duration
	now    func() time.Time

	mu     sync.Mutex
	at     time.Time // when the cached result's evaluation started; zero: none yet
	ready  bool
	status map[string]string // check name → "ok" or why not; never modified once cached
}

func newReadiness(checks []Check, maxAge time.Duration) *readiness {
	return &readiness{checks: checks, maxAge: maxAge, now: time.Now}
}

// get returns whether the worker is ready and each check's answer, at most
// maxAge old.
func (r *readiness) get(ctx context.Context) (bool, map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if !r.at.IsZero() && now.Sub(r.at) < r.maxAge {
		return r.ready, r.status
	}
	// The result is shared, so one probe giving up must not fail it for
	// the others: the checks run detached from the probe's cancellation.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), checkTimeout)
	defer cancel()
	ready, status := true, make(map[string]string, len(r.checks))
	for _, c := range r.checks {
		if err := c.Func(ctx); err != nil {
			status[c.Name] = err.Error()
			ready = ready && c.Advisory
		} else {
			status[c.Name] = "ok"
		}
	}
	r.at, r.ready, r.status = now, ready, status
	return ready, status
}
