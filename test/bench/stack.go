package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/examples/accounts"
	"github.com/effectively-io/effectively/examples/accounts/workload"
	"github.com/effectively-io/effectively/schema"
)

// Environment variables naming the services (stack/with-stack.sh exports
// them; the same as the test suites read).
const (
	postgresURLEnv  = "EFFECTIVELY_TEST_POSTGRES_URL"
	kafkaBrokersEnv = "EFFECTIVELY_TEST_KAFKA_BROKERS"
)

// startTime is the workload's fixed StartTime: with the seed it makes the
// stream byte-identical from run to run.
var startTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// bench holds the services and everything created on them.
type bench struct {
	opts    options
	pgURL   string
	brokers []string
	id      string // makes every name this run creates unique

	kcl *kgo.Client
	adm *kadm.Client

	// topic is the pre-produced topic every throughput run reads; exp is
	// what a correct worker ends with after all of it.
	topic  string
	wcfg   workload.Config
	exp    workload.Expected
	counts []int64 // records per partition of topic
	// valueAvg is the mean record value size; produceTook how long the
	// topic took to produce.
	valueAvg    float64
	produceTook time.Duration

	// sinks are the upsert-only streams of E-sink and E-sink-avro, by
	// kind; registryURL is the schema registry E-sink-avro uses (empty:
	// none, E-sink-avro is skipped).
	sinks       map[string]*sinkStream
	registryURL string

	// pgPid is the postmaster of the benchmark's PostgreSQL (0 when it is
	// not on this machine): its process tree's CPU is PostgreSQL's share.
	pgPid int

	// bin is a private copy of the worker binary, so that a rebuild of
	// opts.bin during the benchmark cannot change the worker between runs.
	bin string

	mu             sync.Mutex
	cleanups       []func(context.Context)
	seq            int
	schemaVersions map[string]int64 // by migrator
	versionWarned  bool
	warnings       []string
	sinkURL        string // otlpSink's
}

func newBench(ctx context.Context, opts options) (*bench, error) {
	pgURL := os.Getenv(postgresURLEnv)
	brokers := os.Getenv(kafkaBrokersEnv)
	if pgURL == "" || brokers == "" {
		return nil, fmt.Errorf("%s and %s must be set: run `make bench` (it starts the local stack and exports them) or export the addresses of a running stack", postgresURLEnv, kafkaBrokersEnv)
	}
	if _, err := os.Stat(opts.bin); err != nil {
		return nil, fmt.Errorf("the worker binary: %w; fix: run from the repository root after `make build` (make bench does both), or pass -bin", err)
	}
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	b := &bench{opts: opts, pgURL: pgURL, brokers: strings.Split(brokers, ","), id: hex.EncodeToString(id),
		sinks: map[string]*sinkStream{}, registryURL: os.Getenv(registryURLEnv)}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...))
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	b.kcl, b.adm = cl, kadm.NewClient(cl)
	if err := b.copyWorker(); err != nil {
		b.cleanup()
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		b.cleanup()
		return nil, fmt.Errorf("cannot reach Kafka at %s (%s): %w", brokers, kafkaBrokersEnv, err)
	}
	conn, err := pgx.Connect(pctx, pgURL)
	if err != nil {
		b.cleanup()
		return nil, fmt.Errorf("cannot reach PostgreSQL (%s): %w", postgresURLEnv, err)
	}
	b.pgPid = postmaster(pctx, conn)
	_ = conn.Close(pctx)
	return b, nil
}

// copyWorker copies opts.bin to a temporary directory removed at the end.
func (b *bench) copyWorker() error {
	src, err := os.ReadFile(b.opts.bin)
	if err != nil {
		return fmt.Errorf("reading the worker binary: %w", err)
	}
	dir, err := os.MkdirTemp("", "effectively-bench-")
	if err != nil {
		return err
	}
	b.onCleanup(func(context.Context) { os.RemoveAll(dir) })
	b.bin = filepath.Join(dir, "effectively")
	if err := os.WriteFile(b.bin, src, 0o755); err != nil {
		return fmt.Errorf("copying the worker binary: %w", err)
	}
	return nil
}

// progress prints a progress line to stderr.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench %s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// onCleanup registers fn to run at the end, most recent first.
func (b *bench) onCleanup(fn func(context.Context)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cleanups = append(b.cleanups, fn)
}

func (b *bench) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b.mu.Lock()
	fns := b.cleanups
	b.cleanups = nil
	b.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i](ctx)
	}
	b.kcl.Close()
}

// name returns a unique name for a resource of kind: Kafka names use dots,
// schema names underscores.
func (b *bench) name(kind string) string {
	b.mu.Lock()
	b.seq++
	n := b.seq
	b.mu.Unlock()
	return fmt.Sprintf("bench.%s.%s.%d", b.id, strings.ToLower(kind), n)
}

// newTopic creates a topic that is deleted at the end. The generated
// records carry a fixed, possibly old, timestamp: time-based retention is
// off so the broker never deletes them mid-benchmark.
func (b *bench) newTopic(ctx context.Context, kind string) (string, error) {
	never := "-1"
	return b.newTopicConfig(ctx, kind, map[string]*string{"retention.ms": &never})
}

// newTopicConfig is newTopic with the topic configs given.
func (b *bench) newTopicConfig(ctx context.Context, kind string, configs map[string]*string) (string, error) {
	name := b.name(kind)
	resp, err := b.adm.CreateTopic(ctx, int32(b.opts.partitions), 1, configs, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return "", fmt.Errorf("creating topic %s: %w", name, err)
	}
	b.onCleanup(func(ctx context.Context) {
		if _, err := b.adm.DeleteTopics(ctx, name); err != nil {
			progress("warning: deleting topic %s: %v", name, err)
		}
	})
	return name, nil
}

// deleteGroup removes a finished run's consumer group (it must be empty).
func (b *bench) deleteGroup(ctx context.Context, group string) {
	resp, err := b.adm.DeleteGroups(ctx, group)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		progress("warning: deleting group %s: %v", group, err)
	}
}

// db is a run's own freshly migrated schema.
type db struct {
	schema string
	url    string // search_path set: hand it to the worker
	pool   *pgxpool.Pool
	drop   func(context.Context)
}

// Migrators of newDB.
const (
	// migrateInProcess applies the migrations compiled into this program
	// (schema.Migrate), for B2's in-process applier.
	migrateInProcess = "in-process"
	// migrateWorker runs the worker binary's own `effectively migrate`, so
	// its schema is exactly the one the worker checks for.
	migrateWorker = "worker"
)

// newDB creates and migrates a uniquely named schema. drop removes it (runs
// drop theirs as soon as they are done: a million claims take room); a
// schema not dropped by then goes at the end.
// migrateArgs go to the worker's migrate (migrateWorker only).
func (b *bench) newDB(ctx context.Context, kind, migrator string, migrateArgs ...string) (*db, error) {
	name := strings.ReplaceAll(b.name(kind), ".", "_")
	admin, err := pgx.Connect(ctx, b.pgURL)
	if err != nil {
		return nil, fmt.Errorf("connecting to postgres: %w", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("creating schema %s: %w", name, err)
	}
	d := &db{schema: name}
	var once sync.Once
	d.drop = func(ctx context.Context) {
		once.Do(func() {
			if d.pool != nil {
				d.pool.Close()
			}
			conn, err := pgx.Connect(ctx, b.pgURL)
			if err == nil {
				_, err = conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE")
				_ = conn.Close(ctx)
			}
			if err != nil {
				progress("warning: dropping schema %s: %v", name, err)
			}
		})
	}
	b.onCleanup(d.drop)

	u, err := url.Parse(b.pgURL)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", postgresURLEnv, err)
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	d.url = u.String()
	if migrator == migrateWorker {
		cmd := exec.CommandContext(ctx, b.bin, append([]string{"migrate"}, migrateArgs...)...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "EFFECTIVELY_POSTGRES_URL=" + d.url}
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("migrating schema %s with %s migrate: %w\n%s", name, b.opts.bin, err, out)
		}
	} else if _, err := schema.Migrate(ctx, d.url, zap.NewNop(), accounts.Migrations()); err != nil {
		return nil, fmt.Errorf("migrating schema %s: %w", name, err)
	}
	cfg, err := pgxpool.ParseConfig(d.url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 2
	if d.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, fmt.Errorf("opening a pool on schema %s: %w", name, err)
	}
	b.checkSchemaVersion(ctx, d, migrator)
	return d, nil
}

// checkSchemaVersion warns when the worker binary and this program migrate
// to different schema versions: they were built from different trees, and
// B2 would not run the worker's SQL.
func (b *bench) checkSchemaVersion(ctx context.Context, d *db, migrator string) {
	var v int64
	if err := d.pool.QueryRow(ctx, `SELECT coalesce(max(version_id), 0) FROM `+schema.VersionTable+` WHERE is_applied`).Scan(&v); err != nil {
		progress("warning: reading the schema version of %s: %v", d.schema, err)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.schemaVersions == nil {
		b.schemaVersions = map[string]int64{}
	}
	b.schemaVersions[migrator] = v
	w, wok := b.schemaVersions[migrateWorker]
	p, pok := b.schemaVersions[migrateInProcess]
	if wok && pok && w != p && !b.versionWarned {
		b.versionWarned = true
		msg := fmt.Sprintf("the worker binary migrates to schema version %d, this program to %d: they were built from different trees, so B2 does not run the worker's exact SQL; rebuild both (make bench)", w, p)
		progress("WARNING: %s", msg)
		b.warnings = append(b.warnings, msg)
	}
}

// applied is the sum of the stored positions of group on topic: how many
// records the group has gone past (offsets start at 0 and have no gaps on
// these topics).
func (d *db) applied(ctx context.Context, group, topic string) (int64, error) {
	var n int64
	err := d.pool.QueryRow(ctx, `SELECT coalesce(sum(next_offset), 0)::bigint FROM consumer_offsets WHERE consumer_group = $1 AND topic = $2`, group, topic).Scan(&n)
	return n, err
}

// check compares the database with exp cheaply: one claim per distinct
// event, and the ledger's sum per currency. It returns the differences.
func (d *db) check(ctx context.Context, exp workload.Expected) ([]string, error) {
	var problems []string
	var claims int64
	if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM effectively_claims`).Scan(&claims); err != nil {
		return nil, fmt.Errorf("counting claims: %w", err)
	}
	if claims != int64(exp.Distinct) {
		problems = append(problems, fmt.Sprintf("effectively_claims has %d rows, want %d (distinct events)", claims, exp.Distinct))
	}
	ledger, err := d.checkLedger(ctx, exp)
	return append(problems, ledger...), err
}

// checkLedger compares the ledger's sum per currency with exp's (it holds
// whatever retention did to the claims). It returns the differences.
func (d *db) checkLedger(ctx context.Context, exp workload.Expected) ([]string, error) {
	var problems []string
	rows, err := d.pool.Query(ctx, `SELECT currency, sum(amount_cents)::bigint FROM ledger_entries GROUP BY currency`)
	if err != nil {
		return nil, fmt.Errorf("summing the ledger: %w", err)
	}
	got := map[string]int64{}
	var cur string
	var sum int64
	if _, err := pgx.ForEachRow(rows, []any{&cur, &sum}, func() error { got[strings.TrimSpace(cur)] = sum; return nil }); err != nil {
		return nil, fmt.Errorf("summing the ledger: %w", err)
	}
	for c, want := range exp.LedgerTotal {
		if got[c] != want {
			problems = append(problems, fmt.Sprintf("ledger total %s is %d, want %d", c, got[c], want))
		}
	}
	for c, v := range got {
		if _, ok := exp.LedgerTotal[c]; !ok {
			problems = append(problems, fmt.Sprintf("ledger total %s is %d, want none", c, v))
		}
	}
	return problems, nil
}

// producer returns a client producing to topic the way the benchmark's
// topics are produced: idempotent, murmur2 key partitioning (the defaults),
// 5 ms linger; no delivery timeout (the records' timestamps are old, and
// franz-go would measure it from them).
func (b *bench) producer(topic string) (*kgo.Client, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(b.brokers...),
		kgo.DefaultProduceTopic(topic),
		kgo.ProducerLinger(5*time.Millisecond),
		kgo.MetadataMinAge(250*time.Millisecond),
	)
	if err != nil {
		return nil, fmt.Errorf("kafka producer: %w", err)
	}
	return cl, nil
}

// toKafka makes a generated record a Kafka record.
func toKafka(r workload.Record) *kgo.Record {
	return &kgo.Record{
		Key: r.Key, Value: r.Value, Timestamp: r.Timestamp,
		Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte(workload.ContentType)}},
	}
}

// asyncProducer produces without waiting for each ack and remembers the
// first failure.
type asyncProducer struct {
	cl    *kgo.Client
	acked atomic.Int64
	mu    sync.Mutex
	err   error
}

func (p *asyncProducer) produce(ctx context.Context, r *kgo.Record) {
	p.cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
		if err != nil {
			p.mu.Lock()
			if p.err == nil {
				p.err = err
			}
			p.mu.Unlock()
			return
		}
		p.acked.Add(1)
	})
}

// flush waits for every ack.
func (p *asyncProducer) flush(ctx context.Context) error {
	if err := p.cl.Flush(ctx); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// produceMain creates the benchmark topic and produces the workload to it,
// waiting for every ack.
func (b *bench) produceMain(ctx context.Context) error {
	topic, err := b.newTopic(ctx, "main")
	if err != nil {
		return err
	}
	b.topic = topic
	b.wcfg = workload.Config{
		Accounts: b.opts.accounts, Events: b.opts.events,
		Duplicates: 0.1, OutOfOrder: 0.1,
		Seed: b.opts.seed, StartTime: startTime,
	}
	cl, err := b.producer(topic)
	if err != nil {
		return err
	}
	defer cl.Close()
	p := &asyncProducer{cl: cl}
	start := time.Now()
	progress("producing %d records to %s", b.opts.events, topic)
	n, bytes := 0, 0
	b.exp, err = workload.Generate(b.wcfg, func(r workload.Record) error {
		p.produce(ctx, toKafka(r))
		n++
		bytes += len(r.Value)
		if n%250_000 == 0 {
			progress("produced %d records", n)
		}
		return ctx.Err()
	})
	if err != nil {
		return fmt.Errorf("producing the workload: %w", err)
	}
	if err := p.flush(ctx); err != nil {
		return fmt.Errorf("producing the workload: %w", err)
	}
	b.produceTook = time.Since(start)
	b.valueAvg = float64(bytes) / float64(max(n, 1))
	progress("produced %d records in %s", p.acked.Load(), b.produceTook.Round(time.Millisecond))

	ends, err := b.adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("listing the end offsets of %s: %w", topic, err)
	}
	b.counts = make([]int64, b.opts.partitions)
	var total int64
	ends.Each(func(o kadm.ListedOffset) {
		b.counts[o.Partition] = o.Offset
		total += o.Offset
	})
	if total != int64(b.opts.events) {
		return fmt.Errorf("topic %s holds %d records, want %d", topic, total, b.opts.events)
	}
	return nil
}

// errStalled is a run that stopped making progress (a hang guard, not a
// performance bound).
var errStalled = errors.New("no progress")

// postmaster returns the pid of the PostgreSQL server conn is connected to,
// when it runs on this machine (the parent of the connection's backend, a
// process named postgres), else 0.
func postmaster(ctx context.Context, conn *pgx.Conn) int {
	var backend int
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		return 0
	}
	ppid, comm, err := parentOf(backend)
	if err != nil || comm != "postgres" {
		progress("PostgreSQL's backend %d is not a local postgres process: PostgreSQL CPU is counted machine-wide by process name", backend)
		return 0
	}
	return ppid
}
