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
// detached concurrently (no lock that blocks claims) and dropped.

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
	db interface {
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	}
	mu   sync.Mutex
	open int32
	read bool
}

// NewGenerations returns a cache that reads the open generation through
// db (a pool) when first asked.
func NewGenerations(db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) *Generations {
	return &Generations{db: db}
}

const openGenerationSQL = `SELECT generation FROM claim_generations WHERE opened_at IS NOT NULL AND closed_at IS NULL`

// Open returns the open generation, reading it on first use.
func (g *Generations) Open(ctx context.Context) (int32, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.read {
		return g.open, nil
	}
	return g.refreshLocked(ctx)
}

// Refresh reads the open generation again.
func (g *Generations) Refresh(ctx context.Context) (int32, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.refreshLocked(ctx)
}

func (g *Generations) refreshLocked(ctx context.Context) (int32, error) {
	var open int32
	if err := g.db.QueryRow(ctx, openGenerationSQL).Scan(&open); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, errors.New("no claims generation is open (claim_generations): run `effectively migrate`")
		}
		return 0, fmt.Errorf("reading the open claims generation: %w", err)
	}
	g.open, g.read = open, true
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
	// LockTimeout bounds the wait for the lock that closes a generation
	// (claims queue behind it meanwhile); a rotation that times out is
	// tried at the next pass. Default 2 s.
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

// generationTable names generation n's table.
func generationTable(n int32) string { return "effectively_claims_g" + strconv.Itoa(int(n)) }

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
		pol.LockTimeout = 2 * time.Second
	}
	if dry {
		d, err := expiredGenerations(ctx, conn, now, pol.Retention)
		pass.Dropped = d
		return pass, err
	}
	pass, err := PrepareGenerations(ctx, conn)
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
		open.gen++
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
		if err := dropTable(ctx, conn, d.Table); err != nil {
			return pass, err
		}
		d.Took = time.Since(start)
		pass.Dropped = append(pass.Dropped, d)
	}
	// Tables of generations marked dropped by a pass that stopped before
	// the table was gone.
	rows, err := conn.Query(ctx, `SELECT relname FROM claim_generations WHERE dropped_at IS NOT NULL AND to_regclass(quote_ident(relname)) IS NOT NULL ORDER BY generation`)
	if err != nil {
		return pass, fmt.Errorf("finding claims generations left to drop: %w", err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return pass, fmt.Errorf("finding claims generations left to drop: %w", err)
	}
	for _, t := range left {
		if err := dropTable(ctx, conn, t); err != nil {
			return pass, err
		}
	}
	return pass, nil
}

// generationDDL creates generation n's table with the parent's columns, its
// constraints and indexes (the primary key is the claim; the origin index
// serves the audit), and attaches it — under SHARE UPDATE EXCLUSIVE on the
// parent, which claims do not wait for.
func generationDDL(n int32) []string {
	t := pgx.Identifier{generationTable(n)}.Sanitize()
	return []string{
		`CREATE TABLE ` + t + ` (LIKE effectively_claims INCLUDING DEFAULTS,
    PRIMARY KEY (event_key),
    CHECK (generation = ` + strconv.Itoa(int(n)) + `),
    CHECK (length(payload_hash) = 32),
    CHECK (disposition IN ('applied', 'stale', 'parked', 'dead_lettered')))`,
		`CREATE INDEX ON ` + t + ` (topic, "partition", "offset")`,
		`ALTER TABLE effectively_claims ATTACH PARTITION ` + t + ` FOR VALUES IN (` + strconv.Itoa(int(n)) + `)`,
	}
}

// PrepareGenerations makes the claims generations ready for claims (the
// engine's migration calls it): the open generation's successor exists,
// and a generation 0 that is still empty — a new database, whose
// processed_events still has the claimed_at index only row-by-row
// retention needed — is closed for generation 1 at once. Safe to run
// concurrently with itself and with a pruner.
func PrepareGenerations(ctx context.Context, conn *pgx.Conn) (GenerationPass, error) {
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
	return pass, rotateTo(ctx, conn, &pass, open, 2*time.Second)
}

// rotateTo closes open, opens its successor and creates the one after.
func rotateTo(ctx context.Context, conn *pgx.Conn, pass *GenerationPass, open generationRow, lockTimeout time.Duration) error {
	rotated, err := rotate(ctx, conn, open, lockTimeout)
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

// ensureGeneration creates generation n (not open yet) unless it exists.
func ensureGeneration(ctx context.Context, conn *pgx.Conn, n int32) (bool, error) {
	created := false
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO claim_generations (generation, relname) VALUES ($1, $2) ON CONFLICT (generation) DO NOTHING`, n, generationTable(n))
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		for _, s := range generationDDL(n) {
			if _, err := tx.Exec(ctx, s); err != nil {
				return err
			}
		}
		created = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("creating claims generation %d: %w", n, err)
	}
	return created, nil
}

// rotate closes the open generation and opens the next, in one
// transaction: the check constraint's ACCESS EXCLUSIVE lock waits for every
// transaction that touched the open generation's table, so the close's
// time (read after the lock) is later than every claim in it.
func rotate(ctx context.Context, conn *pgx.Conn, open generationRow, lockTimeout time.Duration) (bool, error) {
	rotated := false
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, strconv.FormatInt(lockTimeout.Milliseconds(), 10)); err != nil {
			return err
		}
		// A concurrent rotation (a migrate beside a pruner) waits here and
		// then finds the generation closed: nothing left to do.
		var still bool
		if err := tx.QueryRow(ctx, `SELECT closed_at IS NULL FROM claim_generations WHERE generation = $1 FOR UPDATE`, open.gen).Scan(&still); err != nil || !still {
			return err
		}
		if _, err := tx.Exec(ctx, `ALTER TABLE `+pgx.Identifier{open.relname}.Sanitize()+` ADD CONSTRAINT `+ClosedConstraint+` CHECK (false) NOT VALID`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE claim_generations SET closed_at = clock_timestamp() WHERE generation = $1`, open.gen); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE claim_generations SET opened_at = clock_timestamp() WHERE generation = $1 AND opened_at IS NULL`, open.gen+1)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("generation %d is missing or already open", open.gen+1)
		}
		rotated = err == nil
		return err
	})
	if err != nil {
		return false, fmt.Errorf("closing claims generation %d and opening %d: %w", open.gen, open.gen+1, err)
	}
	return rotated, nil
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
// source partition, the highest origin offset in d, read from the origin
// index one partition at a time) and marks d dropped, in one transaction.
func expire(ctx context.Context, conn *pgx.Conn, d *DroppedGeneration, open int32, lockTimeout time.Duration) error {
	t := pgx.Identifier{d.Table}.Sanitize()
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
		// A loose index scan: one probe of the origin index per source
		// partition, however many claims the generation holds.
		if _, err := tx.Exec(ctx, `
WITH RECURSIVE tp AS (
    (SELECT topic, "partition" FROM `+t+` ORDER BY topic, "partition" LIMIT 1)
    UNION ALL
    SELECT n.topic, n."partition" FROM tp, LATERAL (
        SELECT topic, "partition" FROM `+t+`
        WHERE (topic, "partition") > (tp.topic, tp."partition")
        ORDER BY topic, "partition" LIMIT 1) n
)
INSERT INTO pruned_offsets AS w (topic, "partition", max_offset)
SELECT tp.topic, tp."partition", (SELECT max("offset") FROM `+t+` c WHERE c.topic = tp.topic AND c."partition" = tp."partition")
FROM tp ORDER BY 1, 2
ON CONFLICT (topic, "partition") DO UPDATE
SET max_offset = greatest(w.max_offset, excluded.max_offset), updated_at = now()`); err != nil {
			return fmt.Errorf("recording the pruned offsets: %w", err)
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO prune_watermarks AS w (table_name, pruned_before, rows_pruned) VALUES ($1, $2, $3)
ON CONFLICT (table_name) DO UPDATE
SET pruned_before = greatest(w.pruned_before, excluded.pruned_before),
    rows_pruned = w.rows_pruned + excluded.rows_pruned, updated_at = now()`, Claims.Name, d.ClosedAt, d.Claims); err != nil {
			return fmt.Errorf("moving the watermark: %w", err)
		}
		_, err = tx.Exec(ctx, `UPDATE claim_generations SET dropped_at = now() WHERE generation = $1`, d.Generation)
		return err
	})
	if err != nil {
		return fmt.Errorf("expiring claims generation %d (%s): %w", d.Generation, d.Table, err)
	}
	return nil
}

// dropTable detaches t concurrently (SHARE UPDATE EXCLUSIVE on the parent:
// claims go on) unless it is detached already, finishing a detach an
// interrupted pass left pending, then drops it.
func dropTable(ctx context.Context, conn *pgx.Conn, t string) error {
	var attached, pending bool
	err := conn.QueryRow(ctx, `
SELECT count(*) > 0, coalesce(bool_or(i.inhdetachpending), false)
FROM pg_inherits i WHERE i.inhrelid = to_regclass(quote_ident($1)) AND i.inhparent = 'effectively_claims'::regclass`, t).Scan(&attached, &pending)
	if err != nil {
		return fmt.Errorf("looking up claims table %s: %w", t, err)
	}
	q := pgx.Identifier{t}.Sanitize()
	switch {
	case pending:
		_, err = conn.Exec(ctx, `ALTER TABLE effectively_claims DETACH PARTITION `+q+` FINALIZE`)
	case attached:
		_, err = conn.Exec(ctx, `ALTER TABLE effectively_claims DETACH PARTITION `+q+` CONCURRENTLY`)
	}
	if err != nil {
		return fmt.Errorf("detaching claims table %s: %w", t, err)
	}
	if _, err := conn.Exec(ctx, `DROP TABLE IF EXISTS `+q); err != nil {
		return fmt.Errorf("dropping claims table %s: %w", t, err)
	}
	return nil
}
