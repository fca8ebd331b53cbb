package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/examples/orders/webhooks"
	"github.com/effectively-io/effectively/internal/crashpoint"
	"github.com/effectively-io/effectively/internal/kafkatest"
	"github.com/effectively-io/effectively/internal/pgtest"
)

// The config-only orders example (examples/orders) run by the stock binary
// with nothing but its configuration and migrations.

const (
	exampleDir   = "../examples/orders"
	exampleTopic = "shop.webhooks"
)

// exampleConfig writes the example's configuration with the test's topic
// and migrations directory (absolute), and returns its path.
func exampleConfig(t *testing.T, topic, migrations string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(exampleDir, "effectively.yaml"))
	require.NoError(t, err)
	cfg := strings.ReplaceAll(string(b), exampleTopic, topic)
	require.Contains(t, cfg, "migrations: [examples/orders/migrations]")
	cfg = strings.ReplaceAll(cfg, "migrations: [examples/orders/migrations]", "migrations: ["+migrations+"]")
	path := filepath.Join(t.TempDir(), "effectively.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	return path
}

// exampleRig is a fresh schema, topic and group for the example.
type exampleRig struct {
	db     pgtest.DB
	topic  string
	group  string
	config string
	env    []string
}

func newExampleRig(t *testing.T, partitions int32, migrations string, extraEnv ...string) *exampleRig {
	t.Helper()
	r := &exampleRig{db: pgtest.NewEmpty(t), topic: kafkatest.NewTopic(t, partitions), group: kafkatest.NewGroup(t)}
	kafkatest.DeleteOnCleanup(t, r.topic+".dlq")
	r.config = exampleConfig(t, r.topic, migrations)
	r.env = append([]string{
		"EFFECTIVELY_KAFKA_BROKERS=" + strings.Join(kafkatest.Brokers(t), ","),
		"EFFECTIVELY_KAFKA_GROUP=" + r.group,
		"EFFECTIVELY_POSTGRES_URL=" + r.db.URL,
		"EFFECTIVELY_HTTP_ADDR=",
		"EFFECTIVELY_KAFKA_SESSION_TIMEOUT=6s",
		"EFFECTIVELY_KAFKA_REBALANCE_TIMEOUT=20s",
	}, extraEnv...)
	code, stdout, stderr := runCmd(t, r.env, "--config", r.config, "migrate")
	require.Equal(t, 0, code, "migrate: %s\n%s", stdout, stderr)
	return r
}

func (r *exampleRig) applied(t *testing.T) int64 {
	return r.db.Count(t, `SELECT coalesce(sum(next_offset), 0) FROM consumer_offsets WHERE consumer_group = $1 AND topic = $2`, r.group, r.topic)
}

// The stock binary with only the example's configuration, on a stream with
// re-sent webhooks, disorder, updates after their order's deletion and bad
// values, SIGKILLed again and again (from outside, and at each crash
// point): every order ends at its newest valid version (deleted orders
// absent), order_events has exactly one row per distinct valid webhook,
// and every bad webhook is dead-lettered once, as invalid_payload naming
// its column. The expectations come from the generator alone.
func TestOrdersExampleEndsAtTheNewestVersionThroughKills(t *testing.T) {
	t.Parallel()
	abs, err := filepath.Abs(filepath.Join(exampleDir, "migrations"))
	require.NoError(t, err)
	// Static membership: a restarted worker takes its partitions back at
	// once. Small batches: many commits for the crash points to hit.
	r := newExampleRig(t, 4, abs, "EFFECTIVELY_KAFKA_INSTANCE_ID=orders-example", "EFFECTIVELY_CONSUMER_BATCH_MAX_RECORDS=25")

	lines, exp, err := webhooks.Generate(webhooks.Config{Orders: 400, Deleted: 0.15, Duplicates: 0.15, OutOfOrder: 0.25, Bad: 0.04, Seed: 12})
	require.NoError(t, err)
	require.Positive(t, exp.Duplicates)
	require.Positive(t, exp.Swaps)
	require.Positive(t, exp.LateAfterDelete, "some updates must arrive after their order's deletion")
	require.GreaterOrEqual(t, len(exp.Bad), 20)
	file := filepath.Join(t.TempDir(), "webhooks.jsonl")
	f, err := os.Create(file)
	require.NoError(t, err)
	enc := json.NewEncoder(f)
	for _, l := range lines {
		require.NoError(t, enc.Encode(l))
	}
	require.NoError(t, f.Close())
	code, stdout, stderr := runCmd(t, r.env, "--config", r.config, "produce", "--file", file)
	require.Equal(t, 0, code, "produce: %s\n%s", stdout, stderr)
	require.Contains(t, stdout, fmt.Sprintf("produced %d records to %s", exp.Records, r.topic))

	// A SIGKILL from outside once the worker has applied something, then
	// workers that SIGKILL themselves at the crash points in turn.
	kills := 0
	w := start(t, r.env, "--config", r.config, "run")
	waitUntil(t, "the first worker applies something", time.Minute, func(context.Context) bool { return r.applied(t) > 0 || w.exited() })
	require.False(t, w.exited(), "the worker exited: %s", tail(w.stderr.String(), 20))
	w.signal(t, syscall.SIGKILL)
	w.wait(t, time.Minute)
	kills++
	points := []string{crashpoint.BeforeDBCommit, crashpoint.AfterDBCommit, crashpoint.AfterKafkaCommit}
	deadline := time.Now().Add(3 * time.Minute) // hang guard
	for i := 0; r.applied(t) < int64(exp.Records); i++ {
		env := r.env
		point := points[i%len(points)]
		if i < 6 {
			env = append(env[:len(env):len(env)], fmt.Sprintf("%s=%s:%d", crashpoint.EnvVar, point, 2+i%3))
		}
		w := start(t, env, "--config", r.config, "run")
		if untilCrashOrDone(t, w, point, deadline, func() bool { return r.applied(t) >= int64(exp.Records) }) {
			kills++
		}
	}
	t.Logf("%d records (%d re-sent, %d swapped, %d after their order's deletion, %d bad), %d kills",
		exp.Records, exp.Duplicates, exp.Swaps, exp.LateAfterDelete, len(exp.Bad), kills)
	require.GreaterOrEqual(t, kills, 4, "the test must actually kill the worker")

	verifyOrders(t, r.db, exp)
}

// verifyOrders compares the example's tables and dead letters with the
// generator's expected end state.
func verifyOrders(t *testing.T, db pgtest.DB, exp webhooks.Expected) {
	t.Helper()
	ctx := context.Background()

	// orders: every order at its newest valid version, deleted ones absent.
	rows, err := db.Pool.Query(ctx, `SELECT id, version, status, customer_id, email, total::text, currency, items::text, gift, placed_at FROM orders`)
	require.NoError(t, err)
	got := map[string]webhooks.Order{}
	for rows.Next() {
		var o webhooks.Order
		var items string
		require.NoError(t, rows.Scan(&o.ID, &o.Version, &o.Status, &o.CustomerID, &o.Email, &o.Total, &o.Currency, &items, &o.Gift, &o.PlacedAt))
		o.Items = json.RawMessage(items)
		got[o.ID] = o
	}
	require.NoError(t, rows.Err())
	require.Len(t, got, len(exp.Orders), "orders rows")
	regressions := 0
	for id, want := range exp.Orders {
		o, ok := got[id]
		require.True(t, ok, "order %s is missing", id)
		if o.Version < want.Version {
			regressions++
		}
		require.Equal(t, want.Version, o.Version, "order %s's version", id)
		require.Equal(t, []any{want.Status, want.CustomerID, want.Email, want.Total, want.Currency, want.Gift},
			[]any{o.Status, o.CustomerID, o.Email, o.Total, o.Currency, o.Gift}, "order %s", id)
		require.JSONEq(t, string(want.Items), string(o.Items), "order %s's items", id)
		require.True(t, want.PlacedAt.Equal(o.PlacedAt), "order %s placed at %s, want %s", id, o.PlacedAt, want.PlacedAt)
	}
	require.Zero(t, regressions)
	// Each deleted order is gone and has left a tombstone; no other order
	// has one.
	var tombstones []string
	rows, err = db.Pool.Query(ctx, `SELECT key->>0 FROM effectively_tombstones WHERE table_name = 'orders'`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		tombstones = append(tombstones, id)
	}
	require.NoError(t, rows.Err())
	require.ElementsMatch(t, exp.Deleted, tombstones, "tombstones of table orders")
	for _, id := range exp.Deleted {
		_, ok := got[id]
		require.False(t, ok, "deleted order %s is back", id)
	}

	// order_events: one row per distinct valid webhook, none for a bad one.
	rows, err = db.Pool.Query(ctx, `SELECT event_key, event_id, order_id, type, order_version, occurred_at FROM order_events`)
	require.NoError(t, err)
	seen := map[string]bool{}
	n := 0
	for rows.Next() {
		var key string
		var e webhooks.Event
		require.NoError(t, rows.Scan(&key, &e.ID, &e.OrderID, &e.Type, &e.OrderVersion, &e.OccurredAt))
		n++
		require.False(t, seen[e.ID], "webhook %s has two rows", e.ID)
		seen[e.ID] = true
		require.True(t, strings.HasSuffix(key, ":"+e.ID), "event key %s of webhook %s", key, e.ID)
		want, ok := exp.Events[e.ID]
		require.True(t, ok, "webhook %s has a row but is not a valid webhook (bad: %q)", e.ID, exp.Bad[e.ID])
		require.True(t, want.OccurredAt.Equal(e.OccurredAt))
		e.OccurredAt = want.OccurredAt
		require.Equal(t, want, e)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, len(exp.Events), n, "order_events rows")

	// Dead letters: each bad webhook once, invalid_payload, naming its
	// column; nothing else.
	rows, err = db.Pool.Query(ctx, `SELECT event_key, reason, error FROM dead_letters`)
	require.NoError(t, err)
	dead := map[string]int{}
	for rows.Next() {
		var key, reason, msg string
		require.NoError(t, rows.Scan(&key, &reason, &msg))
		id := key[strings.LastIndexByte(key, ':')+1:]
		dead[id]++
		column, ok := exp.Bad[id]
		require.True(t, ok, "webhook %s is dead-lettered (%s: %s) but is valid", id, reason, msg)
		require.Equal(t, "invalid_payload", reason, msg)
		require.Contains(t, msg, " column "+column+" (from ", "webhook %s", id)
		require.Regexp(t, `sink (orders|order_events): column`, msg)
	}
	require.NoError(t, rows.Err())
	for id := range exp.Bad {
		require.Equal(t, 1, dead[id], "dead letters of bad webhook %s", id)
	}
}

// The stock binary refuses to start when the example's tables do not fit
// its sinks, and says which sink, which column and what to do.
func TestOrdersExampleStartupRefusals(t *testing.T) {
	t.Parallel()
	migration, err := os.ReadFile(filepath.Join(exampleDir, "migrations", "00001_orders.sql"))
	require.NoError(t, err)
	for _, c := range []struct {
		name, old, new string
		want           []string
	}{
		{"missing column", "    email       text,\n", "",
			[]string{"sink orders: column email does not exist in table orders", "add it in a migration"}},
		{"no unique key", "event_key     text        PRIMARY KEY", "event_key     text        NOT NULL",
			[]string{"sink order_events:", "column event_key", "no primary key or unique constraint covers exactly the key",
				"ALTER TABLE order_events ADD UNIQUE (event_key)"}},
		{"incompatible type", "order_version bigint", "order_version boolean",
			[]string{"sink order_events: column order_version of table order_events is boolean, which cannot take values read as bigint",
				"set the column's type in sinks[].columns[].type to one that fits (boolean), or change the column"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			require.Contains(t, string(migration), c.old)
			// The set (and its version table) is named after the directory
			// and its parent, as for examples/orders/migrations.
			dir := filepath.Join(t.TempDir(), "orders", "migrations")
			require.NoError(t, os.MkdirAll(dir, 0o700))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "00001_orders.sql"), []byte(strings.Replace(string(migration), c.old, c.new, 1)), 0o600))
			r := newExampleRig(t, 1, dir)
			code, stdout, stderr := runCmd(t, r.env, "--config", r.config, "run")
			require.NotEqual(t, 0, code, "the worker started: %s", stderr)
			require.Contains(t, stderr, "the tables this build writes do not fit the database")
			for _, w := range c.want {
				require.Contains(t, stderr, w, "stdout: %s", stdout)
			}
			require.Zero(t, r.db.Count(t, `SELECT count(*) FROM consumer_offsets`), "nothing consumed")
		})
	}
}
