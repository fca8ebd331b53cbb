package deadline_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/internal/deadline"
	"github.com/effectively-io/effectively/internal/pgtest"
)

// blackhole forwards TCP to upstream until swallow is set: then bytes in
// either direction are read and dropped, and nothing is closed — a
// half-open link as a hung peer or a silent firewall makes it.
type blackhole struct {
	ln      net.Listener
	swallow atomic.Bool
}

func newBlackhole(t *testing.T, upstream string) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b := &blackhole{ln: ln}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 && !b.swallow.Load() {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				_ = dst.Close()
				return
			}
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				_ = c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, up)
			mu.Unlock()
			wg.Add(2)
			go pipe(up, c)
			go pipe(c, up)
		}
	}()
	return b
}

// through points url at the blackhole and guards the connection with d.
func through(t *testing.T, dbURL string, b *blackhole, d time.Duration) *pgx.ConnConfig {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	u.Host = b.ln.Addr().String()
	cfg, err := pgx.ParseConfig(u.String())
	require.NoError(t, err)
	cfg.DialFunc = deadline.Dialer(d, "PostgreSQL (test)", cfg.DialFunc)
	return cfg
}

func TestAnswerDeadline(t *testing.T) {
	db := pgtest.NewEmpty(t)
	b := newBlackhole(t, db.Pool.Config().ConnConfig.Host+":"+strconv.Itoa(int(db.Pool.Config().ConnConfig.Port)))
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, through(t, db.URL, b, 2*time.Second))
	require.NoError(t, err)
	defer conn.Close(ctx)

	var one int
	require.NoError(t, conn.QueryRow(ctx, `SELECT 1`).Scan(&one))
	// Idle past the bound: nothing was due, nothing fails.
	time.Sleep(2500 * time.Millisecond)
	require.NoError(t, conn.QueryRow(ctx, `SELECT 1`).Scan(&one))
	// A slow answer inside the bound is an answer.
	_, err = conn.Exec(ctx, `SELECT pg_sleep(0.5)`)
	require.NoError(t, err)
	// The caller's own deadline still applies, and first.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = conn.Exec(short, `SELECT pg_sleep(5)`)
	cancel()
	require.Error(t, err)
	var te *deadline.TimeoutError
	require.False(t, errors.As(err, &te), "the caller's deadline is not the answer deadline: %v", err)

	// The link goes silent: the request is taken, no answer comes.
	conn2, err := pgx.ConnectConfig(ctx, through(t, db.URL, b, time.Second))
	require.NoError(t, err)
	b.swallow.Store(true)
	began := time.Now()
	err = conn2.QueryRow(ctx, `SELECT 1`).Scan(&one)
	waited := time.Since(began)
	require.Error(t, err)
	require.True(t, errors.As(err, &te), "want the answer deadline's error, got %v", err)
	require.Contains(t, err.Error(), "no answer from PostgreSQL (test) within 1s")
	require.Less(t, waited, 10*time.Second, "bounded by the answer deadline (a hang guard, not a timing assertion)")
	require.True(t, conn2.IsClosed(), "a connection whose answer never came is not reused")

	// A server that never answers the start-up is caught too.
	dead, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = pgx.ConnectConfig(dead, through(t, db.URL, b, time.Second))
	require.True(t, errors.As(err, &te), "start-up unanswered: %v", err)
	require.NoError(t, dead.Err(), "the answer deadline ended it, not the hang guard")
}

// A pool whose connections went silent reconnects once the link heals.
func TestPoolRecoversAfterSilence(t *testing.T) {
	db := pgtest.NewEmpty(t)
	b := newBlackhole(t, db.Pool.Config().ConnConfig.Host+":"+strconv.Itoa(int(db.Pool.Config().ConnConfig.Port)))
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	pc.ConnConfig = through(t, db.URL, b, time.Second)
	pc.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `SELECT 1`)
	require.NoError(t, err)
	b.swallow.Store(true)
	failed := 0
	for range 2 {
		if _, err := pool.Exec(ctx, `SELECT 1`); err != nil {
			failed++
		}
	}
	require.Equal(t, 2, failed, "every request on the silent link fails (none hangs)")
	b.swallow.Store(false)
	_, err = pool.Exec(ctx, `SELECT 1`)
	require.NoError(t, err, "the pool made a new connection")
}

// The bound is on progress: a client that takes its time between reads of
// an answer already sent is not cut, and a read that gets no byte is.
func TestBoundIsOnProgress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write(make([]byte, 64<<10))
		time.Sleep(10 * time.Second) // then silence
	}()
	dial := deadline.Dialer(500*time.Millisecond, "the test server", nil)
	conn, err := dial(context.Background(), "tcp", ln.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	buf := make([]byte, 1024)
	got := 0
	for got < 64<<10 {
		n, err := conn.Read(buf)
		require.NoError(t, err, "after %d bytes", got)
		got += n
		if got == n {
			time.Sleep(time.Second) // the client thinks, longer than the bound
		}
	}
	_, err = conn.Read(buf)
	var te *deadline.TimeoutError
	require.True(t, errors.As(err, &te), "no byte for the bound: %v", err)
	require.Contains(t, err.Error(), "no answer from the test server within 500ms")
	// The connection is given up: later reads and writes fail at once.
	began := time.Now()
	_, err = conn.Read(buf)
	require.True(t, errors.As(err, &te))
	_, err = conn.Write([]byte("x"))
	require.True(t, errors.As(err, &te))
	require.Less(t, time.Since(began), 400*time.Millisecond, "no second wait (a hang guard)")
}
