// Package deadline bounds how long a connection waits without progress, so
// that a link that takes bytes and never answers (a half-open TCP
// connection, a peer whose process hangs, a firewall that drops silently)
// turns into a connection error, and then a reconnect, within a bounded
// time instead of a goroutine that waits forever.
//
// TCP keep-alives do not catch these: a proxy or a hung peer's kernel still
// acknowledges every segment. Statement timeouts do not either: the server
// never sees the statement. Only the client knows it is waiting.
//
// The bound is on progress, not on the whole exchange: a read fails when no
// byte arrived for d since it began, a write when no chunk of it was taken
// for d. A slow link that moves bytes is not cut; a request whose answer
// takes longer than d to begin is — for PostgreSQL, that includes a
// pipeline of statements whose results the server sends only at its end.
// It suits request–response protocols: a connection that waits for
// unsolicited messages (LISTEN) must not be guarded.
package deadline

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Conn enforces the progress bound on a net.Conn. Deadlines the caller
// sets (pgx sets them from a context) still apply: the earlier of the two
// wins.
type Conn struct {
	net.Conn
	d    time.Duration
	peer string

	mu                  sync.Mutex
	userRead, userWrite time.Time // the caller's own deadlines
	ownRead, ownWrite   time.Time // the progress bound of the read and write under way
	// gone is the bound's error once it passed: the connection is given
	// up, and every later read or write fails at once (pgx retries a
	// timed-out read once before it closes the connection).
	gone error
}

// Guard wraps conn. d must be positive; peer names the other side in the
// timeout's error (e.g. "PostgreSQL (postgres.answer_timeout)").
func Guard(conn net.Conn, d time.Duration, peer string) *Conn {
	return &Conn{Conn: conn, d: d, peer: peer}
}

// Dialer wraps a dial function so that every connection it makes is
// guarded — beneath TLS, so the handshake is bounded too and TLS sees the
// connection it dialled (PostgreSQL's SCRAM channel binding needs the
// *tls.Conn itself). A nil dial uses net.Dialer.
func Dialer(d time.Duration, peer string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if dial == nil {
		dial = (&net.Dialer{KeepAlive: 15 * time.Second}).DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return Guard(conn, d, peer), nil
	}
}

// writeChunk is how much of a write is given to the connection at a time:
// each chunk taken is progress.
const writeChunk = 32 << 10

// Write writes p a chunk at a time, each within the bound.
func (c *Conn) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		end := min(len(p), n+writeChunk)
		c.mu.Lock()
		if c.gone != nil {
			c.mu.Unlock()
			return n, c.gone
		}
		c.ownWrite = time.Now().Add(c.d)
		err := c.Conn.SetWriteDeadline(earliest(c.userWrite, c.ownWrite))
		c.mu.Unlock()
		if err != nil {
			return n, err
		}
		m, err := c.Conn.Write(p[n:end])
		n += m
		if err != nil {
			return n, c.explain(err, false)
		}
	}
	return n, nil
}

// Read waits at most d for the first byte.
func (c *Conn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if c.gone != nil {
		c.mu.Unlock()
		return 0, c.gone
	}
	c.ownRead = time.Now().Add(c.d)
	err := c.Conn.SetReadDeadline(earliest(c.userRead, c.ownRead))
	c.mu.Unlock()
	if err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(p)
	return n, c.explain(err, true)
}

// explain names a timeout that is the progress bound's doing.
func (c *Conn) explain(err error, read bool) error {
	var ne net.Error
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	own, user := c.ownWrite, c.userWrite
	if read {
		own, user = c.ownRead, c.userRead
	}
	if time.Now().Before(own) || (!user.IsZero() && user.Before(own)) {
		return err // the caller's deadline
	}
	c.gone = &TimeoutError{After: c.d, Peer: c.peer}
	return c.gone
}

// SetDeadline sets the caller's read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.userRead, c.userWrite = t, t
	if err := c.Conn.SetReadDeadline(earliest(t, c.ownRead)); err != nil {
		return err
	}
	return c.Conn.SetWriteDeadline(earliest(t, c.ownWrite))
}

// SetReadDeadline sets the caller's read deadline.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.userRead = t
	return c.Conn.SetReadDeadline(earliest(t, c.ownRead))
}

// SetWriteDeadline sets the caller's write deadline.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.userWrite = t
	return c.Conn.SetWriteDeadline(earliest(t, c.ownWrite))
}

// TimeoutError is the error of a read or write that made no progress for
// After. It is a net.Error whose Timeout is true, so callers that retry on
// timeouts retry on it.
type TimeoutError struct {
	After time.Duration
	Peer  string
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("no answer from %s within %s: the link is cut or half-open, or the server hangs; the connection is dropped and made again", e.Peer, e.After)
}

// Timeout reports true.
func (e *TimeoutError) Timeout() bool { return true }

// Temporary reports true.
func (e *TimeoutError) Temporary() bool { return true }

// earliest is the earlier of two deadlines, zero meaning none.
func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}
