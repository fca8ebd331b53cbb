package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/internal/deadletter"
	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/handling"
	"github.com/effectively-io/effectively/internal/outbox"
	"github.com/effectively-io/effectively/internal/pipeline"
)

// The row-by-row retention measurement (-prune-rows N): the tables that
// grow with bad input, side effects and deletes rather than with every
// event (dead letters, outbox intents, parked history, tombstones) keep
// their batch deletion. What it costs is bounded by their own growth: per
// table, N expired rows are deleted by the engine's pruner (batches of
// 5,000, paused between them) alone on a schema of their own, and the
// time and PostgreSQL's CPU per row are printed. A table growing by r
// rows/s then costs the database r × (µs per row) of CPU, and the pruner
// keeps up while r stays below its rows/s.

// rowPruneResult is one table's figures.
type rowPruneResult struct {
	table  string
	rows   int64
	took   time.Duration
	pgUs   float64 // PostgreSQL CPU µs per deleted row
	passes int
}

// expiredRowsSQL fills each row-pruned table with $1 rows 60 days old.
var expiredRowsSQL = map[string]string{
	"dead_letters": `INSERT INTO dead_letters (consumer_group, topic, "partition", "offset", reason, error, value_prefix, value_size, last_seen_at, published_at)
SELECT 'g', 'bench.poison', (i % 8)::int, i / 8, 'not_json', 'invalid character', decode(repeat('7b', 64), 'hex'), 64, now() - interval '60 days', now() - interval '60 days'
FROM generate_series(1, $1::bigint) i`,
	"outbox": `INSERT INTO outbox (event_key, operation, resource, method, target, request, idempotency_key, idempotent, state, updated_at)
SELECT 'ce:20:urn:bench:expired:' || i, 'crm.upsert_contact', 'acct-' || (i % 100000), 'PUT', 'http://crm.invalid/contacts', '{"name":"x","email":"x@example.com"}',
       'ik-' || i, true, 'sent', now() - interval '60 days'
FROM generate_series(1, $1::bigint) i`,
	"parked_events": `INSERT INTO parked_events (event_key, consumer_group, topic, "partition", "offset", resource, event_type, event, state, parked_at, resolved_at)
SELECT 'ce:20:urn:bench:parked:' || i, 'g', 'bench.parked', (i % 8)::int, i / 8, 'acct-' || (i % 100000), 'ledger.credited', '{"amount_cents":100}', 'released',
       now() - interval '61 days', now() - interval '60 days'
FROM generate_series(1, $1::bigint) i`,
	"effectively_tombstones": `INSERT INTO effectively_tombstones (table_name, key, version, deleted_at)
SELECT 'orders', jsonb_build_array('order-' || i), 3, now() - interval '60 days'
FROM generate_series(1, $1::bigint) i`,
}

// runRowPruning measures each row-pruned table on a schema of its own.
func (b *bench) runRowPruning(ctx context.Context, n int) ([]rowPruneResult, error) {
	var out []rowPruneResult
	for _, t := range []dedupe.PrunedTable{deadletter.Pruned, outbox.Pruned, pipeline.ParkedPruned, handling.TombstonesPruned} {
		d, err := b.newDB(ctx, "prunerows", migrateWorker)
		if err != nil {
			return nil, err
		}
		res, err := b.pruneRowsOnce(ctx, d, t, n)
		d.drop(context.WithoutCancel(ctx))
		if err != nil {
			return nil, fmt.Errorf("pruning %s: %w", t.Name, err)
		}
		progress("row pruning: %s, %d rows in %s, %.1f µs of PostgreSQL CPU per row", res.table, res.rows, res.took.Round(time.Millisecond), res.pgUs)
		out = append(out, res)
	}
	return out, nil
}

func (b *bench) pruneRowsOnce(ctx context.Context, d *db, t dedupe.PrunedTable, n int) (rowPruneResult, error) {
	res := rowPruneResult{table: t.Name}
	if _, err := d.pool.Exec(ctx, expiredRowsSQL[t.Name], n); err != nil {
		return res, fmt.Errorf("inserting %d expired rows: %w", n, err)
	}
	if _, err := d.pool.Exec(ctx, `VACUUM ANALYZE `+t.Name); err != nil {
		return res, err
	}
	pool, err := pgxpool.New(ctx, d.url)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	p, err := dedupe.NewPruner(pool, dedupe.PrunerOptions{Retention: 14 * 24 * time.Hour, OutboxRetention: 14 * 24 * time.Hour,
		Tables: []dedupe.PrunedTable{t}, Logger: zap.NewNop()})
	if err != nil {
		return res, err
	}
	before := takeCPUSnapshot()
	start := time.Now()
	for {
		r, err := p.Prune(ctx)
		if err != nil {
			return res, err
		}
		res.passes++
		res.rows += r.Rows()
		if r.Rows() == 0 || res.rows >= int64(n) {
			break
		}
	}
	res.took = time.Since(start)
	if res.rows > 0 {
		res.pgUs = b.pgCPU(cpuBetween(before, takeCPUSnapshot())) * 1e6 / float64(res.rows)
	}
	return res, nil
}

func printRowPruning(out io.Writer, rs []rowPruneResult) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "\n: row-by-row retention of the tables that grow with bad input, side effects and deletes (-prune-rows)")
	fmt.Fprintln(w, "table\trows deleted\ttook\trows/s\tPostgreSQL CPU µs/row")
	for _, r := range rs {
		fmt.Fprintf(w, "%s\t%d\t%s\t%.0f\t%.1f\n", r.table, r.rows, r.took.Round(time.Millisecond), float64(r.rows)/r.took.Seconds(), r.pgUs)
	}
	w.Flush()
}
