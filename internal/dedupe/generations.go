package dedupe

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Claims live in generations: effectively_claims is partitioned by
// generation, one table per generation, each with its own primary key on
// event_key. Claims go into the one open generation; every
// dedupe.generation_interval the pruner closes it and opens the next; a
// closed generation whose close is older than dedupe.retention is dropped
// whole — O(1) in its number of claims, where deleting them row by row cost
// the database as much as claiming them.
//
// PostgreSQL enforces uniqueness within one table only, so "a key is
// claimed at most once within the retention window" is kept by two rules:
//
//  1. Within the open generation, its primary key decides, exactly as the
//     single table did: INSERT … ON CONFLICT DO NOTHING at READ COMMITTED,
//     a concurrent second claimer waits for the first and then does
//     nothing.
//  2. A key claimed in a closed generation is found before the insert: the
//     claim statement inserts only keys that no older generation holds.
//     That read is exact because a closed generation can no longer change:
//     closing it adds a CHECK (false) constraint (effectively_claims_closed)
//     under an ACCESS EXCLUSIVE lock on its table, which waits for every
//     transaction that inserted into it to end. So every claim of a closed
//     generation committed before the close committed, and a transaction
//     that knows the generation is closed (it read the open generation
//     after the close) sees them all. A member whose cached generation is
//     stale — a zombie, or a member that has not looked since — fails the
//     check (ErrGenerationClosed), learns the open generation and redoes
//     the batch; it can never put a key into a generation others consider
//     closed.
//
// A claim still parked when its generation expires is moved into the open
// generation first (a release must still find it; a concurrent lock on it
// fails with a serialization error and is retried). The table is then
// detached and dropped: the parent's ACCESS EXCLUSIVE lock is held for a
// moment, whatever the number of claims.
//
// The DDL (create, close, drop) runs in SQL functions the migrations
// created, as the tables' owner (SECURITY DEFINER): the worker's role owns
// nothing. They name a generation's table from its number alone and touch
// it only as a partition of effectively_claims (migration 18), and
// claim_generations, whose states decide what they do, is written only
// through them (effectively_claims_expire marks a generation dropped): the
// worker's role reaches no DDL but theirs, on the claims' own tables.

// ClosedConstraint is the check constraint that closes a generation's
// table.
const ClosedConstraint = "effectively_claims_closed"

// ErrGenerationClosed is returned by ClaimAll when the generation it
// inserted into was closed (or dropped) since this process last read which
// one is open. The transaction is lost; refresh with
// [Generations.Refresh] and redo the batch. It is not a fault of any event.
var ErrGenerationClosed = errors.New("the claims generation was closed by a rotation")

// Generations caches which claims generation is open, for one process.
type Generations struct {
	db   Row
	mu   sync.Mutex
	open int32
	read bool
}

// Row is what reads one row: a pool, a connection or a transaction.
type Row interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// NewGenerations returns a cache that refreshes through db (a pool).
func NewGenerations(db Row) *Generations {
	return &Generations{db: db}
}

const openGenerationSQL = `SELECT generation FROM claim_generations WHERE opened_at IS NOT NULL AND closed_at IS NULL`

// Open returns the open generation, reading it through q on first use.
// Pass the transaction the claim runs in: reading through the pool from
// inside a transaction could wait for a connection that every other
// partition's transaction holds.
func (g *Generations) Open(ctx context.Context, q Row) (int32, error) {
	g.mu.Lock()
	open, read := g.open, g.read
	g.mu.Unlock()
	if read {
		return open, nil
	}
	return g.load(ctx, q)
}

// Refresh reads the open generation again, through the pool (call it
// outside any transaction).
func (g *Generations) Refresh(ctx context.Context) (int32, error) {
	return g.load(ctx, g.db)
}

// load reads the open generation through q; no lock is held while it
// waits.
func (g *Generations) load(ctx context.Context, q Row) (int32, error) {
	var open int32
	if err := q.QueryRow(ctx, openGenerationSQL).Scan(&open); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, errors.New("no claims generation is open (claim_generations): run `effectively migrate`")
		}
		return 0, fmt.Errorf("reading the open claims generation: %w", err)
	}
	g.mu.Lock()
	g.open, g.read = open, true
	g.mu.Unlock()
	return open, nil
}

// generationClosed maps the claim statement's failure to insert into a
// closed generation (its check constraint) or a dropped one (no partition
// for the row) to ErrGenerationClosed.
func generationClosed(err error, gen int32) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23514" && (pgErr.ConstraintName == ClosedConstraint || pgErr.ConstraintName == "") {
		return fmt.Errorf("claims generation %d: %w (%s)", gen, ErrGenerationClosed, pgErr.Message)
	}
	return nil
}

// GenerationPolicy is when generations rotate and expire.
type GenerationPolicy struct {
	// Interval is how long a generation stays open (dedupe.generation_interval).
	Interval time.Duration
	// Retention: a generation is dropped once it has been closed this long
	// (dedupe.retention), so every claim lives at least Retention and at
	// most Retention + Interval (plus a pruner interval).
	Retention time.Duration
	// LockTimeout bounds the wait for the locks that close and drop a
	// generation (claims queue behind them meanwhile); a step that times
	// out is tried at the next pass. Default 500 ms.
	LockTimeout time.Duration
}

// GenerationPass is what one maintenance pass did (or, dry, would do).
type GenerationPass struct {
	// Created are generations whose (empty) tables were created ahead.
	Created []int32 `json:"created,omitempty"`
	// Opened is the generation opened by a rotation, if any.
	Opened *int32 `json:"opened,omitempty"`
	// Dropped are the generations expired (dry: that would be).
	Dropped []DroppedGeneration `json:"dropped,omitempty"`
	// Busy says what waits for the next pass because a vacuum held the
	// table (asking for its lock would queue the claims behind it).
	Busy []string `json:"busy,omitempty"`
}

// DroppedGeneration is one expired generation.
type DroppedGeneration struct {
	Generation int32     `json:"generation"`
	Table      string    `json:"table"`
	ClosedAt   time.Time `json:"closed_at"`
	// Claims is PostgreSQL's estimate of its rows (counting them would read
	// the table this is meant not to read).
	Claims int64 `json:"claims_estimate"`
	// Parked is how many parked claims were moved into the open generation.
	Parked int64 `json:"parked_moved"`
	// Took is the time from the first statement to the table being gone.
	Took time.Duration `json:"took_ns"`
}

// Claims returns the estimated claims of the dropped generations.
func (p GenerationPass) Claims() int64 {
	var n int64
	for _, d := range p.Dropped {
		n += d.Claims
	}
	return n
}

type generationRow struct {
	gen      int32
	relname  string
	openedAt time.Time
}

func openGeneration(ctx context.Context, conn *pgx.Conn) (generationRow, error) {
	var r generationRow
	err := conn.QueryRow(ctx, `SELECT generation, relname, opened_at FROM claim_generations WHERE opened_at IS NOT NULL AND closed_at IS NULL`).
		Scan(&r.gen, &r.relname, &r.openedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, errors.New("no claims generation is open (claim_generations): run `effectively migrate`")
	}
	if err != nil {
		return r, fmt.Errorf("reading the open claims generation: %w", err)
	}
	return r, nil
}

// MaintainGenerations runs one pass on conn, in this order: create the
// next generation's table if it is missing; close the open generation and
// open the next when the open one is Interval old (now is the database's
// clock); drop every generation closed more than Retention ago; finish
// drops a failed pass left half done. Dry, it only reports what it would
// drop. One pass runs at a time per schema: the caller holds the pruner
// lock.
func MaintainGenerations(ctx context.Context, conn *pgx.Conn, now time.Time, pol GenerationPolicy, dry bool) (GenerationPass, error) {
	var pass GenerationPass
	if pol.LockTimeout <= 0 {
		pol.LockTimeout = 500 * time.Millisecond
	}
	if dry {
		d, err := expiredGenerations(ctx, conn, now, pol.Retention)
		pass.Dropped = d
		return pass, err
	}
	pass, err := prepareGenerations(ctx, conn)
	if err != nil {
		return pass, err
	}
	open, err := openGeneration(ctx, conn)
	if err != nil {
		return pass, err
	}
	if now.Sub(open.openedAt) >= pol.Interval {
		if err := rotateTo(ctx, conn, &pass, open, pol.LockTimeout); err != nil {
			return pass, err
		}
		// Read it again: a busy rotation left it where it was.
		if open, err = openGeneration(ctx, conn); err != nil {
			return pass, err
		}
	}
	expired, err := expiredGenerations(ctx, conn, now, pol.Retention)
	if err != nil {
		return pass, err
	}
	for _, d := range expired {
		start := time.Now()
		if err := expire(ctx, conn, &d, open.gen, pol.LockTimeout); err != nil {
			return pass, err
		}
		busy, err := dropTable(ctx, conn, d.Generation, pol.LockTimeout)
		if err != nil {
			return pass, err
		}
		if busy {
			pass.Busy = append(pass.Busy, fmt.Sprintf("generation %d's table goes at the next pass: it is busy (a vacuum, or transactions longer than the lock timeout)", d.Generation))
		}
		d.Took = time.Since(start)
		pass.Dropped = append(pass.Dropped, d)
	}
	// Tables of generations marked dropped by a pass that stopped before
	// the table was gone.
	rows, err := conn.Query(ctx, `SELECT generation FROM claim_generations WHERE dropped_at IS NOT NULL AND to_regclass(quote_ident(relname)) IS NOT NULL ORDER BY generation`)
	if err != nil {
		return pass, fmt.Errorf("finding claims generations left to drop: %w", err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return pass, fmt.Errorf("finding claims generations left to drop: %w", err)
	}
	for _, n := range left {
		if _, err := dropTable(ctx, conn, n, pol.LockTimeout); err != nil {
			return pass, err
		}
	}
	return pass, nil
}

// PrepareGenerations makes the claims generations ready for claims (the
// engine's migration calls it): the open generation's successor exists,
// and a generation 0 that is still empty — a new database, whose
// processed_events still has the claimed_at index only row-by-row
// retention needed — is closed for generation 1 at once. Safe to run
// concurrently with itself and with a pruner.
func PrepareGenerations(ctx context.Context, conn *pgx.Conn) (pass GenerationPass, err error) {
	// Under the pruner's lock, waiting for a pass in progress: migrations
	// and pruners take turns.
	key, err := lockKey(ctx, conn)
	if err != nil {
		return pass, err
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
		return pass, fmt.Errorf("taking the pruner lock: %w", err)
	}
	defer func() {
		if _, uerr := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, key); uerr != nil && err == nil {
			err = fmt.Errorf("releasing the pruner lock: %w", uerr)
		}
	}()
	return prepareGenerations(ctx, conn)
}

// prepareGenerations is PrepareGenerations under the pruner lock.
func prepareGenerations(ctx context.Context, conn *pgx.Conn) (GenerationPass, error) {
	var pass GenerationPass
	open, err := openGeneration(ctx, conn)
	if err != nil {
		return pass, err
	}
	if created, err := ensureGeneration(ctx, conn, open.gen+1); err != nil {
		return pass, err
	} else if created {
		pass.Created = append(pass.Created, open.gen+1)
	}
	if open.gen != 0 {
		return pass, nil
	}
	var empty bool
	if err := conn.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM processed_events)`).Scan(&empty); err != nil {
		return pass, fmt.Errorf("reading claims generation 0: %w", err)
	}
	if !empty {
		return pass, nil
	}
	if err := rotateTo(ctx, conn, &pass, open, 2*time.Second); err != nil || pass.Opened == nil {
		// Not rotated (busy): it stays open, and empty, until a later pass.
		return pass, err
	}
	// Closed empty, it has nothing to keep and nothing for the audit's
	// watermarks: it goes at once.
	if err := markDropped(ctx, conn, 0); err != nil {
		return pass, fmt.Errorf("dropping the empty claims generation 0: %w", err)
	}
	if _, err := dropTable(ctx, conn, 0, 2*time.Second); err != nil {
		return pass, err
	}
	pass.Dropped = append(pass.Dropped, DroppedGeneration{Generation: 0, Table: open.relname})
	return pass, nil
}

// rotateTo closes open, opens its successor and creates the one after.
func rotateTo(ctx context.Context, conn *pgx.Conn, pass *GenerationPass, open generationRow, lockTimeout time.Duration) error {
	rotated, busy, err := rotate(ctx, conn, open, lockTimeout)
	if busy {
		pass.Busy = append(pass.Busy, fmt.Sprintf("generation %d stays open until the next pass: its table is busy (a vacuum, or transactions longer than the lock timeout)", open.gen))
	}
	if err != nil || !rotated {
		return err
	}
	next := open.gen + 1
	pass.Opened = &next
	created, err := ensureGeneration(ctx, conn, next+1)
	if created {
		pass.Created = append(pass.Created, next+1)
	}
	return err
}

// ensureGeneration creates generation n (not open yet) unless it exists
// (effectively_claims_create, as the tables' owner).
func ensureGeneration(ctx context.Context, conn *pgx.Conn, n int32) (bool, error) {
	var created bool
	if err := conn.QueryRow(ctx, `SELECT effectively_claims_create($1)`, n).Scan(&created); err != nil {
		return false, fmt.Errorf("creating claims generation %d: %w", n, err)
	}
	return created, nil
}

// rotate closes the open generation and opens the next
// (effectively_claims_rotate, as the tables' owner); false when another
// rotation closed it first, or when a vacuum holds its table (busy: the
// next pass tries again; claims would queue behind the lock meanwhile).
func rotate(ctx context.Context, conn *pgx.Conn, open generationRow, lockTimeout time.Duration) (rotated, busy bool, err error) {
	var res string
	if err := conn.QueryRow(ctx, `SELECT effectively_claims_rotate($1, $2)`, open.gen, lockTimeout.Milliseconds()).Scan(&res); err != nil {
		if lockTimedOut(err) {
			return false, true, nil
		}
		return false, false, fmt.Errorf("closing claims generation %d and opening %d: %w", open.gen, open.gen+1, err)
	}
	return res == "rotated", res == "busy", nil
}

// expiredGenerations lists the generations closed more than retention
// before now that are not dropped yet, oldest first, with PostgreSQL's
// estimate of their rows.
func expiredGenerations(ctx context.Context, conn *pgx.Conn, now time.Time, retention time.Duration) ([]DroppedGeneration, error) {
	rows, err := conn.Query(ctx, `
SELECT g.generation, g.relname, g.closed_at, coalesce(s.n_live_tup, 0)
FROM claim_generations g
LEFT JOIN pg_stat_user_tables s ON s.relid = to_regclass(quote_ident(g.relname))
WHERE g.dropped_at IS NULL AND g.closed_at < $1
ORDER BY g.generation`, now.Add(-retention))
	if err != nil {
		return nil, fmt.Errorf("listing expired claims generations: %w", err)
	}
	var out []DroppedGeneration
	var d DroppedGeneration
	_, err = pgx.ForEachRow(rows, []any{&d.Generation, &d.Table, &d.ClosedAt, &d.Claims}, func() error {
		out = append(out, d)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing expired claims generations: %w", err)
	}
	return out, nil
}

// expire moves d's parked claims into the open generation, records what
// the audit needs (the watermark: claims before d's close may be gone; per
// source partition, the highest offset settled when d closed, which the
// rotation recorded in claim_generation_offsets) and marks d dropped, in
// one transaction.
func expire(ctx context.Context, conn *pgx.Conn, d *DroppedGeneration, open int32, lockTimeout time.Duration) error {
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, strconv.FormatInt(lockTimeout.Milliseconds(), 10)); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `
UPDATE effectively_claims c SET generation = $1
FROM parked_events p
WHERE p.state = 'parked' AND c.event_key = p.event_key AND c.generation = $2`, open, d.Generation)
		if err != nil {
			return fmt.Errorf("moving parked claims into generation %d: %w", open, err)
		}
		d.Parked = tag.RowsAffected()
		if _, err := tx.Exec(ctx, `
WITH closed AS (DELETE FROM claim_generation_offsets WHERE generation = $1 RETURNING topic, "partition", max_offset)
INSERT INTO pruned_offsets AS w (topic, "partition", max_offset)
SELECT topic, "partition", max_offset FROM closed ORDER BY 1, 2
ON CONFLICT (topic, "partition") DO UPDATE
SET max_offset = greatest(w.max_offset, excluded.max_offset), updated_at = now()`, d.Generation); err != nil {
			return fmt.Errorf("recording the pruned offsets: %w", err)
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO prune_watermarks AS w (table_name, pruned_before, rows_pruned) VALUES ($1, $2, $3)
ON CONFLICT (table_name) DO UPDATE
SET pruned_before = greatest(w.pruned_before, excluded.pruned_before),
    rows_pruned = w.rows_pruned + excluded.rows_pruned, updated_at = now()`, Claims.Name, d.ClosedAt, d.Claims); err != nil {
			return fmt.Errorf("moving the watermark: %w", err)
		}
		return markDropped(ctx, tx, d.Generation)
	})
	if err != nil {
		return fmt.Errorf("expiring claims generation %d (%s): %w", d.Generation, d.Table, err)
	}
	return nil
}

// markDropped marks the closed generation n dropped
// (effectively_claims_expire, as the tables' owner: no other role may
// write claim_generations, whose states decide what the functions drop).
func markDropped(ctx context.Context, q Row, n int32) error {
	var marked bool
	if err := q.QueryRow(ctx, `SELECT effectively_claims_expire($1)`, n).Scan(&marked); err != nil {
		return fmt.Errorf("marking claims generation %d dropped: %w", n, err)
	}
	if !marked {
		return fmt.Errorf("claims generation %d cannot be marked dropped: it is not closed, or it is dropped already", n)
	}
	return nil
}

// dropTable drops the table of generation n, which claim_generations
// marks dropped, as the tables' owner: first it detaches it
// (effectively_claims_detach, the parent's lock held for a catalog change),
// then drops it (effectively_claims_drop) in a transaction of its own, so
// that no claim waits while its files are removed. Not while a vacuum
// holds it (busy: the next pass tries again).
func dropTable(ctx context.Context, conn *pgx.Conn, n int32, lockTimeout time.Duration) (busy bool, err error) {
	for _, step := range []struct{ fn, what string }{
		{"effectively_claims_detach", "detaching"},
		{"effectively_claims_drop", "dropping"},
	} {
		var res string
		if err := conn.QueryRow(ctx, `SELECT `+step.fn+`($1, $2)`, n, lockTimeout.Milliseconds()).Scan(&res); err != nil {
			if lockTimedOut(err) {
				return true, nil
			}
			return false, fmt.Errorf("%s the table of claims generation %d: %w", step.what, n, err)
		}
		if res == "busy" {
			return true, nil
		}
		if res == "detached" && afterDetach != nil {
			afterDetach(n)
		}
	}
	return false, nil
}

// afterDetach, when a test sets it, runs between detaching a generation's
// table and dropping it.
var afterDetach func(n int32)

// lockTimedOut reports a lock_timeout (55P03): the lock was not granted in
// time, the claims that queued behind it went on, the next pass tries
// again.
func lockTimedOut(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// GenerationsStatus is where the claims generations stand.
type GenerationsStatus struct {
	// Open is the generation claims go into, open since OpenedAt.
	Open     int32     `json:"open"`
	OpenedAt time.Time `json:"opened_at"`
	// Closed counts the closed generations not dropped yet; OldestClosedAt
	// is the close of the oldest (it is dropped once that is
	// dedupe.retention ago).
	Closed         int        `json:"closed"`
	OldestClosedAt *time.Time `json:"oldest_closed_at,omitempty"`
	// Claims is PostgreSQL's estimate of the claims kept, every generation.
	Claims int64 `json:"claims_estimate"`
}

// ReadGenerations reads where the claims generations stand.
func ReadGenerations(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (GenerationsStatus, error) {
	var s GenerationsStatus
	err := db.QueryRow(ctx, `
SELECT o.generation, o.opened_at,
       (SELECT count(*) FROM claim_generations WHERE closed_at IS NOT NULL AND dropped_at IS NULL),
       (SELECT min(closed_at) FROM claim_generations WHERE closed_at IS NOT NULL AND dropped_at IS NULL),
       (SELECT coalesce(sum(s.n_live_tup), 0)::bigint FROM claim_generations g
        JOIN pg_stat_user_tables s ON s.relid = to_regclass(quote_ident(g.relname)) WHERE g.dropped_at IS NULL)
FROM claim_generations o WHERE o.opened_at IS NOT NULL AND o.closed_at IS NULL`).Scan(&s.Open, &s.OpenedAt, &s.Closed, &s.OldestClosedAt, &s.Claims)
	if err != nil {
		return s, fmt.Errorf("reading the claims generations: %w", err)
	}
	return s, nil
}
