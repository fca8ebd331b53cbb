package test

import (
	"bytes"
	"context"
	encbinary "encoding/binary"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/effectively-io/effectively/internal/apitest"
	"github.com/effectively-io/effectively/internal/kafkatest"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/internal/proctest"
)

// Change data capture end to end: a real source PostgreSQL with logical
// replication, the real Debezium PostgreSQL connector in a real Kafka
// Connect (stack/stack.sh up cdc), the real broker, and the stock binary
// with examples/customers' configuration. `make cdc` runs these; without a
// CDC source (EFFECTIVELY_TEST_CDC_SOURCE_URL, EFFECTIVELY_TEST_CONNECT_URL)
// they skip.

// cdcSource is the CDC stack the suite runs against.
type cdcSource struct {
	url     string // the source database, as the replication role
	connect string // Kafka Connect's REST API
	pool    *pgxpool.Pool
}

func newCDCSource(t *testing.T) *cdcSource {
	t.Helper()
	src, conn := os.Getenv("EFFECTIVELY_TEST_CDC_SOURCE_URL"), os.Getenv("EFFECTIVELY_TEST_CONNECT_URL")
	if src == "" || conn == "" {
		t.Skip("no CDC source: `make cdc` starts one (stack/stack.sh up cdc: a source PostgreSQL with logical replication and Kafka Connect with Debezium) and runs this suite")
	}
	pool, err := pgxpool.New(context.Background(), src)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return &cdcSource{url: src, connect: conn, pool: pool}
}

// connector registers a Debezium PostgreSQL connector for table, writing
// to <prefix>.public.<table> with its settings overridden by extra (nil:
// JSON without schemas, 4 partitions), and returns the topic. The
// connector, its slot, its publication and the topic are removed when the
// test ends.
func (c *cdcSource) connector(t *testing.T, name, prefix, table string, extra map[string]string) string {
	t.Helper()
	u, err := url.Parse(c.url)
	require.NoError(t, err)
	slot := slotName(name)
	topic := prefix + ".public." + table
	// Registered before the connector, so it runs after the connector is
	// deleted: an active slot cannot be dropped.
	t.Cleanup(func() {
		ctx := context.Background()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
			if _, err := c.pool.Exec(ctx, `SELECT pg_drop_replication_slot($1) WHERE EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`, slot); err == nil {
				break
			}
		}
		_, _ = c.pool.Exec(ctx, `DROP PUBLICATION IF EXISTS `+pgx.Identifier{slot}.Sanitize())
		_, _ = kafkatest.Admin(t).DeleteTopics(ctx, topic)
	})
	cfg := debeziumConnectorConfig(u, slot, prefix, table)
	maps.Copy(cfg, extra)
	registerConnector(t, c.connect, name, cfg)
	return topic
}

// debeziumConnectorConfig is the Debezium PostgreSQL connector's
// configuration for table of the source database at src, through slot
// (and its publication), writing to <prefix>.public.<table> as JSON
// without schemas in 4 partitions: what docs/guides/change-data-capture.md
// prints (TestCDCGuideShowsWhatMakeCDCRuns).
func debeziumConnectorConfig(src *url.URL, slot, prefix, table string) map[string]string {
	pw, _ := src.User.Password()
	return map[string]string{
		"connector.class":                           "io.debezium.connector.postgresql.PostgresConnector",
		"database.hostname":                         src.Hostname(),
		"database.port":                             src.Port(),
		"database.user":                             src.User.Username(),
		"database.password":                         pw,
		"database.dbname":                           strings.TrimPrefix(src.Path, "/"),
		"topic.prefix":                              prefix,
		"plugin.name":                               "pgoutput",
		"slot.name":                                 slot,
		"publication.name":                          slot,
		"publication.autocreate.mode":               "filtered",
		"table.include.list":                        "public." + table,
		"snapshot.mode":                             "initial",
		"tombstones.on.delete":                      "true",
		"topic.creation.default.partitions":         "4",
		"topic.creation.default.replication.factor": "1",
		"key.converter":                             "org.apache.kafka.connect.json.JsonConverter",
		"key.converter.schemas.enable":              "false",
		"value.converter":                           "org.apache.kafka.connect.json.JsonConverter",
		"value.converter.schemas.enable":            "false",
	}
}

// slotName is the replication slot (and publication) of connector name.
func slotName(name string) string { return strings.ReplaceAll(name, "-", "_") }

// waitStreamingOffset waits until connector name has committed an offset
// from streaming (lsn_proc), not only from its snapshot.
func (c *cdcSource) waitStreamingOffset(t *testing.T, name string) {
	t.Helper()
	waitUntil(t, "connector "+name+" commits a streaming offset", 2*time.Minute, func(ctx context.Context) bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.connect+"/connectors/"+name+"/offsets", nil)
		if err != nil {
			return false
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var body strings.Builder
		_, _ = io.Copy(&body, resp.Body)
		return resp.StatusCode == http.StatusOK && strings.Contains(body.String(), `"lsn_proc"`)
	})
}

// killConnect SIGKILLs the Kafka Connect worker and starts it again: its
// connectors resume from their last committed offsets, re-sending what
// they had sent since.
func killConnect(t *testing.T) {
	t.Helper()
	u, err := url.Parse(os.Getenv("EFFECTIVELY_TEST_CONNECT_URL"))
	require.NoError(t, err)
	stackDir := os.Getenv("EFFECTIVELY_STACK_DIR")
	if stackDir == "" {
		stackDir = "/var/tmp/effectively"
	}
	b, err := os.ReadFile(filepath.Join(stackDir, "connect-"+u.Port(), "connect.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	// Gone, and its port free, before a new worker takes the port.
	waitUntil(t, "the killed Connect worker is gone", time.Minute, func(context.Context) bool {
		if syscall.Kill(pid, 0) == nil {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err != nil || !strings.Contains(string(b), ") Z ") {
				return false
			}
		}
		c, err := net.DialTimeout("tcp", u.Host, time.Second)
		if err == nil {
			c.Close()
			return false
		}
		return true
	})
	out, err := exec.Command("../stack/stack.sh", "up", "cdc").CombinedOutput()
	require.NoError(t, err, "restarting Kafka Connect: %s", out)
}

// avroConverters are a connector's converters for Avro through the
// stack's registry in the Confluent wire format: Apicurio's converter
// (stack/cdc.sh) with 4-byte content IDs and no headers, as Confluent's
// AvroConverter writes, registering the schemas it writes.
func avroConverters(t *testing.T) map[string]string {
	t.Helper()
	reg := os.Getenv("EFFECTIVELY_TEST_REGISTRY_URL")
	if reg == "" {
		t.Skip("no schema registry: stack/stack.sh up registry (make cdc starts one)")
	}
	cfg := map[string]string{}
	for _, side := range []string{"key", "value"} {
		for k, v := range map[string]string{
			"":                                   "io.apicurio.registry.utils.converter.AvroConverter",
			".apicurio.registry.url":             strings.TrimSuffix(reg, "/apis/ccompat/v7") + "/apis/registry/v2",
			".apicurio.registry.auto-register":   "true",
			".apicurio.registry.find-latest":     "true",
			".apicurio.registry.as-confluent":    "true",
			".apicurio.registry.use-id":          "contentId",
			".apicurio.registry.headers.enabled": "false",
			".apicurio.registry.id-handler":      "io.apicurio.registry.serde.Legacy4ByteIdHandler",
		} {
			cfg[side+".converter"+k] = v
		}
	}
	return cfg
}

// customersConfig is examples/customers' configuration for topic and
// source table.
func customersConfig(t *testing.T, topic, table string) string {
	t.Helper()
	b, err := os.ReadFile("../examples/customers/effectively.yaml")
	require.NoError(t, err)
	abs, err := filepath.Abs("../examples/customers/migrations")
	require.NoError(t, err)
	cfg := string(b)
	for _, r := range [][2]string{
		{"src.public.customers", topic},
		{"public.customers.", "public." + table + "."},
		{"migrations: [examples/customers/migrations]", "migrations: [" + abs + "]"},
	} {
		require.Contains(t, cfg, r[0])
		cfg = strings.ReplaceAll(cfg, r[0], r[1])
	}
	path := filepath.Join(t.TempDir(), "effectively.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	return path
}

const cdcDigestSQL = `SELECT count(*), coalesce(md5(string_agg(id::text || '|' || name || '|' || status, ',' ORDER BY id)), '') FROM %s`

// A table snapshotted, then changed (updates, deletes, inserts, re-inserts
// of deleted rows) while Kafka Connect and the workers are SIGKILLed and
// restarted (Debezium re-sends from its last committed offset: duplicates
// are certain), into two targets: the stock binary with examples/customers'
// config-only sinks, and examples/customers-go's Go build, whose handler
// also notifies each transition to shipped through the outbox. Each
// replica equals the source row for row (by digest) and never showed a row
// older than it had shown before; each history has exactly one row per
// change; and the Go build recorded exactly one notification per
// transition, each delivered.
func TestCDCReplicaThroughKills(t *testing.T) {
	src := newCDCSource(t)
	cdcReplicaThroughKills(t, src, envInt("EFFECTIVELY_TEST_CDC_ROWS", 20_000), envInt("EFFECTIVELY_TEST_CDC_CHANGES", 40_000), nil, nil)
}

// The same with Avro change events through the schema registry (Apicurio's
// converter, the Confluent wire format, value and key), a fifth of the
// size.
func TestCDCAvroReplicaThroughKills(t *testing.T) {
	src := newCDCSource(t)
	converters := avroConverters(t)
	cdcReplicaThroughKills(t, src, envInt("EFFECTIVELY_TEST_CDC_ROWS", 20_000)/5, envInt("EFFECTIVELY_TEST_CDC_CHANGES", 40_000)/5,
		converters, []string{"EFFECTIVELY_SCHEMA_REGISTRY_URL=" + os.Getenv("EFFECTIVELY_TEST_REGISTRY_URL")})
}

// cdcReplicaThroughKills runs the kill test with rows snapshotted and ops
// changes, the connector's converters (nil: JSON) and the workers'
// extra environment.
func cdcReplicaThroughKills(t *testing.T, src *cdcSource, rows, ops int, converters map[string]string, workerEnv []string) {
	ctx := context.Background()
	// The Go build handles public.customers' change events: the source
	// table has that name (one run at a time per source database).
	const table = "customers"
	ident := pgx.Identifier{table}.Sanitize()
	_, err := src.pool.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %s;
CREATE TABLE %s (id bigint PRIMARY KEY, name text NOT NULL, status text NOT NULL);
ALTER TABLE %s REPLICA IDENTITY FULL;
INSERT INTO %s SELECT g, 'customer ' || g, 'new' FROM generate_series(1, %d) g`, ident, ident, ident, ident, rows))
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = src.pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+ident) })

	prefix := "cdc" + strconv.FormatUint(rand.Uint64()%1_000_000, 10)
	topic := prefix + ".public." + table
	src.connector(t, prefix, prefix, table, converters)

	stock := newCDCTarget(t, binary, customersConfig(t, topic, table), prefix, workerEnv...)
	notify := apitest.NewReceiver(t, "/notifications", http.StatusAccepted)
	goConfig := filepath.Join(t.TempDir(), "customers-go.yaml")
	require.NoError(t, os.WriteFile(goConfig, fmt.Appendf(nil, "kafka:\n  topics: [%s]\ntopics:\n  - {name: %s, format: debezium}\n", topic, topic), 0o600))
	goBuild := newCDCTarget(t, exampleBuild(t, "customers-go"), goConfig, prefix+"-go", append([]string{
		"EFFECTIVELY_TARGETS_NOTIFY_URL=" + notify.URL,
		// Short outbox leases: a call caught by a kill is made again soon
		// (with the same idempotency key).
		"EFFECTIVELY_OUTBOX_CALL_TIMEOUT=2s", "EFFECTIVELY_OUTBOX_LEASE_GRACE=2s"}, workerEnv...)...)
	targets := []*cdcTarget{stock, goBuild}

	// The snapshot reaches the topic before the changes begin, so that
	// every change is streamed after it: the history's count is exact.
	waitUntil(t, "the snapshot is on the topic", 3*time.Minute, func(context.Context) bool {
		return topicRecords(t, topic) >= int64(rows)
	})
	for _, tg := range targets {
		tg.start(t)
	}

	rng := rand.New(rand.NewPCG(29, 1))
	changes := 0
	nextID := int64(rows) + 1
	statuses := []string{"active", "packed", "shipped", "vip", "closed"}
	// The source's statuses as the test made them, to count the
	// transitions to shipped the Go build must notify.
	status := make(map[int64]string, rows)
	for id := int64(1); id <= int64(rows); id++ {
		status[id] = "new"
	}
	killsConnect, killsWorker, deletes, shipped := 0, 0, 0, 0
	// Rows a transaction touched more than once: their changes share a
	// transaction and must still be two versions.
	twiceInOneTx := 0
	for done := 0; done < ops; {
		tx, err := src.pool.Begin(ctx)
		require.NoError(t, err)
		touched := map[int64]bool{}
		for i := 0; i < 50 && done < ops; i++ {
			done++
			id := 1 + rng.Int64N(nextID-1)
			if touched[id] {
				twiceInOneTx++
			}
			touched[id] = true
			var tag interface{ RowsAffected() int64 }
			switch r := rng.IntN(100); {
			case r < 70:
				to := statuses[rng.IntN(len(statuses))]
				tag, err = tx.Exec(ctx, `UPDATE `+ident+` SET status = $2 WHERE id = $1`, id, to)
				if from, ok := status[id]; ok && err == nil {
					if from != "shipped" && to == "shipped" {
						shipped++
					}
					status[id] = to
				}
			case r < 80:
				tag, err = tx.Exec(ctx, `DELETE FROM `+ident+` WHERE id = $1`, id)
				if err == nil {
					deletes += int(tag.RowsAffected())
					delete(status, id)
				}
			case r < 90:
				// A deleted row inserted again (a no-op when it exists).
				tag, err = tx.Exec(ctx, `INSERT INTO `+ident+` VALUES ($1::bigint, 'customer ' || $1::bigint, 'back') ON CONFLICT DO NOTHING`, id)
				if _, ok := status[id]; !ok && err == nil {
					status[id] = "back"
				}
			default:
				tag, err = tx.Exec(ctx, `INSERT INTO `+ident+` VALUES ($1::bigint, 'customer ' || $1::bigint, 'new')`, nextID)
				status[nextID] = "new"
				nextID++
			}
			require.NoError(t, err)
			changes += int(tag.RowsAffected())
		}
		require.NoError(t, tx.Commit(ctx))
		switch {
		case done == ops/3 || done == 2*ops/3:
			// A kill before the connector first commits a streaming
			// offset makes it snapshot again, not re-send: the changes
			// between the two snapshots are never streamed (Debezium
			// skips them as the new snapshot's), and a replica that took
			// the first keeps their rows (docs/guides/change-data-capture.md,
			// a lost slot). So the kill waits for that commit.
			src.waitStreamingOffset(t, prefix)
			killConnect(t)
			killsConnect++
		case done%(ops/4) == 0:
			for _, tg := range targets {
				tg.kill(t)
				tg.start(t)
			}
			killsWorker++
		}
	}

	want := cdcDigest(t, src.pool, ident)
	for _, tg := range targets {
		t.Cleanup(func() {
			if t.Failed() {
				logCDCDiff(t, src.pool, ident, tg, topic)
			}
		})
		waitUntil(t, tg.name+"'s replica equals the source", 5*time.Minute, func(context.Context) bool {
			return cdcDigest(t, tg.db.Pool, "customers") == want || tg.worker.Exited()
		})
		require.False(t, tg.worker.Exited(), "%s's worker exited: %s", tg.name, tail(tg.worker.Stderr.String(), 20))
	}
	records := topicRecords(t, topic)
	// Every change once, a tombstone after each delete, and what Connect
	// sent again after its kills.
	resent := records - int64(rows+changes+deletes)
	t.Logf("%d rows snapshotted, %d changes (%d deletes, %d transitions to shipped; %d times a row changed again in one transaction), %d kills of Connect, %d of each worker; %d records on the topic (%d re-sent by Connect)",
		rows, changes, deletes, shipped, twiceInOneTx, killsConnect, killsWorker, records, resent)
	require.Positive(t, resent, "Connect's kills must re-send changes (duplicates are certain)")
	if converters != nil {
		for _, r := range kafkatest.ReadCommitted(t, topic, 10, time.Minute) {
			require.True(t, len(r.Value) == 0 || r.Value[0] == 0, "a change event not in the wire format: %q", r.Value)
			require.Zero(t, r.Key[0], "a key not in the wire format: %q", r.Key)
		}
	}
	for _, tg := range targets {
		samples := tg.stopSampling()
		require.Equal(t, want, cdcDigest(t, tg.db.Pool, "customers"), "%s: the replica equals the source row for row", tg.name)
		require.Zero(t, tg.sampler.regressions(), "%s: a row went back to an older version than one the replica had shown", tg.name)
		var history, distinct int64
		require.NoError(t, tg.db.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT (id, lsn)) FROM customer_changes`).Scan(&history, &distinct))
		t.Logf("%s: %d version samples, history %d", tg.name, samples, history)
		require.Equal(t, int64(rows+changes), history, "%s: one history row per change: the snapshot's rows and every change", tg.name)
		require.Equal(t, history, distinct, tg.name)
		require.Zero(t, tg.db.Count(t, `SELECT count(*) FROM customer_change_counts c
FULL JOIN (SELECT id, count(*) AS n FROM customer_changes GROUP BY id) h USING (id) WHERE c.changes IS DISTINCT FROM h.n`),
			"%s: each customer's total equals its history rows: every change counted once", tg.name)
		require.Zero(t, tg.db.Count(t, `SELECT count(*) FROM dead_letters`), tg.name)
	}

	// One notification per transition: recorded once, delivered, and
	// received under one idempotency key each.
	require.Positive(t, shipped)
	waitUntil(t, "every notification is sent", 2*time.Minute, func(context.Context) bool {
		return goBuild.db.Count(t, `SELECT count(*) FROM outbox WHERE state = 'sent'`) == int64(shipped)
	})
	var intents, distinctIntents int64
	require.NoError(t, goBuild.db.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_key) FROM outbox WHERE operation = 'customer.shipped'`).Scan(&intents, &distinctIntents))
	t.Logf("notifications: %d transitions, %d intents, %d calls received under %d idempotency keys", shipped, intents, notify.Calls(), notify.DistinctKeys())
	require.Equal(t, int64(shipped), intents, "one notification intent per transition to shipped")
	require.Equal(t, intents, distinctIntents)
	require.Equal(t, shipped, notify.DistinctKeys(), "each transition reached the notify API under an idempotency key of its own")
}

// cdcTarget is one worker (the stock binary or a Go build) replicating the
// change stream into a database of its own, and the sampler watching its
// replica.
type cdcTarget struct {
	name, bin string
	env, args []string
	db        pgtest.DB
	worker    *proctest.Proc
	sampler   *versionSampler
	// stopSampling stops the sampler; it returns the samples taken.
	stopSampling func() int
}

// newCDCTarget migrates a fresh database with bin's migrations and
// config's, as the consumer group of its own; start runs the worker.
func newCDCTarget(t *testing.T, bin, config, instance string, extraEnv ...string) *cdcTarget {
	t.Helper()
	tg := &cdcTarget{name: filepath.Base(bin), bin: bin, db: pgtest.NewEmpty(t), sampler: &versionSampler{seen: map[int64][2]int64{}}}
	tg.env = append([]string{
		"EFFECTIVELY_KAFKA_BROKERS=" + strings.Join(kafkatest.Brokers(t), ","),
		"EFFECTIVELY_KAFKA_GROUP=" + kafkatest.NewGroup(t),
		"EFFECTIVELY_POSTGRES_URL=" + tg.db.URL,
		"EFFECTIVELY_HTTP_ADDR=",
		"EFFECTIVELY_KAFKA_INSTANCE_ID=" + instance,
		"EFFECTIVELY_KAFKA_SESSION_TIMEOUT=6s",
	}, extraEnv...)
	tg.args = []string{"--config", config}
	code, stdout, stderr := proctest.Run(t, bin, tg.env, append(tg.args, "migrate")...)
	require.Equal(t, 0, code, "%s migrate: %s\n%s", tg.name, stdout, stderr)
	// Sample the replica while it catches up: no row may ever go back to
	// an older version than one it showed.
	tg.stopSampling = tg.sampler.run(t, tg.db)
	t.Cleanup(func() {
		if tg.worker != nil && !tg.worker.Exited() {
			tg.kill(t)
		}
	})
	return tg
}

func (tg *cdcTarget) start(t *testing.T) {
	t.Helper()
	tg.worker = proctest.Start(t, tg.bin, tg.env, append(tg.args, "run")...)
}

// kill SIGKILLs the worker and waits for it to be gone.
func (tg *cdcTarget) kill(t *testing.T) {
	t.Helper()
	tg.worker.Signal(t, syscall.SIGKILL)
	tg.worker.Wait(t, time.Minute)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// logCDCDiff logs the first rows a replica has otherwise than the source.
func logCDCDiff(t *testing.T, source *pgxpool.Pool, ident string, tg *cdcTarget, topic string) {
	ctx := context.Background()
	rowsOf := func(pool *pgxpool.Pool, q string) map[int64]string {
		out := map[int64]string{}
		rows, err := pool.Query(ctx, q)
		if err != nil {
			t.Logf("%s: %v", tg.name, err)
			return out
		}
		var id int64
		var row string
		_, _ = pgx.ForEachRow(rows, []any{&id, &row}, func() error { out[id] = row; return nil })
		return out
	}
	src := rowsOf(source, `SELECT id, name || '|' || status FROM `+ident)
	got := rowsOf(tg.db.Pool, `SELECT id, name || '|' || status || ' at ' || version::text FROM customers`)
	n := 0
	for _, id := range slices.Sorted(maps.Keys(src)) {
		if g, ok := got[id]; (!ok || !strings.HasPrefix(g, src[id]+" at ")) && n < 10 {
			t.Logf("%s: row %d is %q at the source, %q in the replica", tg.name, id, src[id], g)
			n++
		}
	}
	var gone []string
	for id, g := range got {
		if _, ok := src[id]; !ok && n < 20 {
			t.Logf("%s: row %d is gone at the source, %q in the replica", tg.name, id, g)
			gone = append(gone, strconv.FormatInt(id, 10))
			n++
		}
	}
	// The records on the topic of the first such row (its key's last
	// bytes are the id, in JSON or as an Avro long).
	if len(gone) > 0 {
		id, _ := strconv.ParseInt(gone[0], 10, 64)
		avroID := encbinary.AppendUvarint(nil, uint64(id<<1^id>>63))
		for _, r := range kafkatest.ReadCommitted(t, topic, int(topicRecords(t, topic)), time.Minute) {
			if bytes.HasSuffix(r.Key, []byte(`"id":`+gone[0]+`}`)) || bytes.HasSuffix(r.Key, []byte(`:`+gone[0]+`}}`)) || len(r.Key) > 5 && bytes.Equal(r.Key[5:], avroID) {
				t.Logf("%s: row %s: record at %d/%d, key %x, value of %d bytes: %q", tg.name, gone[0], r.Partition, r.Offset, r.Key, len(r.Value), tail(string(r.Value), 3))
			}
		}
	}
	// What became of those rows' events, and what was dead-lettered.
	for _, q := range []string{
		`SELECT reason || ': ' || count(*) || ', e.g. ' || min(error) FROM dead_letters GROUP BY reason`,
		`SELECT subject || ' ' || event_type || ' ' || disposition || ' at ' || "offset" FROM effectively_claims WHERE subject = ANY ($1) ORDER BY subject, "offset"`,
	} {
		var args []any
		if strings.Contains(q, "$1") {
			args = append(args, gone)
		}
		rows, err := tg.db.Pool.Query(ctx, q, args...)
		if err != nil {
			t.Logf("%s: %v", tg.name, err)
			continue
		}
		var line string
		_, err = pgx.ForEachRow(rows, []any{&line}, func() error { t.Logf("%s: %s", tg.name, line); return nil })
		if err != nil {
			t.Logf("%s: %v", tg.name, err)
		}
	}
}

// cdcDigest is the count and the md5 of a customers table's rows in id order.
func cdcDigest(t *testing.T, pool *pgxpool.Pool, table string) string {
	t.Helper()
	var n int64
	var sum string
	require.NoError(t, pool.QueryRow(context.Background(), fmt.Sprintf(cdcDigestSQL, table)).Scan(&n, &sum))
	return fmt.Sprintf("%d rows, md5 %s", n, sum)
}

// topicRecords is the records on topic: the sum of its partitions' end
// offsets (nothing is deleted during a test).
func topicRecords(t *testing.T, topic string) int64 {
	t.Helper()
	ends, err := kafkatest.Admin(t).ListEndOffsets(context.Background(), topic)
	if err != nil {
		return 0
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// versionSampler watches the replica's versions.
type versionSampler struct {
	mu      sync.Mutex
	seen    map[int64][2]int64 // the newest (version, sequence) shown
	samples int
	bad     int
}

func (s *versionSampler) run(t *testing.T, db pgtest.DB) (stop func() int) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			// numeric version.sequence (event.Event.Sequence)
			rows, err := db.Pool.Query(ctx, `SELECT id, trunc(version)::bigint, ((version - trunc(version)) * 1e20)::bigint
FROM customers TABLESAMPLE SYSTEM (5)`)
			if err == nil {
				for rows.Next() {
					var id int64
					var v [2]int64
					if err := rows.Scan(&id, &v[0], &v[1]); err != nil {
						t.Errorf("sampling the replica's versions: %v", err)
						break
					}
					s.mu.Lock()
					if seen := s.seen[id]; v[0] < seen[0] || v[0] == seen[0] && v[1] < seen[1] {
						s.bad++
					} else {
						s.seen[id] = v
					}
					s.samples++
					s.mu.Unlock()
				}
				rows.Close()
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	var once sync.Once
	stop = func() int {
		once.Do(func() {
			cancel()
			<-done
		})
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.samples
	}
	t.Cleanup(func() { stop() }) // before the database goes
	return stop
}

func (s *versionSampler) regressions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bad
}

// threeRows creates a source table of customers 1 to 3 named prefix and a
// random suffix, dropped when the test ends, and returns its name and
// identifier.
func (c *cdcSource) threeRows(t *testing.T, prefix string) (table, ident string) {
	t.Helper()
	table = prefix + strconv.FormatUint(rand.Uint64()%1_000_000, 10)
	ident = pgx.Identifier{table}.Sanitize()
	_, err := c.pool.Exec(context.Background(), fmt.Sprintf(`CREATE TABLE %[1]s (id bigint PRIMARY KEY, name text NOT NULL, status text NOT NULL);
ALTER TABLE %[1]s REPLICA IDENTITY FULL;
INSERT INTO %[1]s SELECT g, 'customer ' || g, 'new' FROM generate_series(1, 3) g`, ident))
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = c.pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+ident) })
	return table, ident
}

// A transaction that begins while the connector's replication slot is
// being created, writes, and commits after the slot's consistent point is
// not in the snapshot: it is streamed, and its change carries an LSN below
// the snapshot's reads (PostgreSQL's snapbuild.c). The replica must still
// take it. The slot's creation waits for transaction b (running when it
// began), then for c (running when b ended, at the next running_xacts
// record, which the background writer logs every 15 s); d begins between
// the two and commits after the snapshot.
func TestCDCChangeBegunBeforeTheSnapshotIsApplied(t *testing.T) {
	src := newCDCSource(t)
	ctx := context.Background()
	table, ident := src.threeRows(t, "crossing")
	update := func(tx pgx.Tx, id int64, status string) {
		_, err := tx.Exec(ctx, `UPDATE `+ident+` SET status = $2 WHERE id = $1`, id, status)
		require.NoError(t, err)
	}
	begin := func() pgx.Tx {
		tx, err := src.pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		return tx
	}

	b := begin()
	update(b, 3, "b")
	prefix := "cx" + strconv.FormatUint(rand.Uint64()%1_000_000, 10)
	topic := src.connector(t, prefix, prefix, table, nil)
	slot := slotName(prefix)
	waitUntil(t, "the connector is creating its slot", 2*time.Minute, func(ctx context.Context) bool {
		var n int
		return src.pool.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&n) == nil && n == 1
	})
	time.Sleep(2 * time.Second)
	c := begin()
	update(c, 1, "c")
	require.NoError(t, b.Commit(ctx))
	time.Sleep(20 * time.Second) // a running_xacts record without b, with c
	d := begin()
	update(d, 2, "d")
	require.NoError(t, c.Commit(ctx))
	waitUntil(t, "the snapshot is on the topic", 2*time.Minute, func(context.Context) bool {
		return topicRecords(t, topic) >= 3
	})
	require.NoError(t, d.Commit(ctx))

	tg := newCDCTarget(t, binary, customersConfig(t, topic, table), prefix)
	tg.start(t)
	want := cdcDigest(t, src.pool, ident)
	waitUntil(t, "the replica equals the source", 2*time.Minute, func(context.Context) bool {
		return cdcDigest(t, tg.db.Pool, "customers") == want || tg.worker.Exited()
	})
	require.False(t, tg.worker.Exited(), "the worker exited: %s", tail(tg.worker.Stderr.String(), 20))

	// The case happened: d's change of row 2 has an LSN below the
	// snapshot's read of it.
	var read, streamed int64
	require.NoError(t, tg.db.Pool.QueryRow(ctx, `SELECT max(lsn) FILTER (WHERE op = 'r'), max(lsn) FILTER (WHERE op = 'u') FROM customer_changes WHERE id = 2`).Scan(&read, &streamed))
	t.Logf("row 2: read at LSN %d, d's update streamed at LSN %d", read, streamed)
	require.Less(t, streamed, read, "d's change should carry an LSN below the snapshot's; the timing did not make the case")
	var status string
	require.NoError(t, tg.db.Pool.QueryRow(ctx, `SELECT status FROM customers WHERE id = 2`).Scan(&status))
	require.Equal(t, "d", status)
}

// An INSERT writes its row before it checks the key's index; when another
// transaction holds that key and deletes the row, the insert waits, and
// commits after it with an LSN below the delete's (reproduced on
// PostgreSQL 15: decoded in commit order u, d, c). By LSN the insert would
// be older than the delete's tombstone and the replica would lack the row;
// by commit order (event.Event.Sequence) it is newer.
func TestCDCInsertThatWaitedOnADeletedKeyIsApplied(t *testing.T) {
	src := newCDCSource(t)
	ctx := context.Background()
	table, ident := src.threeRows(t, "waiting")
	prefix := "wt" + strconv.FormatUint(rand.Uint64()%1_000_000, 10)
	topic := src.connector(t, prefix, prefix, table, nil)
	waitUntil(t, "the snapshot is on the topic", 2*time.Minute, func(context.Context) bool {
		return topicRecords(t, topic) >= 3
	})
	tg := newCDCTarget(t, binary, customersConfig(t, topic, table), prefix)
	tg.start(t)

	a, err := src.pool.Begin(ctx)
	require.NoError(t, err)
	defer a.Rollback(ctx) //nolint:errcheck // after Commit: a no-op
	_, err = a.Exec(ctx, `UPDATE `+ident+` SET status = 'a' WHERE id = 2`)
	require.NoError(t, err)
	var aPID int
	require.NoError(t, a.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&aPID))
	inserted := make(chan error, 1)
	go func() {
		tx, err := src.pool.Begin(ctx)
		if err == nil {
			if _, err = tx.Exec(ctx, `INSERT INTO `+ident+` VALUES (2, 'customer 2', 'b')`); err == nil {
				err = tx.Commit(ctx)
			} else {
				_ = tx.Rollback(ctx)
			}
		}
		inserted <- err
	}()
	waitUntil(t, "the insert waits on a's key", time.Minute, func(ctx context.Context) bool {
		var waiting bool
		return src.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid)))`, aPID).Scan(&waiting) == nil && waiting
	})
	_, err = a.Exec(ctx, `DELETE FROM `+ident+` WHERE id = 2`)
	require.NoError(t, err)
	require.NoError(t, a.Commit(ctx))
	require.NoError(t, <-inserted)

	want := cdcDigest(t, src.pool, ident)
	waitUntil(t, "the replica equals the source", 2*time.Minute, func(context.Context) bool {
		return cdcDigest(t, tg.db.Pool, "customers") == want || tg.worker.Exited()
	})
	require.False(t, tg.worker.Exited(), "the worker exited: %s", tail(tg.worker.Stderr.String(), 20))
	var status string
	require.NoError(t, tg.db.Pool.QueryRow(ctx, `SELECT status FROM customers WHERE id = 2`).Scan(&status))
	require.Equal(t, "b", status)

	// The case happened: the insert's LSN is below the delete's.
	var deleted, created int64
	require.NoError(t, tg.db.Pool.QueryRow(ctx, `SELECT max(lsn) FILTER (WHERE op = 'd'), max(lsn) FILTER (WHERE op = 'c') FROM customer_changes WHERE id = 2`).Scan(&deleted, &created))
	t.Logf("row 2: deleted at LSN %d, inserted at LSN %d, committed after", deleted, created)
	require.Less(t, created, deleted, "the insert should carry an LSN below the delete's; the case did not happen")
	require.Zero(t, tg.sampler.regressions())
}
