package test

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/examples/accounts"
	"github.com/effectively-io/effectively/internal/kafkatest"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/schema"
)

// Three `effectively migrate` processes started at the same moment on an
// empty schema: the library's advisory lock lets one apply the migrations,
// the others wait and find nothing to do, and the schema ends up complete
// and recorded once.
func TestMigrateFromThreeProcessesAtOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	env := []string{"EFFECTIVELY_POSTGRES_URL=" + db.URL}

	procs := make([]*proc, 3)
	for i := range procs {
		procs[i] = start(t, env, "migrate")
	}
	applied := map[string]int{}
	for _, p := range procs {
		require.Equal(t, 0, p.wait(t, 2*time.Minute), "stderr: %s", p.stderr.String())
		for _, line := range strings.Split(p.stdout.String(), "\n") {
			if set, _, ok := strings.Cut(strings.TrimPrefix(line, "schema "+db.Schema+": "), " migrations at version"); ok && strings.Contains(line, "(applied") {
				applied[set]++
			}
		}
	}
	require.Equal(t, map[string]int{"effectively": 1, "accounts": 1}, applied, "exactly one process applies each set of migrations")

	// Each migration is recorded once, in its set's own version table.
	for _, table := range []string{"effectively_schema_version", "accounts_schema_version"} {
		require.Equal(t, int64(0), db.Count(t, `SELECT count(*) FROM (SELECT version_id FROM `+table+` WHERE version_id > 0 GROUP BY 1 HAVING count(*) > 1) d`))
		require.GreaterOrEqual(t, db.Count(t, `SELECT count(*) FROM `+table+` WHERE version_id > 0 AND is_applied`), int64(1))
	}
	files, err := fs.Glob(schema.Migrations(), "*.sql")
	require.NoError(t, err)
	require.Equal(t, int64(len(files)), db.Count(t, `SELECT count(*) FROM effectively_schema_version WHERE version_id > 0 AND is_applied`), "every engine migration, once")
	// The schema has every table and view of the design.
	var names []string
	rows, err := db.Pool.Query(context.Background(),
		`SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_name NOT LIKE '%schema_version' ORDER BY 1`, db.Schema)
	require.NoError(t, err)
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		names = append(names, n)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"account_balances", "accounts", "claim_generation_offsets", "claim_generations", "consumer_offsets", "dead_letter_relay_cursors", "dead_letters",
		"effectively_claims", "effectively_claims_g1", "effectively_claims_g2", "effectively_tombstones", "ledger_entries", "operator_actions", "outbox", "parked_events",
		"prune_watermarks", "pruned_offsets", "topic_partitions", "topic_strategies"}, names)

	// A fourth run is a no-op.
	code, out, _ := runCmd(t, env, "migrate")
	require.Equal(t, 0, code)
	require.Contains(t, out, "up to date")
}

// closedPort returns a local port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// `run` against a closed port fails, names the address and the config key,
// and exits non-zero instead of retrying silently.
func TestRunFailsFastWhenAServiceIsUnreachable(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t, accounts.Migrations())
	t.Run("kafka", func(t *testing.T) {
		t.Parallel()
		addr := closedPort(t)
		started := time.Now()
		code, _, stderr := runCmd(t, []string{
			"EFFECTIVELY_KAFKA_BROKERS=" + addr, "EFFECTIVELY_POSTGRES_URL=" + db.URL, "EFFECTIVELY_HTTP_ADDR=",
		}, "run")
		require.NotEqual(t, 0, code)
		require.Contains(t, stderr, "cannot reach Kafka at "+addr+" (kafka.brokers)")
		require.Contains(t, stderr, "EFFECTIVELY_KAFKA_BROKERS")
		t.Logf("failed after %s", time.Since(started))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		addr := closedPort(t)
		code, _, stderr := runCmd(t, []string{
			"EFFECTIVELY_POSTGRES_URL=postgres://effectively:secret-pw@" + addr + "/effectively?sslmode=disable", "EFFECTIVELY_HTTP_ADDR=",
		}, "run")
		require.NotEqual(t, 0, code)
		require.Contains(t, stderr, "cannot reach PostgreSQL at "+addr+" (postgres.url)")
		require.NotContains(t, stderr, "secret-pw", "the password never reaches the output")
	})
	t.Run("unmigrated schema", func(t *testing.T) {
		t.Parallel()
		empty := pgtest.NewEmpty(t)
		code, _, stderr := runCmd(t, []string{"EFFECTIVELY_POSTGRES_URL=" + empty.URL, "EFFECTIVELY_HTTP_ADDR="}, "run")
		require.NotEqual(t, 0, code)
		require.Contains(t, stderr, "run `effectively migrate`")
	})
}

// Precedence through the real binary: flag > env > file > default, and the
// password is redacted in `effectively config`.
func TestConfigCommandPrecedenceAndRedaction(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "effectively.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`
kafka:
  group: from-file
  instance_id: from-file
  client_id: from-file
postgres:
  url: postgres://u:hunter2@db.example:5432/app
`), 0o600))
	code, out, stderr := runCmd(t, []string{"EFFECTIVELY_KAFKA_GROUP=from-env", "EFFECTIVELY_KAFKA_INSTANCE_ID=from-env"},
		"config", "--config", file, "--kafka-group", "from-flag")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "group: from-flag")
	require.Contains(t, out, "instance_id: from-env")
	require.Contains(t, out, "client_id: from-file")
	require.Contains(t, out, "session_timeout: 45s") // default
	require.Contains(t, out, "db.example:5432")
	require.NotContains(t, out, "hunter2")

	// A bad value: exit code 2, the key, the value and the fix.
	code, _, stderr = runCmd(t, []string{"EFFECTIVELY_CONSUMER_BATCH_LINGER=soon"}, "config")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "consumer.batch_linger")
	require.Contains(t, stderr, "soon")
	require.Contains(t, stderr, "EFFECTIVELY_CONSUMER_BATCH_LINGER")
}

// The worker joins the group on the real broker, applies what is produced,
// stores each partition's position in PostgreSQL, commits it to Kafka after,
// and shuts down cleanly on SIGTERM.
func TestWorkerConsumesThroughTheRealStack(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"classic", "consumer"} {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel()
			testWorkerConsumes(t, protocol)
		})
	}
}

func testWorkerConsumes(t *testing.T, protocol string) {
	db := pgtest.New(t, accounts.Migrations())
	topic := kafkatest.NewTopic(t, 3)
	group := kafkatest.NewGroup(t)
	brokers := strings.Join(kafkatest.Brokers(t), ",")

	cl := kafkatest.Producer(t, kgo.DefaultProduceTopic(topic))
	recs := make([]*kgo.Record, 300)
	for i := range recs {
		recs[i] = &kgo.Record{Key: []byte(fmt.Sprintf("acct-%d", i%17)), Value: []byte(`{}`)}
	}
	require.NoError(t, cl.ProduceSync(context.Background(), recs...).FirstErr())

	w := start(t, []string{
		"EFFECTIVELY_KAFKA_BROKERS=" + brokers, "EFFECTIVELY_KAFKA_GROUP=" + group, "EFFECTIVELY_KAFKA_TOPICS=" + topic,
		"EFFECTIVELY_POSTGRES_URL=" + db.URL, "EFFECTIVELY_HTTP_ADDR=127.0.0.1:0",
		"EFFECTIVELY_KAFKA_GROUP_PROTOCOL=" + protocol,
	}, "run")
	waitUntil(t, "all 300 positions stored", 90*time.Second, func(ctx context.Context) bool {
		return db.Count(t, `SELECT coalesce(sum(next_offset), 0) FROM consumer_offsets WHERE consumer_group = $1 AND topic = $2`, group, topic) == 300
	})
	// Those records are not CloudEvents: each has a dead letter, with its
	// origin, and none stopped the partition; the relay publishes each to
	// the dead-letter topic once, with its origin and reason.
	require.Equal(t, int64(300), db.Count(t, `SELECT count(*) FROM dead_letters WHERE reason = 'not_cloudevents' AND topic = $1`, topic))
	kafkatest.DeleteOnCleanup(t, topic+".dlq")
	dlq := kafkatest.ReadCommitted(t, topic+".dlq", 300, 90*time.Second)
	origins := map[string]bool{}
	for _, r := range dlq {
		h := map[string]string{}
		for _, kv := range r.Headers {
			h[kv.Key] = string(kv.Value)
		}
		require.Equal(t, topic, h["effectively.origin.topic"])
		require.Equal(t, "not_cloudevents", h["effectively.reason"])
		origins[h["effectively.origin.partition"]+"@"+h["effectively.origin.offset"]] = true
	}
	require.Len(t, origins, 300, "each dead letter published once")
	waitUntil(t, "dead letters marked published", 30*time.Second, func(context.Context) bool {
		return db.Count(t, `SELECT count(*) FROM dead_letters WHERE published_at IS NULL`) == 0
	})
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute), "a SIGTERMed worker exits 0")
	require.Contains(t, w.stderr.String(), "worker stopped")

	committed, err := kafkatest.Admin(t).FetchOffsets(context.Background(), group)
	require.NoError(t, err)
	var sum int64
	committed.Each(func(o kadm.OffsetResponse) { sum += o.At })
	require.Equal(t, int64(300), sum, "Kafka's commit follows the stored positions")
}
