package deadletter

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kzap"
	"go.uber.org/zap"

	settings "github.com/effectively-io/effectively/consumer"
)

// DLQSuffix names a source topic's dead-letter topic when no other is
// configured: "<source topic>.dlq".
const DLQSuffix = ".dlq"

// Headers the relay adds to each published dead letter, after the original
// record's headers. A consumer of a dead-letter topic should read the last
// header of each key: the original record may carry forged ones.
const (
	HeaderOriginTopic     = "effectively.origin.topic"
	HeaderOriginPartition = "effectively.origin.partition"
	HeaderOriginOffset    = "effectively.origin.offset"
	HeaderReason          = "effectively.reason"
	HeaderError           = "effectively.error"
	HeaderConsumerGroup   = "effectively.consumer_group"
	HeaderDeadLetterID    = "effectively.dead_letter_id"
	// HeaderValueSize is the original value's size in bytes; the published
	// value is the stored prefix (at most MaxValueBytes), so a value_size
	// larger than the value means it was cut.
	HeaderValueSize = "effectively.value_size"
	// HeaderHeadersOmitted is present when some original headers were left
	// out (more than MaxRelayedHeaderBytes, or unreadable): the number left
	// out, or "unreadable".
	HeaderHeadersOmitted = "effectively.headers_omitted"
)

// MaxRelayedHeaderBytes bounds the original headers copied to a published
// dead letter, so a record with hostile headers cannot make a dead letter
// too large to publish and stall the relay behind it.
const MaxRelayedHeaderBytes = 64 << 10

// RelayOptions configure a Relay. Zero values take the defaults documented on
// each field.
type RelayOptions struct {
	// DLQTopics maps a source topic to its dead-letter topic (config:
	// topics[].dlq). A topic not in the map uses "<name>.dlq".
	DLQTopics map[string]string
	// Brokers are the seed brokers.
	Brokers []string
	// BatchSize is the most dead letters published per Kafka transaction
	// (default 100).
	BatchSize int
	// Interval is how often an idle relay looks for new dead letters, and
	// how often a standby relay tries to take the relay lock (default 1 s).
	Interval time.Duration
	// RetryInitial and RetryMax shape the capped, jittered exponential
	// backoff after a failure (broker or database unavailable; default
	// 100 ms, 30 s).
	RetryInitial time.Duration
	RetryMax     time.Duration
	// RequestTimeout bounds each Kafka step: initialising the producer, a
	// round's produce, its commit, reading a dead-letter topic back (default
	// 30 s). The transaction timeout is three times it.
	RequestTimeout time.Duration
	// TransactionalID is the Kafka transactional ID the relay publishes
	// under. Every replica of one deployment must use the same one (that is
	// what fences a stale relay) and separate deployments sharing a cluster
	// different ones. Default: "effectively-dlq-relay.<database>.<schema>".
	TransactionalID string
	// Logger receives the relay's logs (franz-go's at warn and above).
	Logger *zap.Logger
	// Hooks are extra franz-go hooks (kprom client metrics).
	Hooks []kgo.Hook
	// ExtraOpts are appended to the franz-go options last (TLS, SASL,
	// client ID, tests).
	ExtraOpts []kgo.Opt
}

func (o *RelayOptions) setDefaults() {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 100
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.RetryInitial <= 0 {
		o.RetryInitial = settings.RetryInitialDefault
	}
	if o.RetryMax <= 0 {
		o.RetryMax = settings.RetryMaxDefault
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 30 * time.Second
	}
}

// Relay publishes every dead letter to its topic's dead-letter topic, once,
// and marks it published.
//
// Exactly once across restarts, crashes and replicas rests on three parts:
//
//   - One active relay per database schema: a session advisory lock, held on
//     the connection that runs all of the relay's queries. Other replicas'
//     relays stand by and take over when it is released. The lock alone
//     cannot stop a relay that lost it without noticing (its connection died
//     while it was publishing), so it is only there to keep replicas from
//     taking turns.
//   - Kafka transactions under one stable transactional ID. A relay starts
//     by initialising its producer ID, which fences every earlier producer
//     with the same ID: their open transaction is aborted (read_committed
//     consumers never see it) and nothing they send afterwards can commit.
//     Each round publishes a batch in one transaction.
//   - Reconciliation of the gap between the Kafka commit and the "mark
//     published" UPDATE. The relay records where each dead letter landed
//     and keeps a cursor per dead-letter partition below which everything
//     it published is marked. After fencing, and before it first publishes
//     to a dead-letter topic, it reads that topic (read_committed) from the
//     cursors to the high watermark and marks the dead letters it finds
//     there (by dead-letter ID and origin), so they are not sent again.
//     Nothing can be added behind it: earlier producers are fenced, and
//     this relay writes to a topic only after reconciling it.
//
// Simpler designs fall short: an idempotent producer without
// transactions dedupes retries of one producer session only, so a fenced or
// restarted relay could still land a second copy; marking before publishing
// loses a dead letter on a crash in between. Consumers of the dead-letter
// topics must read with read_committed isolation (the Java client's and
// franz-go's default is read_uncommitted), or they also see aborted
// attempts.
//
// Each dead letter goes to its origin partition (modulo the dead-letter
// topic's partition count), so one source partition's dead letters stay in
// order. A missing dead-letter topic is created with the source topic's
// partition count and the broker's default replication factor.
type Relay struct {
	pool *pgxpool.Pool
	opts RelayOptions
	log  *zap.Logger

	// ident is loaded by the first session; only Run's goroutine uses it.
	ident *relayIdentity

	// hookFunc, when set (tests only), is called at each stage of a publish
	// round with the round's dead-letter IDs; an error ends the round there,
	// as a crash at that point would.
	hookFunc func(stage string, ids []int64) error
}

// Stages of a publish round, for hookFunc.
const (
	stageBeforeProduce = "before_produce"
	stageBeforeCommit  = "before_commit"
	stageAfterCommit   = "after_commit"
)

// relayIdentity names what the relay publishes for: one database schema.
type relayIdentity struct {
	lockKey         int64
	transactionalID string
}

// NewRelay creates a relay for the dead letters in pool's database (its
// search_path's schema). It does not connect until [Relay.Run].
func NewRelay(pool *pgxpool.Pool, opts RelayOptions) (*Relay, error) {
	opts.setDefaults()
	if pool == nil {
		return nil, errors.New("deadletter: relay needs a database pool")
	}
	if len(opts.Brokers) == 0 {
		return nil, errors.New("deadletter: relay needs brokers (kafka.brokers)")
	}
	return &Relay{pool: pool, opts: opts, log: opts.Logger.Named("dlq_relay")}, nil
}

// Pending returns the number of dead letters not yet published.
func (r *Relay) Pending(ctx context.Context) (int64, error) {
	var n int64
	if err := r.pool.QueryRow(ctx, `SELECT count(*) FROM dead_letters WHERE published_at IS NULL`).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting unpublished dead letters: %w", err)
	}
	return n, nil
}

// Run publishes dead letters until ctx is done, then returns nil. Failures
// (broker or database unavailable) are logged and retried with capped,
// jittered backoff; they never end it. Run must not be called concurrently
// on one Relay.
func (r *Relay) Run(ctx context.Context) error {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = r.opts.RetryInitial
	bo.MaxInterval = r.opts.RetryMax
	bo.RandomizationFactor = 0.5
	for {
		progressed, err := r.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if progressed {
			bo.Reset()
		}
		wait := bo.NextBackOff()
		r.log.Warn("dead-letter relay failed; retrying", zap.Error(err), zap.Duration("backoff", wait))
		if !sleep(ctx, wait) {
			return nil
		}
	}
}

// session is one relay lifetime between failures: it holds the lock, a
// fenced transactional producer, and the dead-letter topics reconciled so
// far (with their partition counts).
type session struct {
	r      *Relay
	conn   *pgxpool.Conn
	cl     *kgo.Client
	adm    *kadm.Client
	topics map[string]int32
}

// session takes the relay lock (waiting while another relay holds it),
// fences earlier producers and publishes until ctx is done or something
// fails. progressed reports whether at least one round completed.
func (r *Relay) session(ctx context.Context) (progressed bool, err error) {
	conn, err := r.lock(ctx)
	if err != nil {
		return false, err
	}
	defer releaseLock(conn)

	cl, err := kgo.NewClient(r.clientOpts(
		kgo.TransactionalID(r.ident.transactionalID),
		kgo.TransactionTimeout(3*r.opts.RequestTimeout),
		kgo.RecordDeliveryTimeout(r.opts.RequestTimeout),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		// kadm's topic and offset listings use the client's cached
		// metadata; the default 5 s cache keeps a topic the relay just
		// created "unknown" that long.
		kgo.MetadataMinAge(250*time.Millisecond),
	)...)
	if err != nil {
		return false, fmt.Errorf("creating the dead-letter producer: %w", err)
	}
	// Closing does not end an open transaction: the next session's fencing
	// aborts it, exactly as after a crash.
	defer cl.Close()

	// Initialising the producer ID fences every earlier relay: its open
	// transaction is aborted and it can commit nothing more. Only after this
	// can reading a dead-letter topic back show everything that will ever
	// be committed there by an earlier relay.
	fctx, cancel := context.WithTimeout(ctx, r.opts.RequestTimeout)
	_, _, err = cl.ProducerID(fctx)
	cancel()
	if err != nil {
		return false, fmt.Errorf("initialising the transactional producer %q: %w", r.ident.transactionalID, err)
	}
	r.log.Info("dead-letter relay active", zap.String("transactional_id", r.ident.transactionalID))

	s := &session{r: r, conn: conn, cl: cl, adm: kadm.NewClient(cl), topics: map[string]int32{}}
	for {
		n, err := s.round(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return progressed, nil
			}
			return progressed, err
		}
		progressed = true
		if n < r.opts.BatchSize && !sleep(ctx, r.opts.Interval) {
			return progressed, nil
		}
	}
}

func (r *Relay) clientOpts(extra ...kgo.Opt) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(r.opts.Brokers...),
		kgo.WithLogger(kzap.New(r.log.Named("kafka"), kzap.Level(kgo.LogLevelWarn))),
	}
	if len(r.opts.Hooks) > 0 {
		opts = append(opts, kgo.WithHooks(r.opts.Hooks...))
	}
	opts = append(opts, extra...)
	return append(opts, r.opts.ExtraOpts...)
}

// lock returns a connection holding the relay's advisory lock, waiting
// while another relay holds it.
func (r *Relay) lock(ctx context.Context) (*pgxpool.Conn, error) {
	standby := false
	for {
		conn, err := r.pool.Acquire(ctx)
		if err != nil {
			return nil, fmt.Errorf("connecting for the relay lock: %w", err)
		}
		if r.ident == nil {
			if r.ident, err = r.identity(ctx, conn); err != nil {
				conn.Release()
				return nil, err
			}
		}
		var held bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, r.ident.lockKey).Scan(&held); err != nil {
			conn.Release()
			return nil, fmt.Errorf("taking the relay lock: %w", err)
		}
		if held {
			return conn, nil
		}
		conn.Release()
		if !standby {
			standby = true
			r.log.Info("dead-letter relay standing by: another relay holds the lock")
		}
		if !sleep(ctx, r.opts.Interval) {
			return nil, ctx.Err()
		}
	}
}

func (r *Relay) identity(ctx context.Context, conn *pgxpool.Conn) (*relayIdentity, error) {
	var db string
	var schema *string
	if err := conn.QueryRow(ctx, `SELECT current_database(), current_schema()`).Scan(&db, &schema); err != nil {
		return nil, fmt.Errorf("reading the database and schema names: %w", err)
	}
	if schema == nil {
		return nil, errors.New("the connection's search_path names no existing schema; fix search_path in postgres.url")
	}
	h := fnv.New64a()
	h.Write([]byte("effectively/deadletter/relay/" + db + "/" + *schema))
	id := &relayIdentity{lockKey: int64(h.Sum64() >> 1), transactionalID: r.opts.TransactionalID}
	if id.transactionalID == "" {
		id.transactionalID = "effectively-dlq-relay." + db + "." + *schema
	}
	return id, nil
}

// releaseLock closes the lock's connection: ending the session releases the
// advisory lock even when an unlock would fail, and a pooled connection must
// never go back to the pool still holding it.
func releaseLock(conn *pgxpool.Conn) {
	pc := conn.Hijack()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = pc.Close(ctx)
}

// pending is an unpublished dead letter as stored.
type pending struct {
	id        int64
	group     string
	topic     string
	partition int32
	offset    int64
	key       []byte
	value     []byte
	valueSize int64
	headers   []byte
	reason    string
	errText   string
}

const selectPendingSQL = `
SELECT id, consumer_group, topic, "partition", "offset", record_key, value_prefix, value_size, headers, reason, error
FROM dead_letters
WHERE published_at IS NULL
ORDER BY id
LIMIT $1`

func (s *session) next(ctx context.Context) ([]pending, error) {
	rows, err := s.conn.Query(ctx, selectPendingSQL, s.r.opts.BatchSize)
	if err != nil {
		return nil, fmt.Errorf("reading unpublished dead letters: %w", err)
	}
	var out []pending
	for rows.Next() {
		var p pending
		if err := rows.Scan(&p.id, &p.group, &p.topic, &p.partition, &p.offset, &p.key, &p.value,
			&p.valueSize, &p.headers, &p.reason, &p.errText); err != nil {
			rows.Close()
			return nil, fmt.Errorf("reading unpublished dead letters: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading unpublished dead letters: %w", err)
	}
	return out, nil
}

// dlqTopic names source's dead-letter topic.
func (r *Relay) dlqTopic(source string) string {
	if t := r.opts.DLQTopics[source]; t != "" {
		return t
	}
	return source + DLQSuffix
}

// round publishes the next batch of dead letters in one Kafka transaction and
// marks them, returning how many it published.
func (s *session) round(ctx context.Context) (int, error) {
	var batch []pending
	for {
		var err error
		if batch, err = s.next(ctx); err != nil {
			return 0, err
		}
		prepared := true
		for _, p := range batch {
			dlq := s.r.dlqTopic(p.topic)
			if _, ok := s.topics[dlq]; ok {
				continue
			}
			prepared = false
			if err := s.prepare(ctx, dlq, p.topic); err != nil {
				return 0, err
			}
		}
		if prepared {
			break
		}
		// Reconciling may have marked some of the batch: read it again.
	}
	if len(batch) == 0 {
		return 0, nil
	}

	recs := make([]*kgo.Record, len(batch))
	ids := make([]int64, len(batch))
	for i, p := range batch {
		dlq := s.r.dlqTopic(p.topic)
		recs[i] = p.record(dlq, s.topics[dlq])
		ids[i] = p.id
	}

	if err := s.hook(stageBeforeProduce, ids); err != nil {
		return 0, err
	}
	if err := s.cl.BeginTransaction(); err != nil {
		return 0, fmt.Errorf("beginning a dead-letter transaction: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, s.r.opts.RequestTimeout)
	err := s.cl.ProduceSync(pctx, recs...).FirstErr()
	cancel()
	if err != nil {
		// The transaction stays open; the next session's fencing aborts it.
		return 0, fmt.Errorf("publishing %d dead letters (ids %d…%d): %w", len(batch), ids[0], ids[len(ids)-1], err)
	}
	if err := s.hook(stageBeforeCommit, ids); err != nil {
		return 0, err
	}
	cctx, cancel := context.WithTimeout(ctx, s.r.opts.RequestTimeout)
	err = s.cl.EndTransaction(cctx, kgo.TryCommit)
	cancel()
	if err != nil {
		// The outcome may be unknown: the next session reconciles.
		return 0, fmt.Errorf("committing %d dead letters (ids %d…%d): %w", len(batch), ids[0], ids[len(ids)-1], err)
	}
	if err := s.hook(stageAfterCommit, ids); err != nil {
		return 0, err
	}

	landed := make([]published, len(batch))
	for i, p := range batch {
		landed[i] = published{
			id: p.id, topic: p.topic, partition: p.partition, offset: p.offset,
			dlqTopic: recs[i].Topic, dlqPartition: recs[i].Partition, dlqOffset: recs[i].Offset,
		}
	}
	marked, err := s.mark(ctx, landed, nil)
	if err != nil {
		// Published but not marked: the next session finds them on the
		// topic and marks them instead of publishing them again.
		return 0, err
	}
	if marked != int64(len(batch)) {
		// Only the lock holder marks, and it read these rows unmarked: a
		// row deleted meanwhile (or a second relay) explains a difference.
		s.r.log.Warn("fewer dead letters marked published than were published",
			zap.Int("published", len(batch)), zap.Int64("marked", marked))
	}
	s.r.log.Debug("dead letters published", zap.Int("dead_letters", len(batch)),
		zap.Int64("first_id", ids[0]), zap.Int64("last_id", ids[len(ids)-1]))
	return len(batch), nil
}

func (s *session) hook(stage string, ids []int64) error {
	if s.r.hookFunc == nil {
		return nil
	}
	return s.r.hookFunc(stage, ids)
}

// record builds the published form of p on topic dlq with the given number
// of partitions.
func (p *pending) record(dlq string, partitions int32) *kgo.Record {
	part := p.partition
	if part < 0 || partitions <= 0 {
		part = 0
	} else {
		part %= partitions
	}
	hs, omitted := originalHeaders(p.headers)
	hs = append(hs,
		kgo.RecordHeader{Key: HeaderOriginTopic, Value: []byte(p.topic)},
		kgo.RecordHeader{Key: HeaderOriginPartition, Value: []byte(strconv.FormatInt(int64(p.partition), 10))},
		kgo.RecordHeader{Key: HeaderOriginOffset, Value: []byte(strconv.FormatInt(p.offset, 10))},
		kgo.RecordHeader{Key: HeaderReason, Value: []byte(p.reason)},
		// Stored redacted, bounded and cleaned already; again in case the
		// row came from elsewhere (an older version).
		kgo.RecordHeader{Key: HeaderError, Value: []byte(storedError(p.errText))},
		kgo.RecordHeader{Key: HeaderConsumerGroup, Value: []byte(p.group)},
		kgo.RecordHeader{Key: HeaderDeadLetterID, Value: []byte(strconv.FormatInt(p.id, 10))},
		kgo.RecordHeader{Key: HeaderValueSize, Value: []byte(strconv.FormatInt(p.valueSize, 10))},
	)
	if omitted != "" {
		hs = append(hs, kgo.RecordHeader{Key: HeaderHeadersOmitted, Value: []byte(omitted)})
	}
	return &kgo.Record{Topic: dlq, Partition: part, Key: p.key, Value: p.value, Headers: hs}
}

// originalHeaders decodes the stored headers, up to MaxRelayedHeaderBytes;
// omitted says what was left out ("" when nothing).
func originalHeaders(stored []byte) (hs []kgo.RecordHeader, omitted string) {
	var hdrs []Header
	if len(stored) > 0 {
		if err := json.Unmarshal(stored, &hdrs); err != nil {
			return nil, "unreadable"
		}
	}
	size := 0
	for i, h := range hdrs {
		v := []byte(h.Value)
		if h.ValueBase64 != "" {
			var err error
			if v, err = base64.StdEncoding.DecodeString(h.ValueBase64); err != nil {
				return hs, "unreadable"
			}
		}
		size += len(h.Key) + len(v)
		if size > MaxRelayedHeaderBytes {
			return hs, strconv.Itoa(len(hdrs) - i)
		}
		hs = append(hs, kgo.RecordHeader{Key: h.Key, Value: v})
	}
	return hs, ""
}

// published is a dead letter and where it landed.
type published struct {
	id           int64
	topic        string
	partition    int32
	offset       int64
	dlqTopic     string
	dlqPartition int32
	dlqOffset    int64
}

// markSQL marks dead letters published. The origin must match too: a
// record read back from a dead-letter topic is only taken for this row if
// it is the same dead letter, not one with a colliding ID from another
// database.
const markSQL = `
UPDATE dead_letters AS d
SET published_at = now(), dlq_topic = p.dlq_topic, dlq_partition = p.dlq_partition, dlq_offset = p.dlq_offset
FROM unnest($1::bigint[], $2::text[], $3::integer[], $4::bigint[], $5::text[], $6::integer[], $7::bigint[])
    AS p(id, topic, "partition", "offset", dlq_topic, dlq_partition, dlq_offset)
WHERE d.id = p.id AND d.topic = p.topic AND d."partition" = p."partition" AND d."offset" = p."offset"
  AND d.published_at IS NULL`

// advanceCursorsSQL moves each partition's cursor past what a round
// published; only forward, so a stale relay's late mark cannot move it back.
const advanceCursorsSQL = `
INSERT INTO dead_letter_relay_cursors AS c (dlq_topic, "partition", next_offset)
SELECT t, p, max(o) + 1 FROM unnest($1::text[], $2::integer[], $3::bigint[]) AS x(t, p, o)
GROUP BY t, p ORDER BY t, p
ON CONFLICT (dlq_topic, "partition") DO UPDATE
SET next_offset = GREATEST(c.next_offset, excluded.next_offset), updated_at = now()`

// setCursorsSQL sets one topic's cursors after reconciliation read every
// partition up to these offsets.
const setCursorsSQL = `
INSERT INTO dead_letter_relay_cursors (dlq_topic, "partition", next_offset)
SELECT $1, p, o FROM unnest($2::integer[], $3::bigint[]) AS x(p, o)
ORDER BY p
ON CONFLICT (dlq_topic, "partition") DO UPDATE
SET next_offset = excluded.next_offset, updated_at = now()`

// mark marks ps published and, in the same transaction, moves the cursors:
// past ps when cursors is nil (a round), or to cursors (a reconciled topic).
// It returns how many dead letters it marked (those already marked are
// left alone).
func (s *session) mark(ctx context.Context, ps []published, cursors *topicCursors) (int64, error) {
	n := len(ps)
	ids, topics, dlqTopics := make([]int64, n), make([]string, n), make([]string, n)
	parts, dlqParts := make([]int32, n), make([]int32, n)
	offsets, dlqOffsets := make([]int64, n), make([]int64, n)
	for i, p := range ps {
		ids[i], topics[i], parts[i], offsets[i] = p.id, p.topic, p.partition, p.offset
		dlqTopics[i], dlqParts[i], dlqOffsets[i] = p.dlqTopic, p.dlqPartition, p.dlqOffset
	}
	var marked int64
	err := pgx.BeginFunc(ctx, s.conn, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		if n > 0 {
			b.Queue(markSQL, ids, topics, parts, offsets, dlqTopics, dlqParts, dlqOffsets).Exec(func(tag pgconn.CommandTag) error {
				marked = tag.RowsAffected()
				return nil
			})
		}
		if cursors == nil {
			b.Queue(advanceCursorsSQL, dlqTopics, dlqParts, dlqOffsets)
		} else {
			b.Queue(setCursorsSQL, cursors.topic, cursors.partitions, cursors.offsets)
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return 0, fmt.Errorf("marking %d dead letters published: %w", n, err)
	}
	return marked, nil
}

// sleep waits d or until ctx is done; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
