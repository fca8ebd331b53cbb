package handlers

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/internal/outbox"
	"github.com/effectively-io/effectively/internal/redact"
)

// PrefetchMaxAttemptsDefault is how many times one event's prefetch
// may fail transiently while its source answers other events (prefetch.max_attempts).
const PrefetchMaxAttemptsDefault = 10

// MaxPrefetchResponseBytes is the most of an answer the prefetch client lets
// a prefetcher read; reading past it fails with ErrResponseTooLarge.
const MaxPrefetchResponseBytes = 1 << 20

// ErrResponseTooLarge is the error of a read past MaxPrefetchResponseBytes:
// the answer is not read whole. A prefetcher treats it as the source's
// fault (a permanent error).
var ErrResponseTooLarge = fmt.Errorf("the answer is larger than %d bytes", MaxPrefetchResponseBytes)

// newPrefetchClient returns the client prefetchers read with when the build
// gives none: timeout per request, no redirects followed (a 3xx comes back
// as the answer: the target's URL is wrong), and bodies cut at
// MaxPrefetchResponseBytes.
func newPrefetchClient(timeout time.Duration) *http.Client {
	return prefetchClient(&http.Client{Timeout: timeout})
}

// prefetchClient is a copy of c that follows no redirect and caps bodies,
// whatever c does.
func prefetchClient(c *http.Client) *http.Client {
	cp := *c
	cp.CheckRedirect = outbox.NoRedirects
	rt := cp.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	cp.Transport = capBodies(rt)
	return &cp
}

// capBodies wraps rt so that answer bodies are cut at
// MaxPrefetchResponseBytes (once: a capped rt is returned as it is).
func capBodies(rt http.RoundTripper) http.RoundTripper {
	if _, ok := rt.(cappedTransport); ok {
		return rt
	}
	return cappedTransport{rt}
}

// cappedTransport cuts answer bodies at MaxPrefetchResponseBytes.
type cappedTransport struct{ rt http.RoundTripper }

func (t cappedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &cappedBody{rc: resp.Body, left: MaxPrefetchResponseBytes}
	return resp, nil
}

type cappedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// At the cap: end of body is fine, one more byte is too many.
		var one [1]byte
		n, err := b.rc.Read(one[:])
		if n > 0 {
			return 0, ErrResponseTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *cappedBody) Close() error { return b.rc.Close() }

// prefetchFailures bounds how long one event's prefetch may keep failing
// transiently, without dead-lettering a whole topic during an outage.
//
// A failure counts against an event only when the same prefetcher (the
// handler of its type) has read another event successfully since that
// event's previous failure: the source answers, just not for this
// resource. Then, after MaxAttempts counted failures, the error becomes
// permanent with reason source_unavailable and the event is dead-lettered
// (a disposition of its own, redrivable; a doorbell loses nothing, since a
// later doorbell for the resource fetches its state again). While the
// source answers nobody (an outage, or the event is alone with no other
// traffic), nothing counts and the batch is retried with backoff, as every
// transient fault is.
//
// The counts live in memory, per process: a restart or a rebalance starts
// them again, which only delays the dead letter.
type prefetchFailures struct {
	max int
	mu  sync.Mutex
	// by event type: one prefetcher, one source (usually).
	scopes map[string]*prefetchScope
}

type prefetchScope struct {
	answered uint64 // prefetches that got an answer (not a transient failure)
	failing  map[string]*prefetchFailure
}

type prefetchFailure struct {
	counted int
	seen    uint64 // answered at the event's last failure
}

// maxTrackedFailures bounds the failing events remembered per prefetcher;
// past it, one is forgotten (its count starts again).
const maxTrackedFailures = 10000

// newPrefetchFailures returns a bound of maxAttempts counted failures per
// event (prefetch.max_attempts; 0 or less means
// PrefetchMaxAttemptsDefault).
func newPrefetchFailures(maxAttempts int) *prefetchFailures {
	if maxAttempts <= 0 {
		maxAttempts = PrefetchMaxAttemptsDefault
	}
	return &prefetchFailures{max: maxAttempts, scopes: map[string]*prefetchScope{}}
}

// observe records the result of ev's prefetch and returns the error to give
// the engine: err itself, or a permanent one once ev's bound is reached.
func (p *prefetchFailures) observe(ctx context.Context, ev event.Event, err error) error {
	if p == nil || (err != nil && ctx.Err() != nil) {
		return err // unbounded, or cancelled (shutdown, revoke): not the source's doing
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.scopes[ev.Type]
	if s == nil {
		s = &prefetchScope{failing: map[string]*prefetchFailure{}}
		p.scopes[ev.Type] = s
	}
	if err == nil || event.IsPermanent(err) {
		s.answered++
		delete(s.failing, ev.Key)
		return err
	}
	f := s.failing[ev.Key]
	if f == nil {
		if len(s.failing) >= maxTrackedFailures {
			for k := range s.failing {
				delete(s.failing, k)
				break
			}
		}
		s.failing[ev.Key] = &prefetchFailure{seen: s.answered}
		return err
	}
	if s.answered > f.seen {
		f.counted++
	}
	f.seen = s.answered
	if f.counted < p.max {
		return err
	}
	delete(s.failing, ev.Key)
	return event.PermanentWithReason(ReasonSourceUnavailable, fmt.Errorf(
		"%w (failed %d times while other %s events were read; prefetch.max_attempts is %d): dlq redrive re-applies it once the source answers",
		err, f.counted+1, event.Excerpt(ev.Type), p.max))
}

// boundedPrefetcher is a prefetching handler as Registry.Handler returns it:
// its transient failures are bounded by the Env's prefetch failures.
type boundedPrefetcher struct {
	Handler
	pf Prefetcher
}

func (b boundedPrefetcher) Prefetch(ctx context.Context, env Env, ev event.Event) (event.Event, error) {
	out, err := b.pf.Prefetch(ctx, env, ev)
	// A prefetcher that read with its own client may return the client's
	// error, whose text holds the whole URL: redacted before it reaches a
	// log, /status or a dead letter.
	return out, env.prefetches.observe(ctx, ev, redact.Error(err))
}
