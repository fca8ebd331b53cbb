package dedupe

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// PrunedTable is a table whose expired rows the pruner deletes. The package
// that owns the table writes its statements (with [PruneStatement]); the
// pruner runs them in order, batch by batch, under its lock.
type PrunedTable struct {
	// Name is the table's name (the prune_watermarks key, the metric label).
	Name string
	// OutboxRetention: its rows expire after outbox.retention rather than
	// dedupe.retention.
	OutboxRetention bool
	// Count counts the expired rows; $1 is the cutoff.
	Count string
	// Prune deletes one batch and moves the watermarks; see
	// [PruneStatement].
	Prune string
	// Generational: the table is partitioned in generations, which
	// [MaintainGenerations] rotates and drops whole; Count and Prune are
	// unused.
	Generational bool
}

// PruneStatement builds a table's batch deletion from two CTE bodies:
// doomed selects one batch of expired rows ($1 the cutoff, $2 the batch
// size) oldest first, FOR UPDATE SKIP LOCKED; gone deletes them. With
// marksOffsets, gone returns each row's origin (topic, "partition",
// "offset") and the highest pruned offset per source partition is
// recorded for the audit. The table's watermark ($3 the table's name) moves
// to the cutoff in the same statement; it returns the rows deleted.
func PruneStatement(doomed, gone string, marksOffsets bool) string {
	sql := "\nWITH doomed AS (" + doomed + "\n),\ngone AS (" + gone + "\n),"
	if marksOffsets {
		sql += markOffsets
	}
	return sql + markTable
}

// Claims is effectively_claims as the pruner sees it: dropped a generation
// at a time (generations.go). A claim whose event is still parked is moved
// into the open generation first: releasing it updates the claim, and a
// redelivery must still find it.
var Claims = PrunedTable{Name: ClaimsTable, Generational: true}

// ClaimsTable is the claims' partitioned table.
const ClaimsTable = "effectively_claims"

// ErrPrunerBusy is returned by [Pruner.Prune] when another pruner (another
// replica's, or a running worker's when `effectively prune` is called) holds
// the pruner lock of the database schema.
var ErrPrunerBusy = errors.New("another pruner is running on this database schema (a worker's background pruner, or another `effectively prune`)")

// PrunerOptions configure a Pruner. Zero values take the defaults documented
// on each field.
type PrunerOptions struct {
	// Retention is how long claims, published dead letters and resolved
	// parked events are kept (dedupe.retention). Required.
	Retention time.Duration
	// OutboxRetention is how long sent and suppressed outbox intents are
	// kept (outbox.retention). Required.
	OutboxRetention time.Duration
	// GenerationInterval is how long a claims generation stays open
	// (dedupe.generation_interval; default Retention / 2).
	GenerationInterval time.Duration
	// Tables are pruned in this order, each by the statements of the
	// package that owns it. Required.
	Tables []PrunedTable
	// Interval is the time between two passes of [Pruner.Run] (default 1 min).
	Interval time.Duration
	// BatchSize is the most rows one short transaction deletes (default 5,000).
	BatchSize int
	// Pause is the least time between two batches (default 100 ms). The
	// pruner also waits at least as long as the batch took, so it never
	// keeps a connection busy more than half the time.
	Pause time.Duration
	// Logger receives a line per pass that deleted something.
	Logger *zap.Logger
	// PrunedFunc, when set, is called after each batch with the table and
	// the rows deleted (the metrics).
	PrunedFunc func(table string, rows int64)
	// PassedFunc, when set, is called after each pass that pruned every
	// table (not a dry run, not one skipped for another pruner's lock): the
	// metric an alert on a stalled pruner reads.
	PassedFunc func()
}

func (o *PrunerOptions) setDefaults() {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Interval <= 0 {
		o.Interval = time.Minute
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 5000
	}
	if o.Pause <= 0 {
		o.Pause = 100 * time.Millisecond
	}
	if o.GenerationInterval <= 0 {
		o.GenerationInterval = o.Retention / 2
	}
}

// Pruner deletes what has outlived its retention: claims older than
// dedupe.retention (except claims of events still parked), published dead
// letters last seen before then, resolved parked events resolved before
// then, and sent or suppressed outbox intents older than outbox.retention.
//
// It deletes oldest first, through the tables' age indexes, in batches of
// BatchSize rows, each its own short transaction that skips rows another
// transaction has locked (FOR UPDATE SKIP LOCKED), so it never waits for the
// worker and the worker waits for it at most one batch. Between batches it
// pauses.
//
// In the same transaction as each batch it moves the watermarks the audit
// reads (prune_watermarks: per table, the cutoff below which rows may have
// been deleted; pruned_offsets: per source partition, the highest origin
// offset of a pruned claim or dead letter), so a pruned claim is never
// mistaken for a missing one.
//
// One pruner runs at a time per database schema: a pass holds a session
// advisory lock; a pruner that finds it taken skips the pass.
type Pruner struct {
	pool *pgxpool.Pool
	opts PrunerOptions
	log  *zap.Logger
}

// NewPruner returns a pruner for the tables in pool's database (its
// search_path's schema). It does not connect until it prunes.
func NewPruner(pool *pgxpool.Pool, opts PrunerOptions) (*Pruner, error) {
	opts.setDefaults()
	switch {
	case pool == nil:
		return nil, errors.New("dedupe: the pruner needs a database pool")
	case opts.Retention <= 0:
		return nil, fmt.Errorf("dedupe: pruner retention %s must be positive (dedupe.retention)", opts.Retention)
	case opts.OutboxRetention <= 0:
		return nil, fmt.Errorf("dedupe: pruner outbox retention %s must be positive (outbox.retention)", opts.OutboxRetention)
	case len(opts.Tables) == 0:
		return nil, errors.New("dedupe: the pruner needs the tables to prune")
	}
	return &Pruner{pool: pool, opts: opts, log: opts.Logger}, nil
}

// TablePrune is what a pass did (or, dry, would do) to one table.
type TablePrune struct {
	// Table is the table's name.
	Table string `json:"table"`
	// Before is the cutoff: rows older than it go.
	Before time.Time `json:"before"`
	// Rows is the number of rows deleted (dry: that would be deleted).
	Rows int64 `json:"rows"`
	// Batches is the number of transactions it took (0 when dry).
	Batches int `json:"batches"`
	// Took is the time spent on the table, pauses included.
	Took time.Duration `json:"took_ns"`
	// Generations is what a generational table's pass did; its Rows are
	// PostgreSQL's estimate of the dropped generations' rows.
	Generations *GenerationPass `json:"generations,omitempty"`
}

// PruneResult is one pass over every pruned table.
type PruneResult struct {
	// DryRun is true when nothing was deleted, only counted.
	DryRun bool `json:"dry_run"`
	// Tables are the tables in the order they were pruned.
	Tables []TablePrune `json:"tables"`
	// Took is the time of the whole pass.
	Took time.Duration `json:"took_ns"`
}

// Rows is the total of rows deleted (or, dry, that would be), the claims
// of dropped generations by PostgreSQL's estimate.
func (r PruneResult) Rows() int64 {
	var n int64
	for _, t := range r.Tables {
		n += t.Rows
	}
	return n
}

// Deleted is the exact count of rows deleted row by row (or, dry, that
// would be) and the number of claims generations dropped.
func (r PruneResult) Deleted() (rows int64, generations int) {
	for _, t := range r.Tables {
		if t.Generations != nil {
			generations += len(t.Generations.Dropped)
			continue
		}
		rows += t.Rows
	}
	return rows, generations
}

// Run prunes every Interval until ctx is done, then returns nil. A pass that
// fails is logged and tried again at the next interval; a pass another
// pruner holds the lock for is skipped.
func (p *Pruner) Run(ctx context.Context) error {
	for {
		if !sleep(ctx, p.opts.Interval) {
			return nil
		}
		_, err := p.Prune(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrPrunerBusy):
			p.log.Debug("pruning skipped: another pruner holds the lock")
		case err != nil:
			p.log.Warn("pruning failed; trying again at the next interval", zap.Error(err), zap.Duration("interval", p.opts.Interval))
		}
	}
}

// Prune runs one pass: every pruned table, in batches, until nothing
// expired is left. It returns ErrPrunerBusy at once when another pruner
// holds the lock. After a failure the result holds what was deleted before.
func (p *Pruner) Prune(ctx context.Context) (PruneResult, error) {
	return p.pass(ctx, false)
}

// Expired counts what a pass would delete now, deleting nothing.
func (p *Pruner) Expired(ctx context.Context) (PruneResult, error) {
	return p.pass(ctx, true)
}

// markOffsets records the highest pruned origin offset per source partition
// from the gone CTE (sorted by the conflict key, like every multi-row
// upsert).
const markOffsets = `
marks AS (
    INSERT INTO pruned_offsets AS w (topic, "partition", max_offset)
    SELECT topic, "partition", max("offset") FROM gone GROUP BY topic, "partition" ORDER BY topic, "partition"
    ON CONFLICT (topic, "partition") DO UPDATE
    SET max_offset = greatest(w.max_offset, excluded.max_offset), updated_at = now()
),`

// markTable moves the table's watermark to the cutoff, with the deletion.
const markTable = `
watermark AS (
    INSERT INTO prune_watermarks AS w (table_name, pruned_before, rows_pruned)
    SELECT $3, $1, count(*) FROM gone
    ON CONFLICT (table_name) DO UPDATE
    SET pruned_before = greatest(w.pruned_before, excluded.pruned_before),
        rows_pruned = w.rows_pruned + excluded.rows_pruned, updated_at = now()
)
SELECT count(*) FROM gone`

func (p *Pruner) pass(ctx context.Context, dry bool) (res PruneResult, err error) {
	start := time.Now()
	res.DryRun = dry
	defer func() { res.Took = time.Since(start) }()

	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return res, fmt.Errorf("connecting to prune: %w", err)
	}
	if !dry {
		key, err := lockKey(ctx, conn)
		if err != nil {
			conn.Release()
			return res, err
		}
		var held bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&held); err != nil {
			conn.Release()
			return res, fmt.Errorf("taking the pruner lock: %w", err)
		}
		if !held {
			conn.Release()
			return res, ErrPrunerBusy
		}
		// Unlock, so the next pass (of any pruner) finds the lock free at
		// once; then close the connection, which releases the lock even when
		// the unlock failed: a pooled connection must never go back holding
		// it.
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_, _ = conn.Exec(cctx, `SELECT pg_advisory_unlock($1)`, key)
			_ = conn.Hijack().Close(cctx)
		}()
	} else {
		defer conn.Release()
	}

	var now time.Time
	if err := conn.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return res, fmt.Errorf("reading the database clock: %w", err)
	}
	for _, t := range p.opts.Tables {
		retention := p.opts.Retention
		if t.OutboxRetention {
			retention = p.opts.OutboxRetention
		}
		tp := TablePrune{Table: t.Name, Before: now.Add(-retention)}
		tstart := time.Now()
		if t.Generational {
			gp, gerr := MaintainGenerations(ctx, conn.Conn(), now, GenerationPolicy{Interval: p.opts.GenerationInterval, Retention: retention}, dry)
			tp.Generations, tp.Rows, tp.Batches, err = &gp, gp.Claims(), len(gp.Dropped), gerr
			if !dry && tp.Rows > 0 && p.opts.PrunedFunc != nil {
				p.opts.PrunedFunc(t.Name, tp.Rows)
			}
		} else if dry {
			err = conn.QueryRow(ctx, t.Count, tp.Before).Scan(&tp.Rows)
			if err != nil {
				err = fmt.Errorf("counting expired rows of %s: %w", t.Name, err)
			}
		} else {
			err = p.pruneTable(ctx, conn, t, &tp)
		}
		tp.Took = time.Since(tstart)
		res.Tables = append(res.Tables, tp)
		if err != nil {
			return res, err
		}
		if !dry && tp.Rows > 0 {
			p.log.Info("pruned", zap.String("table", t.Name), zap.Int64("rows", tp.Rows),
				zap.Int("batches", tp.Batches), zap.Time("before", tp.Before), zap.Duration("took", tp.Took))
		}
	}
	if !dry && p.opts.PassedFunc != nil {
		p.opts.PassedFunc()
	}
	return res, nil
}

// pruneTable deletes t's expired rows batch by batch, pausing between
// batches, until a batch comes back short.
func (p *Pruner) pruneTable(ctx context.Context, conn *pgxpool.Conn, t PrunedTable, tp *TablePrune) error {
	for {
		bstart := time.Now()
		var n int64
		if err := conn.QueryRow(ctx, t.Prune, tp.Before, p.opts.BatchSize, t.Name).Scan(&n); err != nil {
			return fmt.Errorf("pruning %s (rows before %s): %w", t.Name, tp.Before.Format(time.RFC3339), err)
		}
		took := time.Since(bstart)
		tp.Batches++
		tp.Rows += n
		if n > 0 && p.opts.PrunedFunc != nil {
			p.opts.PrunedFunc(t.Name, n)
		}
		if n < int64(p.opts.BatchSize) {
			return nil
		}
		if !sleep(ctx, max(p.opts.Pause, took)) {
			return ctx.Err()
		}
	}
}

// lockKey is the pruner's advisory lock key: one per database schema.
func lockKey(ctx context.Context, conn interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (int64, error) {
	var db string
	var schema *string
	if err := conn.QueryRow(ctx, `SELECT current_database(), current_schema()`).Scan(&db, &schema); err != nil {
		return 0, fmt.Errorf("reading the database and schema names: %w", err)
	}
	if schema == nil {
		return 0, errors.New("the connection's search_path names no existing schema; fix search_path in postgres.url")
	}
	h := fnv.New64a()
	h.Write([]byte("effectively/dedupe/pruner/" + db + "/" + *schema))
	return int64(h.Sum64() >> 1), nil
}

// sleep waits d or until ctx is done; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

const prunedOffsetsSQL = `SELECT "partition", max_offset FROM pruned_offsets WHERE topic = $1`

// PrunedOffsets returns, per partition of topic, the highest origin offset
// of a pruned claim or dead letter: a record at or below it may have lost
// its claim and dead letter to retention. Partitions nothing was pruned
// from are absent.
func PrunedOffsets(ctx context.Context, db Querier, topic string) (map[int32]int64, error) {
	rows, err := db.Query(ctx, prunedOffsetsSQL, topic)
	if err != nil {
		return nil, fmt.Errorf("reading the pruned offsets of %s: %w", topic, err)
	}
	out := map[int32]int64{}
	var p int32
	var o int64
	if _, err := pgx.ForEachRow(rows, []any{&p, &o}, func() error { out[p] = o; return nil }); err != nil {
		return nil, fmt.Errorf("reading the pruned offsets of %s: %w", topic, err)
	}
	return out, nil
}

const watermarksSQL = `SELECT table_name, pruned_before FROM prune_watermarks`

// Watermarks returns, per pruned table, the cutoff below which rows may
// have been deleted; tables never pruned are absent.
func Watermarks(ctx context.Context, db Querier) (map[string]time.Time, error) {
	rows, err := db.Query(ctx, watermarksSQL)
	if err != nil {
		return nil, fmt.Errorf("reading the prune watermarks: %w", err)
	}
	out := map[string]time.Time{}
	var name string
	var before time.Time
	if _, err := pgx.ForEachRow(rows, []any{&name, &before}, func() error { out[name] = before; return nil }); err != nil {
		return nil, fmt.Errorf("reading the prune watermarks: %w", err)
	}
	return out, nil
}
