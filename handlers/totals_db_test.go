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

// A Total that does not fit its table is refused at start-up, naming the
// column and the fix.
func TestCheckTablesRefusesAMisfitTotal(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, totalsSchema+`
CREATE TABLE loose (sku text, site int, on_hand text);`)
	require.NoError(t, err)
	for _, c := range []struct {
		total *handlers.Total
		want  string
	}{
		{&handlers.Total{Name: "nowhere", Key: []string{"sku", "site"}, Column: "on_hand", Delta: "qty"}, "table nowhere: does not exist"},
		{&handlers.Total{Name: "loose", Key: []string{"sku", "site"}, Column: "on_hand", Delta: "qty"}, "column site: is integer where the fact's site is text"},
		{&handlers.Total{Name: "loose", Key: []string{"sku"}, Column: "on_hand", Delta: "qty"}, "column on_hand: is not a writable numeric column"},
		{&handlers.Total{Name: "stock", Key: []string{"sku"}, Column: "on_hand", Delta: "qty"}, "no primary key or unique constraint covers exactly the key"},
	} {
		var reg handlers.Registry
		reg.Table(&handlers.Table{Name: "moves", Key: []string{"event_key"}, Columns: []string{"sku", "site", "qty"}, Totals: []*handlers.Total{c.total}})
		require.ErrorContains(t, handling.Of(&reg).CheckTables(ctx, db.Pool), c.want)
	}
	// Declarations that cannot work panic at registration.
	for _, bad := range []*handlers.Table{
		{Name: "moves", Key: []string{"event_key"}, Columns: []string{"sku", "qty"}, Totals: []*handlers.Total{{Name: "stock", Key: []string{"sku", "site"}, Column: "on_hand", Delta: "qty"}}},
		{Name: "moves", Key: []string{"event_key"}, Columns: []string{"sku", "qty"}, Totals: []*handlers.Total{{Name: "stock", Key: []string{"sku"}, Column: "on_hand", Delta: "amount"}}},
		{Name: "moves", Key: []string{"event_key"}, Version: "v", Columns: []string{"sku", "qty"}, Totals: []*handlers.Total{{Name: "stock", Key: []string{"sku"}, Column: "on_hand", Delta: "qty"}}},
	} {
		var reg handlers.Registry
		require.Panics(t, func() { reg.Table(bad) })
	}
}
