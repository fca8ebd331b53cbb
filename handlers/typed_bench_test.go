package handlers_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/handling"
	"github.com/effectively-io/effectively/internal/outbox"
	"github.com/effectively-io/effectively/internal/pgtest"
)

// How a batch of upserts is best sent: the arrays of one statement (what
// Flush does) against COPY into a temporary table and one INSERT … SELECT
// from it. go test -run '^$' -bench Upsert ./handlers/ (with the stack's
// EFFECTIVELY_TEST_POSTGRES_URL); the batch is the worker's default 500.
func BenchmarkUpsertBatch(b *testing.B) {
	const n = 500
	db := pgtest.New(b)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `CREATE TABLE owners (id text PRIMARY KEY, version bigint NOT NULL, name text NOT NULL, updated_at timestamptz)`)
	require.NoError(b, err)
	var reg handlers.Registry
	reg.Table(owners)
	env := handling.Of(&reg).Env(nil, outbox.Expiry{}, nil, 0)
	round := 0
	rows := func() (ids []string, versions []int64, names []string) {
		round++
		for i := range n {
			ids = append(ids, fmt.Sprintf("o-%d", (round*n+i)%20000))
			versions = append(versions, int64(round))
			names = append(names, fmt.Sprintf("name %d", i))
		}
		return
	}
	b.Run("arrays", func(b *testing.B) {
		for b.Loop() {
			ids, versions, names := rows()
			tx, err := db.Pool.Begin(ctx)
			require.NoError(b, err)
			e := handling.NewEffects(env)
			for i := range ids {
				e.Begin(handlers.Origin{}, event.Event{})
				require.NoError(b, e.Effects().Upsert(owners, versions[i], ids[i], names[i]))
			}
			require.NoError(b, e.Flush(ctx, tx))
			require.NoError(b, tx.Commit(ctx))
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n)/1000, "µs/row")
	})
	b.Run("copy", func(b *testing.B) {
		for b.Loop() {
			ids, versions, names := rows()
			tx, err := db.Pool.Begin(ctx)
			require.NoError(b, err)
			_, err = tx.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS owners_in (id text, version bigint, name text) ON COMMIT DELETE ROWS`)
			require.NoError(b, err)
			src := make([][]any, n)
			for i := range ids {
				src[i] = []any{ids[i], versions[i], names[i]}
			}
			_, err = tx.CopyFrom(ctx, pgx.Identifier{"owners_in"}, []string{"id", "version", "name"}, pgx.CopyFromRows(src))
			require.NoError(b, err)
			_, err = tx.Exec(ctx, `INSERT INTO owners AS t (id, version, name, updated_at)
SELECT DISTINCT ON (id) id, version, name, now() FROM owners_in ORDER BY id, version DESC
ON CONFLICT (id) DO UPDATE SET version = excluded.version, name = excluded.name, updated_at = excluded.updated_at
WHERE t.version < excluded.version`)
			require.NoError(b, err)
			require.NoError(b, tx.Commit(ctx))
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n)/1000, "µs/row")
	})
}
