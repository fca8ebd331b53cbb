package handlers_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/handling"
	"github.com/effectively-io/effectively/internal/outbox"
	"github.com/effectively-io/effectively/internal/pgtest"
)

const totalsSchema = `
CREATE TABLE moves (event_key text PRIMARY KEY, sku text NOT NULL, site text NOT NULL, qty bigint NOT NULL);
CREATE TABLE stock (sku text, site text, on_hand bigint NOT NULL DEFAULT 0, updated_at timestamptz,
                    PRIMARY KEY (sku, site));
CREATE TABLE sku_totals (product text PRIMARY KEY, qty numeric NOT NULL DEFAULT 0, moves bigint NOT NULL DEFAULT 0);`

// A running total under duplicates and disorder: batches of facts, each
// fact delivered again (in the same batch, in a later one), in any order.
// Every total equals the sum of its distinct facts, whatever the batching;
// two totals of one table (one keyed by other column names) both hold.
func TestTotalsEqualTheSumOfDistinctFacts(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, totalsSchema)
	require.NoError(t, err)
	moves := &handlers.Table{Name: "moves", Key: []string{"event_key"}, Columns: []string{"sku", "site", "qty"},
		Totals: []*handlers.Total{
			{Name: "stock", Key: []string{"sku", "site"}, Column: "on_hand", Delta: "qty", Touch: []string{"updated_at"}},
			{Name: "sku_totals", Key: []string{"product"}, KeyFrom: []string{"sku"}, Column: "qty", Delta: "qty"},
		}}
	var reg handlers.Registry
	reg.Table(moves)
	require.NoError(t, handling.Of(&reg).CheckTables(ctx, db.Pool))
	env := handling.Of(&reg).Env(nil, outbox.Expiry{}, nil, 0)

	type fact struct {
		key, sku, site string
		qty            int64
	}
	rng := rand.New(rand.NewPCG(7, 9))
	var facts []fact
	for i := range 400 {
		facts = append(facts, fact{fmt.Sprintf("m-%d", i), fmt.Sprintf("sku-%d", rng.IntN(7)), fmt.Sprintf("site-%d", rng.IntN(3)), rng.Int64N(200) - 80})
	}
	// Every fact twice or three times, shuffled, cut into batches of 1–60.
	var deliveries []fact
	for _, f := range facts {
		for range 2 + rng.IntN(2) {
			deliveries = append(deliveries, f)
		}
	}
	rng.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
	for len(deliveries) > 0 {
		n := min(len(deliveries), 1+rng.IntN(60))
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		e := handling.NewEffects(env)
		for _, f := range deliveries[:n] {
			e.Begin(handlers.Origin{}, event.Event{Key: f.key})
			require.NoError(t, e.Effects().InsertOnce(moves, f.key, f.sku, f.site, f.qty))
		}
		require.NoError(t, e.Flush(ctx, tx))
		require.NoError(t, tx.Commit(ctx))
		deliveries = deliveries[n:]
	}

	want := map[[2]string]int64{}
	wantSKU := map[string]int64{}
	for _, f := range facts {
		want[[2]string{f.sku, f.site}] += f.qty
		wantSKU[f.sku] += f.qty
	}
	rows, err := db.Pool.Query(ctx, `SELECT sku, site, on_hand FROM stock`)
	require.NoError(t, err)
	got := map[[2]string]int64{}
	for rows.Next() {
		var sku, site string
		var n int64
		require.NoError(t, rows.Scan(&sku, &site, &n))
		got[[2]string{sku, site}] = n
	}
	require.NoError(t, rows.Err())
	require.Equal(t, want, got)
	for sku, n := range wantSKU {
		require.Equal(t, n, db.Count(t, `SELECT qty::bigint FROM sku_totals WHERE product = $1`, sku), sku)
	}
	require.Equal(t, int64(len(facts)), db.Count(t, `SELECT count(*) FROM moves`))
	require.Equal(t, int64(0), db.Count(t, `SELECT count(*) FROM stock WHERE updated_at IS NULL`))
}

// A Total that does not fit its tables is refused at start-up, naming the
// column and the fix: what would round, stay NULL, lose facts or stall the
// partition on its first batch.
func TestCheckTablesRefusesAMisfitTotal(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, totalsSchema+`
CREATE TABLE cents (event_key text PRIMARY KEY, sku text NOT NULL, qty numeric(10,2) NOT NULL, note text);
CREATE TABLE loose (sku text, site int, on_hand text);
ALTER TABLE stock ADD COLUMN sku_note text;
CREATE TABLE rounded (sku text PRIMARY KEY, n integer NOT NULL DEFAULT 0);
CREATE TABLE keyed (note text PRIMARY KEY, n numeric NOT NULL DEFAULT 0);
CREATE TABLE nullable (sku text PRIMARY KEY, n bigint);`)
	require.NoError(t, err)
	moves := func(tt *handlers.Total) *handlers.Table {
		return &handlers.Table{Name: "moves", Key: []string{"event_key"}, Columns: []string{"sku", "site", "qty"}, Totals: []*handlers.Total{tt}}
	}
	cents := func(tt *handlers.Total) *handlers.Table {
		return &handlers.Table{Name: "cents", Key: []string{"event_key"}, Columns: []string{"sku", "qty", "note"}, Totals: []*handlers.Total{tt}}
	}
	for _, c := range []struct {
		facts *handlers.Table
		want  string
	}{
		{moves(&handlers.Total{Name: "nowhere", Key: []string{"sku", "site"}, Column: "on_hand", Delta: "qty"}), "table nowhere: does not exist"},
		{moves(&handlers.Total{Name: "loose", Key: []string{"sku", "site"}, Column: "on_hand", Delta: "qty"}), "column site: is integer where the fact's site is text"},
		{moves(&handlers.Total{Name: "loose", Key: []string{"sku"}, Column: "on_hand", Delta: "qty"}), "column on_hand: may be NULL"},
		{moves(&handlers.Total{Name: "nullable", Key: []string{"sku"}, Column: "n", Delta: "qty"}), "column n: may be NULL (a NULL total never sums again)"},
		{moves(&handlers.Total{Name: "stock", Key: []string{"sku"}, Column: "on_hand", Delta: "qty"}), "no primary key or unique constraint covers exactly the key"},
		{moves(&handlers.Total{Name: "stock", Key: []string{"sku", "site"}, Column: "on_hand", Delta: "qty", Touch: []string{"sku_note"}}), "column sku_note: is not a timestamp column"},
		{cents(&handlers.Total{Name: "rounded", Key: []string{"sku"}, Column: "n", Delta: "qty"}), "column n: is integer, which cannot hold a sum of qty (numeric(10,2)) without rounding"},
		{cents(&handlers.Total{Name: "keyed", Key: []string{"note"}, Column: "n", Delta: "qty"}), "column note: may be NULL, so a fact would have no total row"},
	} {
		var reg handlers.Registry
		reg.Table(c.facts)
		require.ErrorContains(t, handling.Of(&reg).CheckTables(ctx, db.Pool), c.want)
	}
	// A numeric(10,2) delta into an unconstrained numeric total is exact.
	var reg handlers.Registry
	reg.Table(cents(&handlers.Total{Name: "sku_totals", Key: []string{"product"}, KeyFrom: []string{"sku"}, Column: "qty", Delta: "qty"}))
	require.NoError(t, handling.Of(&reg).CheckTables(ctx, db.Pool))
	// Declarations that cannot work panic at registration.
	for _, bad := range []*handlers.Table{
		{Name: "moves", Key: []string{"event_key"}, Columns: []string{"sku", "qty"}, Totals: []*handlers.Total{{Name: "stock", Key: []string{"sku", "site"}, Column: "on_hand", Delta: "qty"}}},
		{Name: "moves", Key: []string{"event_key"}, Columns: []string{"sku", "qty"}, Totals: []*handlers.Total{{Name: "stock", Key: []string{"sku"}, Column: "on_hand", Delta: "amount"}}},
		{Name: "moves", Key: []string{"event_key"}, Version: "v", Columns: []string{"sku", "qty"}, Totals: []*handlers.Total{{Name: "stock", Key: []string{"sku"}, Column: "on_hand", Delta: "qty"}}},
		{Name: "moves", Key: []string{"event_key"}, Columns: []string{"sku", "site", "qty"}, Totals: []*handlers.Total{ // one table, two totals
			{Name: "stock", Key: []string{"sku"}, Column: "on_hand", Delta: "qty"}, {Name: "stock", Key: []string{"site"}, Column: "on_hand", Delta: "qty"}}},
		{Name: "moves", Key: []string{"event_key"}, Columns: []string{"sku", "qty"}, Totals: []*handlers.Total{ // Touch names the total's column
			{Name: "stock", Key: []string{"sku"}, Column: "on_hand", Delta: "qty", Touch: []string{"on_hand"}}}},
	} {
		var reg handlers.Registry
		require.Panics(t, func() { reg.Table(bad) })
	}
}

// A totals table's foreign keys order the writes too: a fact whose total
// references a row upserted in the same batch finds it, whatever order the
// tables were registered in.
func TestTotalsFollowTheirForeignKeys(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `
CREATE TABLE acct (id text PRIMARY KEY, version bigint NOT NULL);
CREATE TABLE entries (event_key text PRIMARY KEY, acct_id text NOT NULL, amt bigint NOT NULL);
CREATE TABLE tot (acct_id text PRIMARY KEY REFERENCES acct (id), n bigint NOT NULL DEFAULT 0);`)
	require.NoError(t, err)
	entries := &handlers.Table{Name: "entries", Key: []string{"event_key"}, Columns: []string{"acct_id", "amt"},
		Totals: []*handlers.Total{{Name: "tot", Key: []string{"acct_id"}, Column: "n", Delta: "amt"}}}
	acct := &handlers.Table{Name: "acct", Key: []string{"id"}, Version: "version"}
	var reg handlers.Registry
	reg.Table(entries) // before the table its total references
	reg.Table(acct)
	require.NoError(t, handling.Of(&reg).CheckTables(ctx, db.Pool))
	e := handling.NewEffects(handling.Of(&reg).Env(nil, outbox.Expiry{}, nil, 0))
	e.Begin(handlers.Origin{}, event.Event{Key: "e1"})
	require.NoError(t, e.Effects().InsertOnce(entries, "e1", "a1", int64(7)))
	e.Begin(handlers.Origin{}, event.Event{Key: "e0"})
	require.NoError(t, e.Effects().Upsert(acct, 1, "a1"))
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, e.Flush(ctx, tx))
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, int64(7), db.Count(t, `SELECT n FROM tot WHERE acct_id = 'a1'`))
}
