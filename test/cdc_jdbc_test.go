package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/internal/kafkatest"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/internal/stacktest"
)

// The same Debezium change stream into two targets in one invocation: the
// Debezium JDBC sink (Kafka Connect, upsert mode, last writer wins) and
// effectively (the stock binary, a config-only sink gated by the change's
// log position). `make bench-cdc` runs it at size; the figures go to
// docs/explanation/benchmarks.md.
//
// The source table carries rev, a per-row revision from a sequence, set on
// every insert and update (so it also grows across a delete and a
// re-insert). Both targets copy it, so "older than a state the target had
// already shown" is measured the same way on both, by reading the targets
// alone.
//
//  1. Throughput: a snapshot and a stream of changes reach the topic first;
//     then each sink alone, in turn, reads the topic from its start until
//     its target equals the source (by digest). Runs alternate the order.
//  2. Staleness: both sinks run at once while more changes stream and
//     Kafka Connect (hosting the source connector and the JDBC sink) and
//     the effectively worker are SIGKILLed and restarted; a sampler per
//     target reads every row every 200 ms. Half of these changes go to
//     1,000 hot rows. effectively must show no stale row; the JDBC sink's
//     are reported, not asserted.
func TestCDCBesideJDBCSink(t *testing.T) {
	src := newCDCSource(t)
	ctx := context.Background()
	rows, ops := envInt("EFFECTIVELY_TEST_CDC_ROWS", 20_000), envInt("EFFECTIVELY_TEST_CDC_CHANGES", 40_000)
	runs := envInt("EFFECTIVELY_TEST_CDC_RUNS", 2)

	prefix := "jdbc" + strconv.FormatUint(rand.Uint64()%1_000_000, 10)
	table := "beside_" + prefix
	ident := pgx.Identifier{table}.Sanitize()
	seq := pgx.Identifier{table + "_rev"}.Sanitize()
	_, err := src.pool.Exec(ctx, fmt.Sprintf(`CREATE SEQUENCE %[2]s;
CREATE TABLE %[1]s (id bigint PRIMARY KEY, name text NOT NULL, status text NOT NULL, rev bigint NOT NULL DEFAULT nextval('%[2]s'));
ALTER TABLE %[1]s REPLICA IDENTITY FULL;
INSERT INTO %[1]s (id, name, status) SELECT g, 'customer ' || g, 'new' FROM generate_series(1, %[3]d) g`, ident, seq, rows))
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = src.pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+ident+`; DROP SEQUENCE IF EXISTS `+seq)
	})

	topic := debeziumWithSchemas(t, src, prefix, table)
	jdbc := &jdbcSink{connect: src.connect, topic: topic}
	eff := newEffectivelySink(t, topic, table)
	ch := &changer{pool: src.pool, table: ident, seq: seq, rng: rand.New(rand.NewPCG(29, 2)), nextID: int64(rows) + 1}

	// 1. Throughput. Everything is on the topic before either sink starts:
	// the snapshot, then the changes (streamed after it, so the topic's
	// count is exact).
	waitUntil(t, "the snapshot is on the topic", 10*time.Minute, func(context.Context) bool {
		return topicRecords(t, topic) >= int64(rows)
	})
	ch.apply(t, ops, 0, nil)
	changes, deletes := ch.changes, ch.deletes
	records := int64(rows + changes + deletes) // a tombstone follows each delete
	waitUntil(t, "the snapshot and the changes are on the topic", 10*time.Minute, func(context.Context) bool {
		return topicRecords(t, topic) >= records
	})
	want := revDigest(t, src.pool, ident)
	var jdbcRuns, effRuns []drainRun
	for run := 0; run < runs; run++ {
		timeJDBC := func() { jdbcRuns = append(jdbcRuns, jdbc.drain(t, fmt.Sprintf("%s-jdbc-%d", prefix, run), want)) }
		timeEff := func() { effRuns = append(effRuns, eff.drain(t, want)) }
		if run%2 == 0 {
			timeJDBC()
			timeEff()
		} else {
			timeEff()
			timeJDBC()
		}
		t.Logf("run %d of %d records: JDBC sink %s, effectively %s", run+1, records, jdbcRuns[run], effRuns[run])
	}

	// 2. Staleness: both sinks at once, caught up, then changes stream
	// while Connect and the worker are killed.
	jdbcDB := jdbc.target(t)
	jdbcName := prefix + "-jdbc-live"
	jdbc.register(t, jdbcName, jdbcDB)
	effDB, effEnv := eff.target(t)
	worker := start(t, effEnv, "--config", eff.config, "run")
	t.Cleanup(func() {
		if !worker.exited() {
			worker.signal(t, syscall.SIGKILL)
			worker.wait(t, time.Minute)
		}
	})
	defer func() {
		if t.Failed() {
			t.Logf("the JDBC sink: %s", connectorStatus(src.connect, jdbcName))
			t.Logf("effectively: %s", tail(worker.stderr.String(), 20))
		}
	}()
	waitUntil(t, "both targets caught up with the topic", 10*time.Minute, func(context.Context) bool {
		return caughtUp(t, jdbcDB.Pool, want) && caughtUp(t, effDB.Pool, want)
	})
	jdbcSampler, effSampler := &staleSampler{pool: jdbcDB.Pool}, &staleSampler{pool: effDB.Pool}
	stopJDBC, stopEff := jdbcSampler.run(), effSampler.run()

	restartWorker := func() {
		worker.signal(t, syscall.SIGKILL)
		worker.wait(t, time.Minute)
		worker = start(t, effEnv, "--config", eff.config, "run")
	}
	// Connect at 1/5 and 3/5 of the stream, the worker at 2/5 and 4/5.
	kills := []func(){func() { killConnect(t) }, restartWorker, func() { killConnect(t) }, restartWorker}
	// Half the changes on a few hot rows, as an application's busy rows
	// are: a row changed twice within the second a restarted task re-reads
	// is one a last-writer-wins sink can show older again.
	streamed := ops / 2
	ch.hot = besideHotRows
	ch.apply(t, streamed, besidePace, func(done int) {
		for len(kills) > 0 && done >= (5-len(kills))*streamed/5 {
			kills[0]()
			kills = kills[1:]
		}
	})
	want = revDigest(t, src.pool, ident)
	waitUntil(t, "both targets equal the source", 10*time.Minute, func(context.Context) bool {
		return worker.exited() || caughtUp(t, jdbcDB.Pool, want) && caughtUp(t, effDB.Pool, want)
	})
	require.False(t, worker.exited(), "the worker exited")
	stopJDBC()
	stopEff()
	require.Equal(t, want, revDigest(t, jdbcDB.Pool, "customers"), "the JDBC sink's target equals the source")
	require.Equal(t, want, revDigest(t, effDB.Pool, "customers"), "effectively's target equals the source")
	total := topicRecords(t, topic)
	resent := total - int64(rows+ch.changes+ch.deletes)

	jdbcTotal, jdbcApplying := medians(jdbcRuns)
	effTotal, effApplying := medians(effRuns)
	var b strings.Builder
	fmt.Fprintf(&b, "CDC: effectively beside the Debezium JDBC sink\n")
	fmt.Fprintf(&b, "throughput: %d rows snapshotted + %d changes (%d deletes, each with a tombstone) = %d records on %d partitions;\n",
		rows, changes, deletes, records, besidePartitions)
	fmt.Fprintf(&b, "  each sink alone from the topic's start until its target equals the source, %d runs each, alternating;\n", runs)
	fmt.Fprintf(&b, "  the time from the sink's start, and from the first row it wrote (without its start-up)\n")
	fmt.Fprintf(&b, "  %-12s %-34s %-22s %s\n", "sink", "runs", "median from start", "median from first row")
	for _, r := range []struct {
		name            string
		runs            []drainRun
		total, applying time.Duration
	}{{"JDBC sink", jdbcRuns, jdbcTotal, jdbcApplying}, {"effectively", effRuns, effTotal, effApplying}} {
		fmt.Fprintf(&b, "  %-12s %-34s %5.1f s %7.0f rec/s  %5.1f s %7.0f rec/s\n", r.name, runList(r.runs),
			r.total.Seconds(), float64(records)/r.total.Seconds(), r.applying.Seconds(), float64(records)/r.applying.Seconds())
	}
	fmt.Fprintf(&b, "  ratio effectively / JDBC sink (records/s): %.2f from start, %.2f from the first row\n",
		jdbcTotal.Seconds()/effTotal.Seconds(), jdbcApplying.Seconds()/effApplying.Seconds())
	fmt.Fprintf(&b, "staleness: both at once, %d more changes (%d deletes) at %d/s, half of them on %d hot rows; Connect SIGKILLed 2 times, the worker 2 times;\n",
		ch.changes-changes, ch.deletes-deletes, besidePace, besideHotRows)
	fmt.Fprintf(&b, "  %d records on the topic, %d of them re-sent by Debezium after Connect's kills\n", total, resent)
	fmt.Fprintf(&b, "  %-12s %8s %16s %13s %14s\n", "target", "samples", "stale rows seen", "distinct ids", "stale samples")
	for _, s := range []struct {
		name string
		*staleSampler
	}{{"JDBC sink", jdbcSampler}, {"effectively", effSampler}} {
		fmt.Fprintf(&b, "  %-12s %8d %16d %13d %14d\n", s.name, s.samples, s.staleRows, len(s.staleIDs), s.staleSamples)
	}
	fmt.Fprintf(&b, "  both targets equal the source: %s", want)
	t.Log("\n" + b.String())

	require.Positive(t, effSampler.samples)
	require.Zero(t, effSampler.staleRows, "effectively showed a row older than a state it had already shown")
	require.Zero(t, effDB.Count(t, `SELECT count(*) FROM dead_letters`))
}

const (
	// besidePartitions is the change topic's partition count; the JDBC sink
	// runs a task per partition, effectively a goroutine per partition.
	besidePartitions = 4
	// besidePace is the change rate of the staleness phase: both sinks keep
	// up, so what they show is the stream's present, not a backlog.
	besidePace = 2500
	// besideHotRows is how many rows take half the staleness phase's
	// changes.
	besideHotRows = 1000
)

// debeziumWithSchemas registers a Debezium PostgreSQL connector for table
// that writes JSON with schemas (the JDBC sink needs them; effectively's
// debezium format reads the envelope too) and returns its topic.
func debeziumWithSchemas(t *testing.T, src *cdcSource, name, table string) string {
	t.Helper()
	return src.connector(t, name, name, table, withJSONSchemas(map[string]string{
		"topic.creation.default.partitions": strconv.Itoa(besidePartitions),
	}))
}

// withJSONSchemas sets a connector's converters to JSON with the schema
// envelope (the worker's own are JSON without).
func withJSONSchemas(cfg map[string]string) map[string]string {
	cfg["key.converter"] = "org.apache.kafka.connect.json.JsonConverter"
	cfg["key.converter.schemas.enable"] = "true"
	cfg["value.converter"] = "org.apache.kafka.connect.json.JsonConverter"
	cfg["value.converter.schemas.enable"] = "true"
	return cfg
}

// registerConnector creates a connector in Kafka Connect and deletes it
// when the test ends.
func registerConnector(t *testing.T, connect, name string, cfg map[string]string) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"name": name, "config": cfg})
	require.NoError(t, err)
	resp, err := http.Post(connect+"/connectors", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	var answer bytes.Buffer
	_, _ = answer.ReadFrom(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode, "registering connector %s: %s", name, answer.String())
	t.Cleanup(func() { deleteConnector(connect, name) })
}

// deleteConnector deletes a connector (its tasks stop; an absent one is
// no error).
func deleteConnector(connect, name string) {
	req, _ := http.NewRequest(http.MethodDelete, connect+"/connectors/"+name, nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

// connectorStatus is Connect's status document for a connector.
func connectorStatus(connect, name string) string {
	resp, err := http.Get(connect + "/connectors/" + name + "/status")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return b.String()
}

// changer makes changes to the source table: 70% updates, 10% deletes, 10%
// re-inserts of a possibly deleted row, 10% new rows, 50 to a transaction.
// Every insert and update takes a new rev.
type changer struct {
	pool       *pgxpool.Pool
	table, seq string
	rng        *rand.Rand
	nextID     int64
	hot        int64 // when set, half the changes go to one of the rows 1..hot
	changes    int   // rows changed so far
	deletes    int   // rows deleted so far (each leaves a tombstone on the topic)
}

// apply makes n changes, at most perSecond a second (0: as fast as the
// source takes them), and calls after (if set) after each transaction with
// the changes made so far.
func (c *changer) apply(t *testing.T, n, perSecond int, after func(done int)) {
	t.Helper()
	ctx := context.Background()
	statuses := []string{"active", "packed", "shipped", "vip", "closed"}
	began := time.Now()
	for done := 0; done < n; {
		tx, err := c.pool.Begin(ctx)
		require.NoError(t, err)
		for i := 0; i < 50 && done < n; i++ {
			done++
			id := 1 + c.rng.Int64N(c.nextID-1)
			if c.hot > 0 && c.rng.IntN(2) == 0 {
				id = 1 + c.rng.Int64N(c.hot)
			}
			var tag interface{ RowsAffected() int64 }
			switch r := c.rng.IntN(100); {
			case r < 70:
				tag, err = tx.Exec(ctx, `UPDATE `+c.table+` SET status = $2, rev = nextval('`+c.seq+`') WHERE id = $1`, id, statuses[c.rng.IntN(len(statuses))])
			case r < 80:
				tag, err = tx.Exec(ctx, `DELETE FROM `+c.table+` WHERE id = $1`, id)
				if err == nil {
					c.deletes += int(tag.RowsAffected())
				}
			case r < 90:
				tag, err = tx.Exec(ctx, `INSERT INTO `+c.table+` (id, name, status) VALUES ($1::bigint, 'customer ' || $1::bigint, 'back') ON CONFLICT DO NOTHING`, id)
			default:
				tag, err = tx.Exec(ctx, `INSERT INTO `+c.table+` (id, name, status) VALUES ($1::bigint, 'customer ' || $1::bigint, 'new')`, c.nextID)
				c.nextID++
			}
			require.NoError(t, err)
			c.changes += int(tag.RowsAffected())
		}
		require.NoError(t, tx.Commit(ctx))
		if after != nil {
			after(done)
		}
		if perSecond > 0 {
			time.Sleep(time.Until(began.Add(time.Duration(done) * time.Second / time.Duration(perSecond))))
		}
	}
}

// jdbcSink is the Debezium JDBC sink in Kafka Connect, in upsert mode.
type jdbcSink struct {
	connect, topic string
}

// target is a schema of its own with the sink's table, created ahead
// (schema.evolution none), with the source's columns.
func (s *jdbcSink) target(t *testing.T) pgtest.DB {
	t.Helper()
	db := pgtest.NewEmpty(t)
	_, err := db.Pool.Exec(context.Background(), `CREATE TABLE customers (id bigint PRIMARY KEY, name text NOT NULL, status text NOT NULL, rev bigint NOT NULL)`)
	require.NoError(t, err)
	return db
}

// register starts the sink as connector name into db's table, from the
// topic's start (a sink connector's new group reads from the earliest
// offset). Batch size, pool and flush settings are the connector's
// defaults; one task per partition.
func (s *jdbcSink) register(t *testing.T, name string, db pgtest.DB) {
	t.Helper()
	u, err := url.Parse(stacktest.PostgresURL(t))
	require.NoError(t, err)
	pw, _ := u.User.Password()
	registerConnector(t, s.connect, name, withJSONSchemas(map[string]string{
		"connector.class":        "io.debezium.connector.jdbc.JdbcSinkConnector",
		"topics":                 s.topic,
		"tasks.max":              strconv.Itoa(besidePartitions),
		"connection.url":         "jdbc:postgresql://" + u.Host + u.Path,
		"connection.username":    u.User.Username(),
		"connection.password":    pw,
		"insert.mode":            "upsert",
		"primary.key.mode":       "record_key",
		"delete.enabled":         "true",
		"schema.evolution":       "none",
		"collection.name.format": db.Schema + ".customers",
	}))
}

// drain times one run alone: from registering a connector until its
// target equals want. The connector is deleted after, and its tasks gone.
func (s *jdbcSink) drain(t *testing.T, name, want string) drainRun {
	t.Helper()
	db := s.target(t)
	var d drainTimer
	s.register(t, name, db)
	waitUntil(t, "the JDBC sink's target equals the source", 10*time.Minute, func(context.Context) bool {
		return d.done(t, db.Pool, want)
	})
	deleteConnector(s.connect, name)
	waitUntil(t, "the JDBC sink's tasks have stopped", 2*time.Minute, func(ctx context.Context) bool {
		groups, err := kafkatest.Admin(t).DescribeGroups(ctx, "connect-"+name)
		if err != nil {
			return false
		}
		g, ok := groups["connect-"+name]
		return ok && len(g.Members) == 0
	})
	return d.result()
}

// effectivelySink is the stock binary with a config-only sink modelled
// on examples/customers: a replica gated by the change's commit order,
// with rev copied from the source, and a gated delete.
type effectivelySink struct {
	config string
}

func newEffectivelySink(t *testing.T, topic, table string) *effectivelySink {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "migrations"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "migrations", "00001_customers.sql"), []byte(`-- +goose Up
CREATE TABLE customers (
    id      bigint PRIMARY KEY,
    version numeric NOT NULL, -- the change's place in the commit order (event.Event.Sequence)
    name    text   NOT NULL,
    status  text   NOT NULL,
    rev     bigint NOT NULL
);

-- +goose Down
DROP TABLE customers;
`), 0o600))
	types := func(ops ...string) string {
		for i, op := range ops {
			ops[i] = "public." + table + "." + op
		}
		return "[" + strings.Join(ops, ", ") + "]"
	}
	config := fmt.Sprintf(`kafka:
  topics: [%[1]s]
postgres:
  migrations: [%[2]s]
topics:
  - name: %[1]s
    format: debezium
sinks:
  - name: customers
    topic: %[1]s
    types: %[3]s
    table: customers
    mode: upsert
    key: [id]
    version: version
    columns:
      - {name: id, from: subject, type: bigint}
      - {name: version, from: resourceversion}
      - {name: name, from: /after/name}
      - {name: status, from: /after/status}
      - {name: rev, from: /after/rev, type: bigint}
  - name: customers_deleted
    topic: %[1]s
    types: %[4]s
    table: customers
    mode: delete
    key: [id]
    version: version
    columns:
      - {name: id, from: subject, type: bigint}
      - {name: version, from: resourceversion}
`, topic, filepath.Join(dir, "migrations"), types("read", "create", "update"), types("delete"))
	path := filepath.Join(dir, "effectively.yaml")
	require.NoError(t, os.WriteFile(path, []byte(config), 0o600))
	return &effectivelySink{config: path}
}

// target is a migrated schema of its own and the worker's environment for
// it, with a group of its own (so the worker reads the topic from its
// start).
func (s *effectivelySink) target(t *testing.T) (pgtest.DB, []string) {
	t.Helper()
	db := pgtest.NewEmpty(t)
	group := kafkatest.NewGroup(t)
	env := []string{
		"EFFECTIVELY_KAFKA_BROKERS=" + strings.Join(kafkatest.Brokers(t), ","),
		"EFFECTIVELY_KAFKA_GROUP=" + group,
		"EFFECTIVELY_POSTGRES_URL=" + db.URL,
		"EFFECTIVELY_HTTP_ADDR=",
		"EFFECTIVELY_KAFKA_INSTANCE_ID=" + group,
		"EFFECTIVELY_KAFKA_SESSION_TIMEOUT=6s",
	}
	code, stdout, stderr := runCmd(t, env, "--config", s.config, "migrate")
	require.Equal(t, 0, code, "migrate: %s\n%s", stdout, stderr)
	return db, env
}

// drain times one run alone: from starting the worker until its target
// equals want; the worker is stopped after.
func (s *effectivelySink) drain(t *testing.T, want string) drainRun {
	t.Helper()
	db, env := s.target(t)
	var d drainTimer
	w := start(t, env, "--config", s.config, "run")
	waitUntil(t, "effectively's target equals the source", 10*time.Minute, func(context.Context) bool {
		return w.exited() || d.done(t, db.Pool, want)
	})
	require.False(t, w.exited(), "the worker exited: %s", tail(w.stderr.String(), 20))
	w.signal(t, syscall.SIGTERM)
	w.wait(t, time.Minute)
	return d.result()
}

// drainTimer times a run from its first poll (the sink's start) to its
// target equal to the source, and separately from the first row the
// target showed (without the sink's start-up: Connect's task start, the
// worker's, the group join).
type drainTimer struct {
	began, first, end time.Time
}

func (d *drainTimer) done(t *testing.T, pool *pgxpool.Pool, want string) bool {
	t.Helper()
	now := time.Now()
	if d.began.IsZero() {
		d.began = now
	}
	if d.first.IsZero() {
		var any bool
		if pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM customers)`).Scan(&any) == nil && any {
			d.first = now
		}
	}
	if !caughtUp(t, pool, want) {
		return false
	}
	d.end = time.Now()
	return true
}

// drainRun is one sink's run alone: its whole time and its time from the
// first row on.
type drainRun struct {
	total, applying time.Duration
}

func (d *drainTimer) result() drainRun {
	return drainRun{total: d.end.Sub(d.began), applying: d.end.Sub(d.first)}
}

// revDigestSQL digests a target: its count, the sum of its revs (cheap to
// poll) and the md5 of its rows in id order.
const revDigestSQL = `SELECT count(*), coalesce(sum(rev), 0), coalesce(md5(string_agg(id::text || '|' || name || '|' || status || '|' || rev::text, ',' ORDER BY id)), '') FROM %s`

func revDigest(t *testing.T, pool *pgxpool.Pool, table string) string {
	t.Helper()
	var n, sum int64
	var md5 string
	require.NoError(t, pool.QueryRow(context.Background(), fmt.Sprintf(revDigestSQL, table)).Scan(&n, &sum, &md5))
	return fmt.Sprintf("%d rows, rev sum %d, md5 %s", n, sum, md5)
}

// caughtUp reports whether a target's customers equal the digest want,
// digesting only once its count and rev sum match.
func caughtUp(t *testing.T, pool *pgxpool.Pool, want string) bool {
	t.Helper()
	var n, sum int64
	if err := pool.QueryRow(context.Background(), `SELECT count(*), coalesce(sum(rev), 0) FROM customers`).Scan(&n, &sum); err != nil {
		return false
	}
	if !strings.HasPrefix(want, fmt.Sprintf("%d rows, rev sum %d,", n, sum)) {
		return false
	}
	return revDigest(t, pool, "customers") == want
}

// staleSampler reads every (id, rev) of a target's customers every 200 ms
// and counts the rows older than a state the target had already shown: a
// rev below the highest it showed for that id, or that highest rev again
// after the row had been shown deleted (an older state come back; a row
// inserted again at the source has a new rev). A row missing when it
// should not be (an older delete re-applied) is not counted: the sampler
// cannot tell it from a delete.
type staleSampler struct {
	pool *pgxpool.Pool

	mu sync.Mutex
	// shown is, per id, the newest state shown: 2·rev for the row at rev,
	// 2·rev+1 for the row deleted after its rev.
	shown        map[int64]int64
	samples      int
	staleRows    int // stale rows over all samples
	staleSamples int // samples with a stale row
	staleIDs     map[int64]bool
}

func (s *staleSampler) run() (stop func()) {
	s.shown, s.staleIDs = map[int64]int64{}, map[int64]bool{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			s.sample(ctx)
			time.Sleep(200 * time.Millisecond)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

func (s *staleSampler) sample(ctx context.Context) {
	rows, err := s.pool.Query(ctx, `SELECT id, rev FROM customers`)
	if err != nil {
		return
	}
	present := make(map[int64]int64, len(s.shown))
	for rows.Next() {
		var id, rev int64
		if rows.Scan(&id, &rev) == nil {
			present[id] = 2 * rev
		}
	}
	rows.Close()
	if rows.Err() != nil {
		return // a partial read says nothing about the rows it did not reach
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	stale := 0
	for id, state := range present {
		if shown, ok := s.shown[id]; ok && state < shown {
			stale++
			s.staleIDs[id] = true
			continue
		}
		s.shown[id] = state
	}
	for id, shown := range s.shown {
		if _, ok := present[id]; !ok {
			s.shown[id] = shown | 1
		}
	}
	s.staleRows += stale
	if stale > 0 {
		s.staleSamples++
	}
}

func (r drainRun) String() string {
	return fmt.Sprintf("%.1f s (%.1f s from the first row)", r.total.Seconds(), r.applying.Seconds())
}

// medians is the median whole time and the median time from the first
// row of runs.
func medians(runs []drainRun) (total, applying time.Duration) {
	var totals, applyings []time.Duration
	for _, r := range runs {
		totals, applyings = append(totals, r.total), append(applyings, r.applying)
	}
	return median(totals), median(applyings)
}

// runList lists runs' times in seconds: whole (from the first row).
func runList(runs []drainRun) string {
	parts := make([]string, len(runs))
	for i, r := range runs {
		parts[i] = fmt.Sprintf("%.1f (%.1f)", r.total.Seconds(), r.applying.Seconds())
	}
	return strings.Join(parts, ", ") + " s"
}
