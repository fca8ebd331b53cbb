package handlers_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/handling"
	"github.com/effectively-io/effectively/internal/outbox"
	"github.com/effectively-io/effectively/internal/pgtest"
)

// The tables of the property test: owners (gated upsert), items (gated
// upsert and delete, a composite key) and notes (insert-once, referencing
// owners: an insert that depends on an upsert of the same batch).
const typedSchema = `
CREATE TABLE owners (id text PRIMARY KEY, version bigint NOT NULL, name text NOT NULL, updated_at timestamptz);
CREATE TABLE items (tenant text, id bigint, version int NOT NULL, label text NOT NULL, qty numeric NOT NULL,
                    PRIMARY KEY (tenant, id));
CREATE TABLE notes (event_key text PRIMARY KEY, owner_id text NOT NULL REFERENCES owners (id), body text NOT NULL,
                    seq bigint GENERATED ALWAYS AS IDENTITY);
CREATE TABLE changes (id text PRIMARY KEY, version numeric NOT NULL, label text NOT NULL);`

var (
	notes  = &handlers.Table{Name: "notes", Key: []string{"event_key"}, Columns: []string{"owner_id", "body"}}
	items  = &handlers.Table{Name: "items", Key: []string{"tenant", "id"}, Version: "version", Columns: []string{"label", "qty"}, Deletes: true}
	owners = &handlers.Table{Name: "owners", Key: []string{"id"}, Version: "version", Columns: []string{"name"}, Touch: []string{"updated_at"}}
	// changes is gated by Debezium's order: a Version, then a Sequence.
	changes = &handlers.Table{Name: "changes", Key: []string{"id"}, Version: "version", Columns: []string{"label"}, Deletes: true}
)

// op is one event of the property test.
type op struct {
	kind    string // owner, item, delete, note, change, unchange
	key     string // owner id, or item id within tenant "t"
	version int64
	seq     int64 // the event's Sequence (change, unchange)
	value   string
}

func (o op) apply(e *handlers.Effects, i int) error {
	switch o.kind {
	case "owner":
		return e.Upsert(owners, o.version, o.key, o.value)
	case "item":
		id := int64(len(o.key))
		return e.Upsert(items, o.version, "t", id, o.value, fmt.Sprintf("%d.5", o.version))
	case "delete":
		return e.Delete(items, o.version, "t", int64(len(o.key)))
	case "change":
		return e.Upsert(changes, o.version, o.key, o.value)
	case "unchange":
		return e.Delete(changes, o.version, o.key)
	default:
		return e.InsertOnce(notes, fmt.Sprintf("n-%d", i%7), o.key, o.value)
	}
}

func newTypedDB(t *testing.T) (pgtest.DB, handlers.Env) {
	db := pgtest.New(t)
	_, err := db.Pool.Exec(context.Background(), typedSchema)
	require.NoError(t, err)
	var reg handlers.Registry
	// Registered in an order that the foreign key must correct.
	reg.Table(notes)
	reg.Table(items)
	reg.Table(owners)
	reg.Table(changes)
	require.NoError(t, handling.Of(&reg).CheckTables(context.Background(), db.Pool))
	return db, handling.Of(&reg).Env(nil, outbox.Expiry{}, nil, 0)
}

// apply runs ops as one batch (one Flush) and returns each op's disposition.
func apply(t *testing.T, db pgtest.DB, env handlers.Env, ops []op, base int) []dedupe.Disposition {
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit: a no-op
	e := handling.NewEffects(env)
	outs := make([]*handling.Outcome, len(ops))
	for i, o := range ops {
		outs[i] = e.Begin(handlers.Origin{Offset: int64(base + i)}, event.Event{Version: o.version, Sequence: o.seq})
		require.NoError(t, o.apply(e.Effects(), base+i))
	}
	require.NoError(t, e.Flush(ctx, tx))
	require.NoError(t, tx.Commit(ctx))
	ds := make([]dedupe.Disposition, len(ops))
	for i, o := range outs {
		require.NoError(t, o.Err)
		ds[i] = o.Disposition
	}
	return ds
}

// state is every row of the three tables, and the tombstones, as text.
func state(t *testing.T, db pgtest.DB) string {
	var b strings.Builder
	for _, q := range []string{
		`SELECT id, version, name, updated_at IS NOT NULL FROM owners ORDER BY id`,
		`SELECT tenant, id, version, label, qty FROM items ORDER BY tenant, id`,
		`SELECT event_key, owner_id, body FROM notes ORDER BY seq`,
		`SELECT id, version::text, label FROM changes ORDER BY id`,
		// The tombstones that matter: of rows that do not exist (one of a
		// re-created row is never read again).
		`SELECT ts.key::text, ts.version FROM effectively_tombstones ts
		 WHERE NOT EXISTS (SELECT FROM items i WHERE ts.key = jsonb_build_array(i.tenant, i.id))
		   AND NOT EXISTS (SELECT FROM changes c WHERE ts.key = jsonb_build_array(c.id)) ORDER BY key, ts.table_name`,
	} {
		rows, err := db.Pool.Query(context.Background(), q)
		require.NoError(t, err)
		for rows.Next() {
			vals, err := rows.Values()
			require.NoError(t, err)
			fmt.Fprintln(&b, vals...)
		}
		require.NoError(t, rows.Err())
		b.WriteString("--\n")
	}
	return b.String()
}

// Typed effects applied set-based, one statement per table and shape,
// give the state and the dispositions of applying the same events one at
// a time in offset order (the oracle), on the real database: many
// versions of a key in one batch, deletes and re-creations, and inserts
// that reference a row upserted earlier in the batch.
func TestTypedEffectsMatchOneAtATime(t *testing.T) {
	batchDB, env := newTypedDB(t)
	oracleDB, oracleEnv := newTypedDB(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	rounds := 60
	if testing.Short() {
		rounds = 15
	}
	stale, applied, multi := 0, 0, 0
	model := orderModel{}
	for round := range rounds {
		// A few keys and versions, so that keys repeat within a batch.
		var ops []op
		created := map[string]bool{}
		var existing []string
		require.NoError(t, oracleDB.Pool.QueryRow(ctx, `SELECT coalesce(array_agg(id), '{}') FROM owners`).Scan(&existing))
		for _, id := range existing {
			created[id] = true
		}
		n := 5 + rng.IntN(60)
		for range n {
			key := []string{"a", "bb", "ccc", "dddd"}[rng.IntN(4)]
			v := int64(1 + rng.IntN(12))
			val := fmt.Sprintf("r%d-%d", round, rng.IntN(1000))
			switch k := rng.IntN(13); {
			case k < 4:
				ops = append(ops, op{kind: "owner", key: key, version: v, value: val})
				created[key] = true
			case k < 6:
				ops = append(ops, op{kind: "item", key: key, version: v, value: val})
			case k < 8:
				ops = append(ops, op{kind: "delete", key: key, version: v})
			case k < 11:
				// Debezium's order: few Versions (commits), so that
				// Sequences decide, some beyond 2^53 and 10^18.
				o := op{kind: "change", key: key, version: event.StreamedVersion + int64(rng.IntN(3))*1_000_000_007,
					seq: []int64{1, 2, 3, 4_000_000_000_000_000_001, 9_000_000_000_000_000_001}[rng.IntN(5)], value: val}
				if rng.IntN(3) == 0 {
					o.kind, o.value = "unchange", ""
				}
				ops = append(ops, o)
				if rng.IntN(4) == 0 { // a transaction's later changes of the row
					for s := o.seq + 1; s < o.seq+3; s++ {
						ops = append(ops, op{kind: "change", key: key, version: o.version, seq: s, value: fmt.Sprintf("%s+%d", val, s)})
					}
				}
			default:
				if created[key] {
					ops = append(ops, op{kind: "note", key: key, value: val})
				}
			}
		}
		base := round * 1000
		got := apply(t, batchDB, env, ops, base)
		want := make([]dedupe.Disposition, len(ops))
		for i, o := range ops {
			want[i] = apply(t, oracleDB, oracleEnv, []op{o}, base+i)[0]
		}
		require.Equal(t, want, got, "round %d: dispositions differ from one-at-a-time; ops %+v", round, ops)
		require.Equal(t, state(t, oracleDB), state(t, batchDB), "round %d: state differs from one-at-a-time", round)
		// And the Debezium-ordered table is what the order says, by a
		// model that is not the engine's SQL.
		for i, o := range ops {
			if o.kind == "change" || o.kind == "unchange" {
				require.Equal(t, model.apply(o), got[i], "round %d op %d %+v", round, i, o)
			}
		}
		require.Equal(t, model.rows(), changeRows(t, batchDB), "round %d", round)
		seen := map[string]int{}
		for i, o := range ops {
			seen[o.kind+o.key]++
			switch got[i] {
			case dedupe.Stale:
				stale++
			case dedupe.Applied:
				applied++
			}
		}
		for _, c := range seen {
			if c > 1 {
				multi++
			}
		}
	}
	// The generator exercised what the test is about.
	require.Greater(t, stale, 50)
	require.Greater(t, applied, 50)
	require.Greater(t, multi, 50)
	var tombs int64
	require.NoError(t, batchDB.Pool.QueryRow(ctx, `SELECT count(*) FROM effectively_tombstones`).Scan(&tombs))
	require.Positive(t, tombs)
	t.Logf("%d rounds: %d applied, %d stale, %d keys written several times in one batch", rounds, applied, stale, multi)
}

// orderModel is the changes table as Debezium's order makes it, one
// event at a time: a change newer than the row's newest (row or
// tombstone) is applied, others are stale.
type orderModel map[string]*modelRow

type modelRow struct {
	version, seq int64
	label        string
	deleted      bool
}

func (m orderModel) apply(o op) dedupe.Disposition {
	r := m[o.key]
	if r != nil && (o.version < r.version || o.version == r.version && o.seq <= r.seq) {
		return dedupe.Stale
	}
	m[o.key] = &modelRow{version: o.version, seq: o.seq, label: o.value, deleted: o.kind == "unchange"}
	return dedupe.Applied
}

func (m orderModel) rows() map[string]string {
	out := map[string]string{}
	for k, r := range m {
		v := fmt.Sprintf("%d.%020d", r.version, r.seq)
		if r.deleted {
			out[k] = "tombstone " + v
		} else {
			out[k] = v + " " + r.label
		}
	}
	return out
}

// changeRows is the changes table and its tombstones as orderModel.rows
// says them.
func changeRows(t *testing.T, db pgtest.DB) map[string]string {
	out := map[string]string{}
	rows, err := db.Pool.Query(context.Background(), `
SELECT id, to_char(version, 'FM0000000000000000000.00000000000000000000') || ' ' || label FROM changes
UNION ALL
SELECT ts.key->>0, 'tombstone ' || to_char(ts.version, 'FM0000000000000000000.00000000000000000000') FROM effectively_tombstones ts
WHERE ts.table_name = 'changes' AND NOT EXISTS (SELECT FROM changes c WHERE ts.key = jsonb_build_array(c.id))`)
	require.NoError(t, err)
	var k, v string
	_, err = pgx.ForEachRow(rows, []any{&k, &v}, func() error { out[k] = v; return nil })
	require.NoError(t, err)
	return out
}

// A Sequence gated on a version column that cannot hold it (bigint) is
// the event's failure, named, not a tie its Version alone would make.
func TestTypedEffectsSequenceNeedsANumericVersion(t *testing.T) {
	db, env := newTypedDB(t)
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // test
	e := handling.NewEffects(env)
	ev := event.Event{Version: event.StreamedVersion + 5, Sequence: 7}
	e.Begin(handlers.Origin{}, ev)
	require.NoError(t, e.Effects().Upsert(owners, ev.Version, "a", "x"))
	err = e.Flush(ctx, tx)
	require.Equal(t, handlers.ReasonVersionColumn, event.ReasonOf(err), "%v", err)
	require.True(t, event.IsPermanent(err))
	require.ErrorContains(t, err, `ALTER TABLE owners ALTER COLUMN "version" TYPE numeric`)

	// Another version than the event's own is the handler's, without a
	// Sequence: bigint holds it.
	tx2, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx2.Rollback(ctx) //nolint:errcheck // test
	e = handling.NewEffects(env)
	e.Begin(handlers.Origin{}, ev)
	require.NoError(t, e.Effects().Upsert(owners, 5, "a", "x"))
	require.NoError(t, e.Flush(ctx, tx2))
}

// A start-up check names the table, the column and the fix.
func TestCheckTablesNamesTheColumnAndTheFix(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `
CREATE TABLE nokey (id text, version bigint NOT NULL, name text);
CREATE TABLE textversion (id text PRIMARY KEY, version text, name text);
CREATE TABLE ok (id text PRIMARY KEY, version bigint NOT NULL, name text, seq bigint GENERATED ALWAYS AS IDENTITY);
CREATE TABLE copied (id text PRIMARY KEY, name text);
INSERT INTO copied VALUES ('1', 'copied by another tool');
ALTER TABLE copied ADD COLUMN version numeric;`)
	require.NoError(t, err)
	for _, c := range []struct {
		table *handlers.Table
		want  []string
	}{
		{&handlers.Table{Name: "missing", Key: []string{"id"}}, []string{"table missing", "does not exist", "create it in a migration"}},
		{&handlers.Table{Name: "ok", Key: []string{"id"}, Version: "version", Columns: []string{"nme"}}, []string{"table ok column nme", "does not exist", "add the column"}},
		{&handlers.Table{Name: "nokey", Key: []string{"id"}, Version: "version", Columns: []string{"name"}}, []string{"table nokey column id", "no primary key or unique constraint", "ALTER TABLE nokey ADD UNIQUE (id)"}},
		{&handlers.Table{Name: "textversion", Key: []string{"id"}, Version: "version"}, []string{"table textversion column version", "is text, not an integer", "bigint"}},
		{&handlers.Table{Name: "ok", Key: []string{"id"}, Columns: []string{"seq"}}, []string{"table ok column seq", "identity or generated", "leave it out"}},
		// A version column added to a table that had rows: NULL compares
		// as unknown, so those rows would never change again.
		{&handlers.Table{Name: "copied", Key: []string{"id"}, Version: "version", Columns: []string{"name"}}, []string{"table copied column version", "may be NULL",
			`UPDATE copied SET "version" = 0 WHERE "version" IS NULL; ALTER TABLE copied ALTER COLUMN "version" SET NOT NULL`}},
	} {
		var reg handlers.Registry
		reg.Table(c.table)
		err := handling.Of(&reg).CheckTables(ctx, db.Pool)
		require.Error(t, err)
		for _, w := range c.want {
			require.Contains(t, err.Error(), w)
		}
	}
	var reg handlers.Registry
	reg.Table(&handlers.Table{Name: "ok", Key: []string{"id"}, Version: "version", Columns: []string{"name"}})
	require.NoError(t, handling.Of(&reg).CheckTables(ctx, db.Pool))
}

// A handler's typed effects are dropped with it when it fails after
// emitting them; an unregistered table or a wrong value count is an error.
func TestTypedEffectsDiscardAndMisuse(t *testing.T) {
	db, env := newTypedDB(t)
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // test cleanup
	e := handling.NewEffects(env)
	e.Begin(handlers.Origin{}, event.Event{})
	require.NoError(t, e.Effects().Upsert(owners, 1, "kept", "k"))
	e.Begin(handlers.Origin{}, event.Event{})
	require.NoError(t, e.Effects().Upsert(owners, 1, "dropped", "d"))
	require.NoError(t, e.Effects().InsertOnce(notes, "n", "kept", "b"))
	e.Discard()
	require.Equal(t, 1, e.Len())
	require.ErrorContains(t, e.Effects().Upsert(&handlers.Table{Name: "owners", Key: []string{"id"}, Version: "version"}, 1, "x"), "not registered")
	require.ErrorContains(t, e.Effects().Upsert(owners, 1, "x"), "with 1 values, want 2")
	require.ErrorContains(t, e.Effects().Delete(owners, 1, "x"), "not declared with Deletes")
	require.NoError(t, e.Flush(ctx, tx))
	var ids []string
	rows, err := tx.Query(ctx, `SELECT id FROM owners ORDER BY id`)
	require.NoError(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"kept"}, ids)
	require.False(t, slices.Contains(ids, "dropped"))
}

// A batch of large JSON values (a jsonb column takes them as byte
// slices, sent as they are) is written whole, through the version gate,
// and the statement Flush adds to scrub them from the connection changes
// no outcome.
func TestTypedEffectsLargeJSONValues(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `CREATE TABLE docs (id text PRIMARY KEY, version bigint NOT NULL, body jsonb NOT NULL, note text)`)
	require.NoError(t, err)
	docs := &handlers.Table{Name: "docs", Key: []string{"id"}, Version: "version", Columns: []string{"body", "note"}}
	var reg handlers.Registry
	reg.Table(docs)
	require.NoError(t, handling.Of(&reg).CheckTables(ctx, db.Pool))
	body := func(n, size int) []byte {
		return []byte(fmt.Sprintf(`{"n": %d, "items": [%s0]}`, n, strings.Repeat(fmt.Sprintf("%d,", n), size/2)))
	}
	e := handling.NewEffects(handling.Of(&reg).Env(nil, outbox.Expiry{}, nil, 0))
	var outs []*handling.Outcome
	for i, w := range []struct {
		id      string
		version int64
		body    []byte
		note    any
	}{
		{"d1", 2, body(1, 700_000), "one"},
		{"d2", 1, body(2, 700_000), nil},
		{"d1", 1, body(3, 700_000), "stale"}, // older than d1's version 2 in the same batch
	} {
		outs = append(outs, e.Begin(handlers.Origin{Offset: int64(i)}, event.Event{Key: fmt.Sprint(i)}))
		require.NoError(t, e.Effects().Upsert(docs, w.version, w.id, w.body, w.note))
	}
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, e.Flush(ctx, tx))
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, []dedupe.Disposition{dedupe.Applied, dedupe.Applied, dedupe.Stale},
		[]dedupe.Disposition{outs[0].Disposition, outs[1].Disposition, outs[2].Disposition})
	for id, want := range map[string][]byte{"d1": body(1, 700_000), "d2": body(2, 700_000)} {
		var same bool
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT body = $2::jsonb FROM docs WHERE id = $1`, id, string(want)).Scan(&same))
		require.True(t, same, "%s's body", id)
	}
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM docs WHERE note IS NULL`))
}

// The scrub statement is as wide as the widest of the batch, beyond the
// 100 arguments a PostgreSQL function takes: a handler's raw statement of
// 300 parameters with large values still flushes.
func TestFlushScrubsAWideStatement(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `CREATE TABLE blobs (id int PRIMARY KEY, body text NOT NULL)`)
	require.NoError(t, err)
	var reg handlers.Registry
	e := handling.NewEffects(handling.Of(&reg).Env(nil, outbox.Expiry{}, nil, 0))
	out := e.Begin(handlers.Origin{}, event.Event{Key: "k"})
	var values []string
	var args []any
	for i := range 150 {
		values = append(values, fmt.Sprintf("($%d::int, $%d::text)", 2*i+1, 2*i+2))
		args = append(args, i, strings.Repeat("x", 10_000))
	}
	e.Effects().Exec(nil, `INSERT INTO blobs (id, body) VALUES `+strings.Join(values, ", "), args...)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, e.Flush(ctx, tx))
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, dedupe.Applied, out.Disposition)
	require.Equal(t, int64(150), db.Count(t, `SELECT count(*) FROM blobs WHERE length(body) = 10000`))
}
