package deadletter

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/effectively-io/effectively/internal/kafkatest"
	"github.com/effectively-io/effectively/internal/pgtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/testcontainers/testcontainers-go.(*Reaper).connect.func1"))
}

const (
	sourcePartitions = 3
	// hangGuard bounds every wait; it is not a performance assertion.
	hangGuard = 90 * time.Second
)

const relayFailed = "dead-letter relay failed; retrying"

type bundle struct {
	db     pgtest.DB
	source string // the source topic (its partition count sizes the DLQ topic)
	dlq    string // its dead-letter topic, created by the relay
	next   int64  // next origin offset to hand out
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{db: pgtest.New(t), source: kafkatest.NewTopic(t, sourcePartitions), dlq: kafkatest.Name(t, "dlq")}
	kafkatest.DeleteOnCleanup(t, b.dlq)
	return b
}

// withoutSource is a bundle whose source topic does not exist (yet), with
// letters dead letters to relay, and its relay (not started).
func withoutSource(t *testing.T, kind string, letters int) (*bundle, relayHandle) {
	t.Helper()
	b := &bundle{db: pgtest.New(t), source: kafkatest.Name(t, kind), dlq: kafkatest.Name(t, "dlq")}
	kafkatest.DeleteOnCleanup(t, b.dlq, b.source)
	b.insert(t, letters)
	return b, b.newRelay(t, b.db.Pool, nil)
}

// relayHandle is a relay under test and its logs.
type relayHandle struct {
	*Relay
	logs *observer.ObservedLogs
}

// newRelay makes a relay for b's topics; edit adjusts the options.
func (b *bundle) newRelay(t *testing.T, pool *pgxpool.Pool, edit func(*RelayOptions)) relayHandle {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	opts := RelayOptions{
		DLQTopics:      map[string]string{b.source: b.dlq},
		Brokers:        kafkatest.Brokers(t),
		BatchSize:      4,
		Interval:       50 * time.Millisecond,
		RetryInitial:   50 * time.Millisecond,
		RetryMax:       500 * time.Millisecond,
		RequestTimeout: 15 * time.Second,
		Logger:         zap.New(zapcore.NewTee(core, zaptest.NewLogger(t, zaptest.Level(zapcore.InfoLevel)).Core())),
	}
	if edit != nil {
		edit(&opts)
	}
	r, err := NewRelay(pool, opts)
	require.NoError(t, err)
	return relayHandle{Relay: r, logs: logs}
}

// start runs r until the returned stop is called (or the test ends); stop
// waits for Run to return and checks it returned nil.
func start(t *testing.T, r relayHandle) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(hangGuard):
				t.Fatal("relay did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// insert writes n dead letters of b's source topic the way the pipeline
// does (Queue, in a transaction), with a mix of keys, values and headers.
func (b *bundle) insert(t *testing.T, n int) {
	t.Helper()
	batch := &pgx.Batch{}
	for range n {
		off := b.next
		b.next++
		l := Letter{
			Group:     "g1",
			Topic:     b.source,
			Partition: int32(off % sourcePartitions),
			Offset:    off,
			RecordKey: []byte("acct-" + strconv.FormatInt(off, 10)),
			Value:     []byte(`{"n":` + strconv.FormatInt(off, 10) + `}`),
			Headers: []Header{
				NewHeader("traceparent", []byte("00-"+strconv.FormatInt(off, 16))),
				NewHeader("binary", []byte{0, 1, 0xff}),
			},
			Reason: "not_json",
			Error:  "invalid character 'x' at offset " + strconv.FormatInt(off, 10),
		}
		switch off % 5 {
		case 1: // undecodable, no key
			l.RecordKey = nil
			l.Headers = nil
		case 2: // null value
			l.Value = nil
			l.Reason = "empty_value"
		case 3: // larger than what a dead letter keeps
			l.Value = []byte(strings.Repeat("v", MaxValueBytes+100))
			l.Reason = "too_large"
		}
		Queue(batch, l)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		return tx.SendBatch(ctx, batch).Close()
	}))
}

func (b *bundle) pending(t *testing.T) int64 {
	t.Helper()
	return b.db.Count(t, `SELECT count(*) FROM dead_letters WHERE published_at IS NULL`)
}

func (b *bundle) waitPublished(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool { return b.pending(t) == 0 }, hangGuard, 20*time.Millisecond,
		"dead letters still unpublished")
}

// readDLQ returns every record a read_committed consumer sees on topic, up
// to its last stable offsets.
func readDLQ(t *testing.T, topic string) []*kgo.Record {
	t.Helper()
	return readTopic(t, topic, true)
}

// readTopic reads topic to its end: with committed, as a read_committed
// consumer up to the last stable offsets; otherwise as a read_uncommitted
// one up to the high watermarks.
func readTopic(t *testing.T, topic string, committed bool) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	adm := kafkatest.Admin(t)
	list, isolation := adm.ListEndOffsets, kgo.ReadUncommitted()
	if committed {
		list, isolation = adm.ListCommittedOffsets, kgo.ReadCommitted()
	}
	ends, err := list(ctx, topic)
	require.NoError(t, err)
	require.NoError(t, ends.Error())
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkatest.Brokers(t)...),
		kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(isolation),
		kgo.KeepControlRecords(), // to see each partition's last offset, a commit marker
	)
	require.NoError(t, err)
	defer cl.Close()
	var recs []*kgo.Record
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "reading %s: partitions not read to the end: %v", topic, want)
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if ok && r.Offset >= end-1 {
				delete(want, r.Partition)
			}
			if !r.Attrs.IsControl() && r.Offset < end {
				recs = append(recs, r)
			}
		})
	}
	return recs
}

// storedLetter is a dead_letters row as the test reads it.
type storedLetter struct {
	id              int64
	group, topic    string
	partition       int32
	offset          int64
	key, value      []byte
	valueSize       int64
	headers         []Header
	reason, errText string
	published       bool
	dlqTopic        *string
	dlqPartition    *int32
	dlqOffset       *int64
}

func (b *bundle) rows(t *testing.T) map[int64]storedLetter {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `
SELECT id, consumer_group, topic, "partition", "offset", record_key, value_prefix, value_size, headers,
       reason, error, published_at IS NOT NULL, dlq_topic, dlq_partition, dlq_offset
FROM dead_letters`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[int64]storedLetter{}
	for rows.Next() {
		var l storedLetter
		require.NoError(t, rows.Scan(&l.id, &l.group, &l.topic, &l.partition, &l.offset, &l.key, &l.value,
			&l.valueSize, &l.headers, &l.reason, &l.errText, &l.published, &l.dlqTopic, &l.dlqPartition, &l.dlqOffset))
		out[l.id] = l
	}
	require.NoError(t, rows.Err())
	return out
}

// requireExactlyOnce checks that every dead letter in the database appears
// exactly once on the DLQ topic, with its key, value and headers, and is
// marked published where it landed.
func (b *bundle) requireExactlyOnce(t *testing.T) {
	t.Helper()
	stored := b.rows(t)
	require.NotEmpty(t, stored)
	// The transaction's commit markers reach the partitions just after
	// EndTxn returns, so the last stable offset can trail the relay's mark
	// for a moment: read again until it covers every published row.
	recs := readDLQ(t, b.dlq)
	for deadline := time.Now().Add(hangGuard); len(recs) < len(stored) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		recs = readDLQ(t, b.dlq)
	}
	seen := map[int64]int{}
	for _, rec := range recs {
		id, err := strconv.ParseInt(lastHeader(rec, HeaderDeadLetterID), 10, 64)
		require.NoError(t, err, "record at %d/%d has no dead-letter ID", rec.Partition, rec.Offset)
		seen[id]++
		l, ok := stored[id]
		require.True(t, ok, "record for unknown dead letter %d", id)
		require.Equal(t, l.partition%sourcePartitions, rec.Partition, "dead letter %d: partition", id)
		require.Equal(t, l.key, rec.Key, "dead letter %d: key", id)
		require.Equal(t, l.value, rec.Value, "dead letter %d: value", id)
		require.Equal(t, expectedHeaders(t, l), rec.Headers, "dead letter %d: headers", id)
		require.True(t, l.published, "dead letter %d published but not marked", id)
		require.Equal(t, b.dlq, *l.dlqTopic)
		require.Equal(t, rec.Partition, *l.dlqPartition, "dead letter %d: marked partition", id)
		require.Equal(t, rec.Offset, *l.dlqOffset, "dead letter %d: marked offset", id)
	}
	for id := range stored {
		require.Equal(t, 1, seen[id], "dead letter %d published %d times", id, seen[id])
	}
	require.Len(t, recs, len(stored))

	// Every published dead letter is below its partition's cursor.
	cursors := map[int32]int64{}
	rows, err := b.db.Pool.Query(context.Background(),
		`SELECT "partition", next_offset FROM dead_letter_relay_cursors WHERE dlq_topic = $1`, b.dlq)
	require.NoError(t, err)
	for rows.Next() {
		var p int32
		var o int64
		require.NoError(t, rows.Scan(&p, &o))
		cursors[p] = o
	}
	require.NoError(t, rows.Err())
	require.Len(t, cursors, sourcePartitions)
	for _, rec := range recs {
		require.Less(t, rec.Offset, cursors[rec.Partition], "record at %d/%d above its cursor", rec.Partition, rec.Offset)
	}
}

func expectedHeaders(t *testing.T, l storedLetter) []kgo.RecordHeader {
	t.Helper()
	var hs []kgo.RecordHeader
	for _, h := range l.headers {
		v := []byte(h.Value)
		if h.ValueBase64 != "" {
			var err error
			v, err = base64.StdEncoding.DecodeString(h.ValueBase64)
			require.NoError(t, err)
		}
		hs = append(hs, kgo.RecordHeader{Key: h.Key, Value: v})
	}
	return append(hs,
		kgo.RecordHeader{Key: HeaderOriginTopic, Value: []byte(l.topic)},
		kgo.RecordHeader{Key: HeaderOriginPartition, Value: []byte(strconv.Itoa(int(l.partition)))},
		kgo.RecordHeader{Key: HeaderOriginOffset, Value: []byte(strconv.FormatInt(l.offset, 10))},
		kgo.RecordHeader{Key: HeaderReason, Value: []byte(l.reason)},
		kgo.RecordHeader{Key: HeaderError, Value: []byte(l.errText)},
		kgo.RecordHeader{Key: HeaderConsumerGroup, Value: []byte(l.group)},
		kgo.RecordHeader{Key: HeaderDeadLetterID, Value: []byte(strconv.FormatInt(l.id, 10))},
		kgo.RecordHeader{Key: HeaderValueSize, Value: []byte(strconv.FormatInt(l.valueSize, 10))},
	)
}

func lastHeader(rec *kgo.Record, key string) string {
	v := ""
	for _, h := range rec.Headers {
		if h.Key == key {
			v = string(h.Value)
		}
	}
	return v
}

func TestRelayPublishesEachDeadLetterOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insert(t, 10)
	r := b.newRelay(t, b.db.Pool, nil)
	n, err := r.Pending(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(10), n)

	stop := start(t, r)
	b.waitPublished(t)
	stop()
	b.requireExactlyOnce(t)

	// The DLQ topic was created with the source's partition count.
	tds, err := kafkatest.Admin(t).ListTopics(context.Background(), b.dlq)
	require.NoError(t, err)
	require.Len(t, tds[b.dlq].Partitions, sourcePartitions)

	// The values kept their stored bounds and said how large they were.
	for _, l := range b.rows(t) {
		require.LessOrEqual(t, len(l.value), MaxValueBytes)
		if l.offset%5 == 3 {
			require.Equal(t, int64(MaxValueBytes+100), l.valueSize)
		}
	}

	// Restarted with nothing new, it publishes nothing; new dead letters
	// follow, each once.
	stop = start(t, b.newRelay(t, b.db.Pool, nil))
	b.insert(t, 5)
	b.waitPublished(t)
	stop()
	b.requireExactlyOnce(t)
	require.Equal(t, int64(15), b.db.Count(t, `SELECT count(*) FROM dead_letters`))
}

// A source topic that is gone leaves its dead letters a topic of one
// partition, and only after the metadata has said so for sourceGoneAfter:
// a topic the broker serves a moment late must not be sized from that
// moment (CI saw a three-partition source answered as unknown).
func TestRelaySizesTheTopicOfAGoneSourceAsOnePartition(t *testing.T) {
	t.Parallel()
	b, r := withoutSource(t, "gone", 4)
	adm := kafkatest.Admin(t)
	began := time.Now()
	stop := start(t, r)
	b.waitPublished(t)
	stop()
	require.GreaterOrEqual(t, time.Since(began), sourceGoneAfter, "sized before the metadata had confirmed the source gone")

	tds, err := adm.ListTopics(context.Background(), b.dlq)
	require.NoError(t, err)
	require.Len(t, tds[b.dlq].Partitions, 1)
	recs := readDLQ(t, b.dlq)
	require.Len(t, recs, 4)
	for _, rec := range recs {
		require.Equal(t, int32(0), rec.Partition)
	}
}

// A source topic the metadata serves only after the relay has asked for it
// (a topic created a moment ago): its dead-letter topic gets the source's
// partition count, and every dead letter its source partition.
func TestRelaySizesTheTopicOfASourceServedLate(t *testing.T) {
	t.Parallel()
	b, r := withoutSource(t, "late", 9)
	adm := kafkatest.Admin(t)
	stop := start(t, r)
	require.Eventually(t, func() bool { return r.logs.FilterMessage("dead-letter relay active").Len() > 0 }, hangGuard, 10*time.Millisecond,
		"the relay starts its round")
	// The round asks for the source at once; it is unknown for a while yet.
	time.Sleep(sourceGoneAfter / 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, sourcePartitions, 1, nil, b.source)
	require.NoError(t, err)
	require.NoError(t, resp.Err)
	b.waitPublished(t)
	stop()

	tds, err := adm.ListTopics(context.Background(), b.dlq)
	require.NoError(t, err)
	require.Len(t, tds[b.dlq].Partitions, sourcePartitions, "sized from the source, not from a moment the metadata did not serve it")
	b.requireExactlyOnce(t)
}

// A relay that dies at each point of a round, then a new relay: nothing is
// published twice, nothing is lost.
func TestRelayCrashAndRestart(t *testing.T) {
	t.Parallel()
	for _, stage := range []string{stageBeforeProduce, stageBeforeCommit, stageAfterCommit} {
		t.Run(stage, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.insert(t, 10)

			crashed := make(chan []int64, 1)
			first := b.newRelay(t, b.db.Pool, nil)
			ctx, cancel := context.WithCancel(context.Background())
			first.hookFunc = func(s string, ids []int64) error {
				if s != stage {
					return nil
				}
				// The process dies here: nothing after this point runs.
				cancel()
				select {
				case crashed <- ids:
				default:
				}
				return errors.New("crash")
			}
			done := make(chan error, 1)
			go func() { done <- first.Run(ctx) }()
			var ids []int64
			select {
			case ids = <-crashed:
			case <-time.After(hangGuard):
				t.Fatal("relay never reached " + stage)
			}
			require.NoError(t, <-done)
			require.Len(t, ids, 4)
			// The crashed round's dead letters are not marked.
			require.Equal(t, int64(10), b.pending(t))
			if stage == stageAfterCommit {
				// ... but they are on the topic: once the broker has
				// written the commit's markers, which it does after EndTxn
				// answers, so the last stable offset may lag a moment.
				var onTopic []*kgo.Record
				for deadline := time.Now().Add(hangGuard); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
					if onTopic = readDLQ(t, b.dlq); len(onTopic) >= 4 {
						break
					}
				}
				require.Len(t, onTopic, 4)
			}

			second := b.newRelay(t, b.db.Pool, nil)
			stop := start(t, second)
			b.waitPublished(t)
			stop()
			b.requireExactlyOnce(t)
			if stage == stageBeforeCommit {
				// The crashed round's records are in the log, aborted by
				// the second relay's fencing: a read_uncommitted consumer
				// sees them twice (DLQ consumers must read committed).
				require.Len(t, readTopic(t, b.dlq, false), 14)
			}
			if stage == stageAfterCommit {
				// The second relay found them and marked them instead of
				// publishing them again.
				require.Equal(t, 1, second.logs.FilterMessage("marked dead letters an interrupted relay had published").Len())
			}
		})
	}
}

// Two relays on one schema, started together, with the active one stopped
// half-way: each dead letter is published once.
func TestRelayTwoRelays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool2, err := pgxpool.New(context.Background(), b.db.URL)
	require.NoError(t, err)
	t.Cleanup(pool2.Close)

	r1, r2 := b.newRelay(t, b.db.Pool, nil), b.newRelay(t, pool2, nil)
	stop1, stop2 := start(t, r1), start(t, r2)
	b.insert(t, 6)
	b.waitPublished(t)
	b.insert(t, 6)
	b.waitPublished(t)

	// Stop whichever is active; the other takes over.
	active, standby := stop1, stop2
	if r2.logs.FilterMessage("dead-letter relay active").Len() > 0 {
		active, standby = stop2, stop1
	}
	active()
	b.insert(t, 6)
	b.waitPublished(t)
	standby()

	b.requireExactlyOnce(t)
	require.Equal(t, int64(18), b.db.Count(t, `SELECT count(*) FROM dead_letters`))
	// One was active at a time: the other waited.
	const standingBy = "dead-letter relay standing by: another relay holds the lock"
	require.Positive(t, r1.logs.FilterMessage(standingBy).Len()+r2.logs.FilterMessage(standingBy).Len())
}

// A relay that lost its lock without noticing (its connection died while it
// was about to publish) is fenced by the relay that took over: its publish
// fails, and each dead letter appears once.
func TestRelayFencesAStaleRelay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insert(t, 6)

	stale := b.newRelay(t, b.db.Pool, func(o *RelayOptions) { o.RequestTimeout = 5 * time.Second })
	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	stale.hookFunc = func(stage string, _ []int64) error {
		if stage != stageBeforeProduce {
			return nil
		}
		once.Do(func() {
			// Lose the lock: end the stale relay's database session.
			var pid int32
			err := b.db.Pool.QueryRow(context.Background(), `
SELECT pid FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 1
  AND ((classid::bigint << 32) | objid::bigint) = $1`, stale.ident.lockKey).Scan(&pid)
			if err == nil {
				_, err = b.db.Pool.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, pid)
			}
			if err != nil {
				t.Errorf("ending the stale relay's session: %v", err)
			}
			close(paused)
			<-resume
		})
		return nil
	}
	stopStale := start(t, stale)
	select {
	case <-paused:
	case <-time.After(hangGuard):
		t.Fatal("stale relay never got to publish")
	}

	stopNew := start(t, b.newRelay(t, b.db.Pool, nil))
	b.waitPublished(t)
	failures := stale.logs.FilterMessage(relayFailed).Len()
	close(resume)
	// The stale relay now publishes its batch: Kafka must refuse it (not
	// merely the mark on its dead connection fail afterwards).
	require.Eventually(t, func() bool { return stale.logs.FilterMessage(relayFailed).Len() > failures },
		hangGuard, 20*time.Millisecond)
	failed := stale.logs.FilterMessage(relayFailed).All()[failures]
	msg := fmt.Sprint(failed.ContextMap()["error"])
	require.True(t, strings.HasPrefix(msg, "publishing ") || strings.HasPrefix(msg, "committing "),
		"stale relay failed with %q", msg)
	t.Logf("stale relay: %s", msg)
	stopStale()
	stopNew()

	b.requireExactlyOnce(t)
}

// With the broker unreachable the relay retries, marks nothing, and
// publishes everything once the broker is back.
func TestRelayRetriesWhileBrokerUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insert(t, 5)
	px := newProxy(t, kafkatest.Brokers(t)[0])
	r := b.newRelay(t, b.db.Pool, func(o *RelayOptions) {
		o.Brokers = []string{px.addr()}
		o.RequestTimeout = 2 * time.Second
	})
	stop := start(t, r)

	require.Eventually(t, func() bool { return r.logs.FilterMessage(relayFailed).Len() >= 2 },
		hangGuard, 20*time.Millisecond)
	require.Equal(t, int64(5), b.pending(t))
	n, err := r.Pending(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(5), n)

	px.up.Store(true)
	b.waitPublished(t)
	stop()
	b.requireExactlyOnce(t)
}

func TestOriginalHeaders(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", MaxRelayedHeaderBytes/2)
	for _, tc := range []struct {
		name    string
		stored  string
		want    []kgo.RecordHeader
		omitted string
	}{
		{name: "none", stored: `[]`},
		{name: "empty column", stored: ``},
		{name: "text and binary", stored: `[{"key":"a","value":"1"},{"key":"b","value_base64":"AAH/"},{"key":"c"}]`,
			want: []kgo.RecordHeader{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte{0, 1, 0xff}}, {Key: "c", Value: []byte{}}}},
		{name: "unreadable", stored: `{"not":"a list"}`, omitted: "unreadable"},
		{name: "bad base64", stored: `[{"key":"a","value":"1"},{"key":"b","value_base64":"%%%"}]`,
			want: []kgo.RecordHeader{{Key: "a", Value: []byte("1")}}, omitted: "unreadable"},
		{name: "too large", stored: fmt.Sprintf(`[{"key":"a","value":%q},{"key":"b","value":%q},{"key":"c","value":"1"}]`, big, big),
			want: []kgo.RecordHeader{{Key: "a", Value: []byte(big)}}, omitted: "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, omitted := originalHeaders([]byte(tc.stored))
			require.Equal(t, tc.omitted, omitted)
			require.Equal(t, len(tc.want), len(got))
			for i := range tc.want {
				require.Equal(t, tc.want[i].Key, got[i].Key)
				require.Equal(t, string(tc.want[i].Value), string(got[i].Value))
			}
		})
	}
}

// A record's own forged relay headers come first; the relay's, last, win.
func TestPublishedRoundTrip(t *testing.T) {
	t.Parallel()
	p := pending{
		id: 42, group: "g", topic: "invoices", partition: 5, offset: 99,
		headers: []byte(`[{"key":"effectively.dead_letter_id","value":"7"},{"key":"effectively.origin.topic","value":"forged"}]`),
		reason:  "not_json", errText: "bad\x00" + strings.Repeat("é", MaxErrorBytes),
	}
	rec := p.record("invoices.dlq", 3)
	require.Equal(t, int32(2), rec.Partition)
	require.LessOrEqual(t, len(lastHeader(rec, HeaderError)), MaxErrorBytes+len("…"))
	require.NotContains(t, lastHeader(rec, HeaderError), "\x00")
	rec.Offset = 12
	got, ok := parsePublished(rec)
	require.True(t, ok)
	require.Equal(t, published{id: 42, topic: "invoices", partition: 5, offset: 99,
		dlqTopic: "invoices.dlq", dlqPartition: 2, dlqOffset: 12}, got)

	_, ok = parsePublished(&kgo.Record{Headers: []kgo.RecordHeader{{Key: HeaderDeadLetterID, Value: []byte("x")}}})
	require.False(t, ok)
}

// proxy forwards TCP to a broker while up; while down it accepts and hangs
// up at once, as a broker that is not there would.
type proxy struct {
	ln     net.Listener
	target string
	up     atomic.Bool
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.up.Load() {
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
}

func (p *proxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
