package console

import (
	"net/netip"
	"sync"
	"time"
)

// Sign-in limits. Each client address (an IPv6 client by its /64, which
// one host usually holds whole) may fail signInClientBurst sign-ins in a
// row, then one more every signInClientEvery; all clients together
// signInGlobalBurst, then one every signInGlobalEvery. Past either, a
// sign-in is answered 429 without its token being checked, so that guesses
// sent faster gain nothing. A successful sign-in spends nothing.
const (
	signInClientBurst = 10
	signInClientEvery = 6 * time.Second
	signInGlobalBurst = 60
	signInGlobalEvery = time.Second
	// maxSignInClients bounds the clients remembered. An entry is dropped
	// once its bucket is full again (a minute after its last failure), and
	// new entries come no faster than the global budget allows, so the
	// bound is reached only by an attacker with a great many addresses —
	// whose guesses the global budget still limits.
	maxSignInClients = 4096
)

// bucket is a token bucket: it holds at most burst tokens and gains one
// every every.
type bucket struct {
	burst  float64
	every  time.Duration
	tokens float64
	at     time.Time // when tokens was brought up to date
}

func newBucket(burst int, every time.Duration) *bucket {
	return &bucket{burst: float64(burst), every: every, tokens: float64(burst)}
}

// refill brings tokens up to date at now (a clock that steps back adds
// nothing).
func (b *bucket) refill(now time.Time) {
	if now.After(b.at) {
		if !b.at.IsZero() {
			b.tokens = min(b.burst, b.tokens+float64(now.Sub(b.at))/float64(b.every))
		}
		b.at = now
	}
}

// wait is how long until the bucket holds a whole token; 0 when it does.
func (b *bucket) wait() time.Duration {
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(b.every))
}

func (b *bucket) full() bool { return b.tokens >= b.burst }

// signInLimiter counts sign-ins per client and in all, spending an attempt
// before its token is checked (concurrent guesses cannot all pass a check
// made before any of them failed) and refunding it when it succeeds.
type signInLimiter struct {
	mu      sync.Mutex
	global  *bucket
	clients map[netip.Prefix]*bucket
}

func newSignInLimiter() *signInLimiter {
	return &signInLimiter{global: newBucket(signInGlobalBurst, signInGlobalEvery), clients: map[netip.Prefix]*bucket{}}
}

// take spends one attempt of client's budget and of the global one, and
// returns 0; when either is spent, it spends nothing and returns how long
// until both allow an attempt.
func (l *signInLimiter) take(client netip.Prefix, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.global.refill(now)
	c := l.clients[client]
	if c == nil {
		c = newBucket(signInClientBurst, signInClientEvery)
	}
	c.refill(now)
	if d := max(l.global.wait(), c.wait()); d > 0 {
		return d
	}
	l.global.tokens--
	c.tokens--
	if _, ok := l.clients[client]; !ok {
		l.remember(client, c, now)
	}
	return 0
}

// remember keeps c for client. At the bound it first drops the clients
// whose budget is whole again, and should that leave more than three
// quarters of the bound, any others down to that: a forgotten client
// starts with a whole budget again, but the global one still holds, and
// the next sweep is a quarter of the bound away (amortised O(1)).
func (l *signInLimiter) remember(client netip.Prefix, c *bucket, now time.Time) {
	if len(l.clients) >= maxSignInClients {
		for k, b := range l.clients {
			if b.refill(now); b.full() {
				delete(l.clients, k)
			}
		}
		for k := range l.clients {
			if len(l.clients) <= maxSignInClients*3/4 {
				break
			}
			delete(l.clients, k)
		}
	}
	l.clients[client] = c
}

// refund gives back the attempt take spent, for a sign-in that succeeded
// (or that failed on the server's side, not the client's).
func (l *signInLimiter) refund(client netip.Prefix, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.global.refill(now)
	l.global.tokens = min(l.global.burst, l.global.tokens+1)
	if c := l.clients[client]; c != nil {
		c.refill(now)
		c.tokens = min(c.burst, c.tokens+1)
		if c.full() {
			delete(l.clients, client)
		}
	}
}

// clientOf is the budget a request's remote address spends: the IPv4
// address, or the IPv6 /64. An address that does not parse (not TCP)
// shares one budget with every other such.
func clientOf(remoteAddr string) netip.Prefix {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return netip.Prefix{}
	}
	ip := ap.Addr().Unmap().WithZone("")
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.Prefix(bits) // cannot fail: bits fits the family
	return p
}
