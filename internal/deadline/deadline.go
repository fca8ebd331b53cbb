// Package deadline bounds how long a connection waits for its peer to
// answer, so that a link that takes bytes and never answers (a half-open
// TCP connection, a peer whose process hangs, a firewall that drops
// silently) turns into a connection error, and then a reconnect, within a
// bounded time instead of a goroutine that waits forever.
//
// TCP keep-alives do not catch these: a proxy or a hung peer's kernel still
// acknowledges every segment. Statement timeouts do not either: the server
// never sees the statement. Only the client knows it is waiting.
package deadline

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Conn arms a deadline of d each time the client writes (a request is out,
// an answer is due) and pushes it forward each time bytes arrive (the
// answer is coming). A connection idle in a pool reads nothing, so the
// deadline that passed meanwhile harms nothing; the next request arms a new
// one. Deadlines the caller sets (pgx sets them from a context) still
// apply: the earlier of the two wins.
type Conn struct {
	net.Conn
	d    time.Duration
	peer string

	mu                  sync.Mutex
	armed               time.Time // when the pending answer is overdue; zero until the first write
	userRead, userWrite time.Time // the caller's own deadlines
}

// Guard wraps conn. d must be positive; peer names the other side in the
// timeout's error (e.g. "PostgreSQL (postgres.answer_timeout)").
func Guard(conn net.Conn, d time.Duration, peer string) *Conn {
	return &Conn{Conn: conn, d: d, peer: peer}
}

// AfterNetConnect is a pgconn.Config.AfterNetConnect hook that guards every
// connection of a pool (after TLS, before the start-up message, so a server
// that never answers the start-up is caught too). It chains to next when
// not nil.
func AfterNetConnect(d time.Duration, peer string, next func(context.Context, *pgconn.Config, net.Conn) (net.Conn, error)) func(context.Context, *pgconn.Config, net.Conn) (net.Conn, error) {
	return func(ctx context.Context, cfg *pgconn.Config, conn net.Conn) (net.Conn, error) {
		if next != nil {
			var err error
			if conn, err = next(ctx, cfg, conn); err != nil {
				return nil, err
			}
		}
		return Guard(conn, d, peer), nil
	}
}

// Write arms the answer deadline.
func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.armed = time.Now().Add(c.d)
	err := c.Conn.SetWriteDeadline(earliest(c.userWrite, c.armed))
	if err == nil {
		err = c.Conn.SetReadDeadline(earliest(c.userRead, c.armed))
	}
	c.mu.Unlock()
	if err != nil {
		return 0, err
	}
	n, err := c.Conn.Write(p)
	return n, c.explain(err)
}

// Read waits at most until the answer deadline; bytes arriving push it on.
func (c *Conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		if !c.armed.IsZero() {
			c.armed = time.Now().Add(c.d)
			_ = c.Conn.SetReadDeadline(earliest(c.userRead, c.armed))
		}
		c.mu.Unlock()
	}
	return n, c.explain(err)
}

// explain names a timeout that is the answer deadline's doing.
func (c *Conn) explain(err error) error {
	var ne net.Error
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed.IsZero() || time.Now().Before(c.armed) {
		return err // the caller's deadline
	}
	return &TimeoutError{After: c.d, Peer: c.peer}
}

// TimeoutError is the error of a request left unanswered for After. It is
// a net.Error whose Timeout is true, so callers that retry on timeouts
// retry on it.
type TimeoutError struct {
	After time.Duration
	Peer  string
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("no answer from %s within %s: the link is cut or half-open; the connection is dropped and made again", e.Peer, e.After)
}

// Timeout reports true.
func (e *TimeoutError) Timeout() bool { return true }

// Temporary reports true.
func (e *TimeoutError) Temporary() bool { return true }

// SetDeadline sets the caller's read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.userRead, c.userWrite = t, t
	if err := c.Conn.SetReadDeadline(earliest(t, c.armed)); err != nil {
		return err
	}
	return c.Conn.SetWriteDeadline(earliest(t, c.armed))
}

// SetReadDeadline sets the caller's read deadline.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.userRead = t
	return c.Conn.SetReadDeadline(earliest(t, c.armed))
}

// SetWriteDeadline sets the caller's write deadline.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.userWrite = t
	return c.Conn.SetWriteDeadline(earliest(t, c.armed))
}

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
