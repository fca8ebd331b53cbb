package test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/internal/pgtest"
)

// The lab's faults as a peer sees them, on a TCP server of the test's own:
// what cut does to an open connection, what halfOpen and its heal do, and
// the COMMIT toxic on a CommandComplete split across two reads.
func TestNetLabSemantics(t *testing.T) {
	t.Parallel()
	lab := newNetLab(t)
	srv := newScriptServer(t)
	k := lab.link(t, "script", srv.addr)

	// cut: the open connection ends at once, a new one is refused.
	c := dialLink(t, k)
	srv.accept(t)
	k.cut()
	start := time.Now()
	_, err := readAll(c, 5*time.Second)
	require.NoError(t, err, "the open connection is closed, not left hanging")
	require.Less(t, time.Since(start), time.Second)
	_, err = net.DialTimeout("tcp", k.Addr, time.Second)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	k.heal()
	k.heal() // idempotent
	c = dialLink(t, k)
	sc := srv.accept(t)
	say(t, sc, []byte("hello"))
	got, err := readAll(c, 300*time.Millisecond)
	require.ErrorIs(t, err, errReadTimeout)
	require.Equal(t, "hello", string(got))

	// halfOpen: bytes vanish both ways, the connection stays open; heal
	// closes it rather than deliver what it swallowed.
	k.halfOpen()
	say(t, sc, []byte("swallowed"))
	say(t, c, []byte("swallowed too"))
	got, err = readAll(c, time.Second)
	require.ErrorIs(t, err, errReadTimeout, "a half-open link neither answers nor closes")
	require.Empty(t, got)
	got, err = readAll(sc, 100*time.Millisecond)
	require.ErrorIs(t, err, errReadTimeout)
	require.Empty(t, got)
	k.heal()
	got, err = readAll(c, 5*time.Second)
	require.NoError(t, err, "heal ends the connection the timeout toxic held")
	require.Empty(t, got, "the swallowed bytes are not released")
	got, err = readAll(sc, 5*time.Second)
	require.NoError(t, err)
	require.Empty(t, got)

	// The COMMIT answer split across two reads: nothing of it reaches the
	// client, the bytes before it do.
	k.dropCommitAnswers(false)
	c = dialLink(t, k)
	sc = srv.accept(t)
	say(t, sc, []byte("before"), pgCommitComplete[:3])
	time.Sleep(5 * time.Millisecond) // two reads at the proxy, within pgHoldBack
	say(t, sc, pgCommitComplete[3:], []byte("Z\x00\x00\x00\x05I"))
	got, err = readAll(c, 5*time.Second)
	require.NoError(t, err, "the connection is closed after the drop")
	require.Equal(t, "before", string(got))
	require.Equal(t, int64(1), k.commitAnswersDropped())
	// The rest later than pgHoldBack: its start has gone out, the rest of
	// the message is dropped all the same.
	c = dialLink(t, k)
	sc = srv.accept(t)
	say(t, sc, []byte("before"), pgCommitComplete[:3])
	time.Sleep(3 * pgHoldBack)
	say(t, sc, pgCommitComplete[3:], []byte("Z\x00\x00\x00\x05I"))
	got, err = readAll(c, 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "before"+string(pgCommitComplete[:3]), string(got))
	require.Equal(t, int64(2), k.commitAnswersDropped())
	// A chunk that ends like the start of the message is held back only
	// briefly when the rest does not follow.
	c = dialLink(t, k)
	sc = srv.accept(t)
	say(t, sc, []byte("ends in C"))
	got, err = readAll(c, 500*time.Millisecond)
	require.ErrorIs(t, err, errReadTimeout)
	require.Equal(t, "ends in C", string(got))
	require.Equal(t, int64(2), k.commitAnswersDropped())
	k.heal()

	// Held: the connection stays open and silent after the drop; heal
	// closes it, and only it.
	k.dropCommitAnswers(true)
	held, other := dialLink(t, k), dialLink(t, k)
	heldServer, otherServer := srv.accept(t), srv.accept(t)
	say(t, heldServer, pgCommitComplete, []byte("Z\x00\x00\x00\x05I"))
	got, err = readAll(held, 300*time.Millisecond)
	require.ErrorIs(t, err, errReadTimeout, "held open")
	require.Empty(t, got)
	require.Equal(t, int64(3), k.commitAnswersDropped())
	k.heal()
	got, err = readAll(held, 5*time.Second)
	require.NoError(t, err, "heal ends the held connection")
	require.Empty(t, got)
	say(t, otherServer, []byte("still here"))
	got, err = readAll(other, 300*time.Millisecond)
	require.ErrorIs(t, err, errReadTimeout)
	require.Equal(t, "still here", string(got), "a connection that saw no COMMIT carries on")
}

// PostgreSQL through a link: a COMMIT whose answer is dropped committed all
// the same; half-open and cut links fail the client by its deadline or at
// once; heal restores each.
func TestNetLabPostgres(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `CREATE TABLE netlab (id int PRIMARY KEY)`)
	require.NoError(t, err)
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	lab := newNetLab(t)
	k := lab.link(t, "pg", u.Host)
	u.Host = k.Addr
	viaLink := u.String()
	connect := func(guard time.Duration) (*pgx.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, guard)
		defer cancel()
		conn, err := pgx.Connect(ctx, viaLink)
		if err == nil {
			t.Cleanup(func() { _ = conn.Close(context.Background()) })
		}
		return conn, err
	}
	insert := func(conn *pgx.Conn, id int, commitGuard time.Duration) error {
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `INSERT INTO netlab VALUES ($1)`, id)
		require.NoError(t, err)
		cctx, cancel := context.WithTimeout(ctx, commitGuard)
		defer cancel()
		return tx.Commit(cctx)
	}
	rows := func() int64 { return db.Count(t, `SELECT count(*) FROM netlab`) }

	// The COMMIT answer dropped, the connection closed.
	conn, err := connect(10 * time.Second)
	require.NoError(t, err)
	k.dropCommitAnswers(false)
	start := time.Now()
	err = insert(conn, 1, 10*time.Second)
	require.Error(t, err, "the client never learns its COMMIT succeeded")
	require.Less(t, time.Since(start), 5*time.Second, "the connection ends at once: %v", err)
	require.Equal(t, int64(1), rows(), "the server committed")
	require.Equal(t, int64(1), k.commitAnswersDropped())
	k.heal()

	// The COMMIT answer dropped, the connection held open and silent.
	conn, err = connect(10 * time.Second)
	require.NoError(t, err)
	k.dropCommitAnswers(true)
	start = time.Now()
	err = insert(conn, 2, 3*time.Second)
	waited := time.Since(start)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the client gives up by its deadline")
	require.GreaterOrEqual(t, waited, 3*time.Second)
	require.Equal(t, int64(2), rows())
	require.Equal(t, int64(2), k.commitAnswersDropped())
	k.heal()
	conn, err = connect(10 * time.Second)
	require.NoError(t, err, "a new connection through the healed link")
	var n int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM netlab`).Scan(&n))
	require.Equal(t, int64(2), n)

	// Half-open: the query fails by its deadline; after heal a new
	// connection works.
	k.halfOpen()
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err = conn.QueryRow(qctx, `SELECT 1`).Scan(&n)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	k.heal()
	conn, err = connect(10 * time.Second)
	require.NoError(t, err)
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM netlab`).Scan(&n))
	require.Equal(t, int64(2), n)

	// Cut: the open connection fails at once, a new one is refused.
	k.cut()
	start = time.Now()
	qctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	err = conn.QueryRow(qctx, `SELECT 1`).Scan(&n)
	cancel()
	require.Error(t, err)
	require.NotErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 5*time.Second)
	_, err = connect(5 * time.Second)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	k.heal()
	conn, err = connect(10 * time.Second)
	require.NoError(t, err)
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM netlab`).Scan(&n))
	require.Equal(t, int64(2), n)
	require.Equal(t, int64(2), k.commitAnswersDropped())
}

// A broker with a proxied listener per client: every connection client 0
// makes crosses its own link (cutting it stops client 0, not client 1),
// because the broker advertises the link's address.
func TestNetLabKafka(t *testing.T) {
	t.Parallel()
	lab := newNetLab(t)
	admin, perClient, links, _ := ownKafkaProxied(t, lab, 2)
	ctx := context.Background()
	topic := "netlab"
	resp, err := kadmOn(t, admin).CreateTopic(ctx, 1, 1, nil, topic)
	require.NoError(t, err)
	require.NoError(t, resp.Err)
	client := func(i int) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(perClient[i]...), kgo.DefaultProduceTopic(topic),
			kgo.ConsumeTopics(topic), kgo.RetryBackoffFn(func(int) time.Duration { return 200 * time.Millisecond }))
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		return cl
	}
	produce := func(cl *kgo.Client, value string, guard time.Duration) error {
		ctx, cancel := context.WithTimeout(ctx, guard)
		defer cancel()
		return cl.ProduceSync(ctx, &kgo.Record{Value: []byte(value)}).FirstErr()
	}

	c0 := client(0)
	require.NoError(t, produce(c0, "c0-first", 30*time.Second))
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	fs := c0.PollFetches(pctx)
	cancel()
	require.NoError(t, fs.Err())
	require.Equal(t, 1, fs.NumRecords())
	require.Equal(t, "c0-first", string(fs.Records()[0].Value))
	meta, err := kadm.NewClient(c0).BrokerMetadata(ctx)
	require.NoError(t, err)
	require.Len(t, meta.Brokers, 1)
	require.Equal(t, links[0].Addr, net.JoinHostPort(meta.Brokers[0].Host, strconv.Itoa(int(meta.Brokers[0].Port))),
		"client 0 is told the broker is at its link")

	links[0].cut()
	c1 := client(1)
	require.NoError(t, produce(c1, "c1-during-cut", 30*time.Second), "client 1's link is intact")
	// Client 0's record waits for its link: franz-go's idempotent producer
	// does not fail a batch it may have written (the cut closed the
	// connection under it), whatever the record's context says.
	produced := make(chan error, 1)
	c0.Produce(ctx, &kgo.Record{Value: []byte("c0-during-cut")}, func(_ *kgo.Record, err error) { produced <- err })
	select {
	case err := <-produced:
		t.Fatalf("client 0 produced through its cut link (err %v): its connections do not all cross it", err)
	case <-time.After(5 * time.Second):
	}
	require.Equal(t, int64(2), endOffset(t, admin, topic), "nothing of client 0 reached the broker")
	links[0].heal()
	select {
	case err := <-produced:
		require.NoError(t, err, "client 0's record went out after heal")
	case <-time.After(30 * time.Second):
		t.Fatal("client 0's record did not go out within 30 s of heal")
	}
	require.NoError(t, produce(c0, "c0-after-heal", 30*time.Second))
	require.Equal(t, int64(4), endOffset(t, admin, topic), "c0-first, c1-during-cut, c0-during-cut, c0-after-heal: each once")
}

// endOffset is the end offset of topic's partition 0.
func endOffset(t *testing.T, brokers []string, topic string) int64 {
	t.Helper()
	ends, err := kadmOn(t, brokers).ListEndOffsets(context.Background(), topic)
	require.NoError(t, err)
	end, ok := ends.Lookup(topic, 0)
	require.True(t, ok)
	require.NoError(t, end.Err)
	return end.Offset
}

var errReadTimeout = errors.New("read timed out")

// readAll reads c until EOF (nil error) or until nothing has come for
// quiet (errReadTimeout); a reset is an error of its own.
func readAll(c net.Conn, quiet time.Duration) ([]byte, error) {
	var got bytes.Buffer
	buf := make([]byte, 4096)
	for {
		_ = c.SetReadDeadline(time.Now().Add(quiet))
		n, err := c.Read(buf)
		got.Write(buf[:n])
		var ne net.Error
		switch {
		case errors.Is(err, io.EOF):
			return got.Bytes(), nil
		case errors.As(err, &ne) && ne.Timeout():
			return got.Bytes(), errReadTimeout
		case err != nil:
			return got.Bytes(), err
		}
	}
}

func dialLink(t *testing.T, k *link) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", k.Addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// scriptServer is a TCP server whose side of each connection the test
// drives.
type scriptServer struct {
	addr  string
	conns chan net.Conn
}

func newScriptServer(t *testing.T) *scriptServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &scriptServer{addr: l.Addr().String(), conns: make(chan net.Conn, 16)}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.conns <- c
		}
	}()
	t.Cleanup(func() { _ = l.Close() })
	return s
}

// accept is the server's side of the next connection.
func (s *scriptServer) accept(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-s.conns:
		t.Cleanup(func() { _ = c.Close() })
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no connection reached the script server")
		return nil
	}
}

// say writes each part with a write of its own.
func say(t *testing.T, c net.Conn, parts ...[]byte) {
	t.Helper()
	for _, p := range parts {
		_, err := c.Write(p)
		require.NoError(t, err)
	}
}
