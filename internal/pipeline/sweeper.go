package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/deadletter"
	"github.com/effectively-io/effectively/internal/dedupe"
)

// SweeperOptions bound parking.
type SweeperOptions struct {
	// MaxAge is how long an event may stay parked (parking.max_age).
	MaxAge time.Duration
	// MaxAttempts is how many times the sweeper looks for its prerequisite
	// (parking.max_attempts).
	MaxAttempts int
	// Interval between sweeps (default 1 s).
	Interval time.Duration
	// BatchSize is the most parked events one sweep looks at (default 500).
	BatchSize int
	// BackoffMax caps the wait between attempts for one event (default 5
	// min); the wait starts at 1 s and doubles.
	BackoffMax time.Duration
	// Logger receives what the sweeper does.
	Logger *zap.Logger
}

// Sweeper retries parked events whose prerequisite appeared by another path
// (written by a doorbell, a redrive or by hand), and dead-letters those past
// their bound with reason prerequisite_missing.
type Sweeper struct {
	pool    *pgxpool.Pool
	applier *Applier
	opts    SweeperOptions
	log     *zap.Logger
}

// NewSweeper returns a sweeper applying released events with applier.
func NewSweeper(pool *pgxpool.Pool, applier *Applier, opts SweeperOptions) *Sweeper {
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = 500
	}
	if opts.BackoffMax <= 0 {
		opts.BackoffMax = 5 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &Sweeper{pool: pool, applier: applier, opts: opts, log: opts.Logger}
}

// SweepResult counts what one sweep did.
type SweepResult struct {
	Released     int
	DeadLettered int
	Retried      int
	// Parked is the number still parked after the sweep.
	Parked int64
	// Oldest is the age of the oldest still parked (0 when none is).
	Oldest time.Duration
}

// Run sweeps every Interval until ctx is done. Failures are logged and the
// next sweep tries again.
func (s *Sweeper) Run(ctx context.Context) error {
	t := time.NewTicker(s.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		res, err := s.SweepOnce(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("sweeping parked events failed; trying again", zap.Error(err))
			}
			continue
		}
		s.applier.opts.Metrics.setParked(res.Parked, res.Oldest)
		if res.Released+res.DeadLettered > 0 {
			s.log.Info("swept parked events", zap.Int("released", res.Released), zap.Int("dead_lettered", res.DeadLettered), zap.Int64("parked", res.Parked))
		}
	}
}

const dueSQL = `
SELECT event_key, consumer_group, topic, "partition", "offset", resource, event, attempts, parked_at
FROM parked_events p
WHERE state = 'parked' AND next_attempt_at <= now()
ORDER BY next_attempt_at
LIMIT $1
FOR UPDATE SKIP LOCKED`

type dueRow struct {
	released
	resource  string
	attempts  int
	parkedAt  time.Time
	hasPrereq bool
}

// SweepOnce looks at the parked events that are due, in one transaction.
func (s *Sweeper) SweepOnce(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		res = SweepResult{}
		rows, err := tx.Query(ctx, dueSQL, s.opts.BatchSize)
		if err != nil {
			return fmt.Errorf("finding due parked events: %w", err)
		}
		var due []*dueRow
		var key string
		r := dueRow{}
		_, err = pgx.ForEachRow(rows, []any{&key, &r.origin.Group, &r.origin.Topic, &r.origin.Partition, &r.origin.Offset,
			&r.resource, &r.raw, &r.attempts, &r.parkedAt}, func() error {
			d := r
			ev, err := UnmarshalParked(d.raw)
			if err != nil {
				return err
			}
			d.ev = ev
			due = append(due, &d)
			return nil
		})
		if err != nil {
			return fmt.Errorf("finding due parked events: %w", err)
		}
		if err := s.checkPrerequisites(ctx, tx, due); err != nil {
			return err
		}

		// Resources whose prerequisite now exists: release all their parked
		// events, in order, as the prerequisite's arrival would have.
		var ready []string
		seen := map[string]bool{}
		for _, d := range due {
			if d.hasPrereq && !seen[d.resource] {
				seen[d.resource] = true
				ready = append(ready, d.resource)
			}
		}
		rels, err := s.applier.releaseParked(ctx, tx, ready, false)
		if err != nil {
			return err
		}
		rec := &pgx.Batch{}
		for _, rel := range rels {
			recordReleased(rec, rel)
			res.Released++
		}

		// The others: past a bound, dead-lettered; otherwise retried later.
		now := time.Now()
		var retryKeys []string
		var retryAt []time.Time
		var deadKeys []string
		for _, d := range due {
			if d.hasPrereq {
				continue
			}
			var why string
			switch {
			case s.opts.MaxAge > 0 && now.Sub(d.parkedAt) >= s.opts.MaxAge:
				why = fmt.Sprintf("parked for %s (parking.max_age %s)", now.Sub(d.parkedAt).Round(time.Second), s.opts.MaxAge)
			case s.opts.MaxAttempts > 0 && d.attempts+1 >= s.opts.MaxAttempts:
				why = fmt.Sprintf("looked for it %d times (parking.max_attempts %d)", d.attempts+1, s.opts.MaxAttempts)
			}
			if why == "" {
				retryKeys = append(retryKeys, d.ev.Key)
				retryAt = append(retryAt, now.Add(s.backoff(d.attempts+1)))
				continue
			}
			d.disposition = dedupe.DeadLettered
			d.reason = handlers.ReasonPrerequisiteMissing
			d.err = fmt.Errorf("%s %s: the prerequisite %s never arrived: %s", d.ev.Type, truncateKey(d.ev.Key), d.resource, why)
			recordReleased(rec, &d.released)
			deadKeys = append(deadKeys, d.ev.Key)
			res.DeadLettered++
		}
		if len(deadKeys) > 0 {
			rec.Queue(`UPDATE parked_events SET state = 'dead_lettered', resolved_at = now(), attempts = attempts + 1 WHERE event_key = ANY($1)`, deadKeys)
		}
		if len(retryKeys) > 0 {
			rec.Queue(`UPDATE parked_events p SET attempts = attempts + 1, next_attempt_at = r.at
FROM unnest($1::text[], $2::timestamptz[]) AS r(event_key, at) WHERE p.event_key = r.event_key`, retryKeys, retryAt)
			res.Retried = len(retryKeys)
		}
		rec.Queue(`SELECT count(*), coalesce(extract(epoch FROM now() - min(parked_at)), 0)::float8 FROM parked_events WHERE state = 'parked'`).QueryRow(func(row pgx.Row) error {
			var oldest float64
			err := row.Scan(&res.Parked, &oldest)
			res.Oldest = time.Duration(oldest * float64(time.Second))
			return err
		})
		if err := tx.SendBatch(ctx, rec).Close(); err != nil {
			return fmt.Errorf("recording the sweep: %w", err)
		}
		return nil
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		return res, err
	}
	return res, err
}

// checkPrerequisites sets hasPrereq of each due event: its prerequisite
// exists now (arrived by another path: a doorbell, a redrive, by hand), or
// its type no longer waits for one.
func (s *Sweeper) checkPrerequisites(ctx context.Context, tx pgx.Tx, due []*dueRow) error {
	reg := s.applier.reg
	byPrereq := map[*handlers.Prerequisite][]*dueRow{}
	for _, d := range due {
		p := reg.WaitsFor(d.ev)
		if p == nil {
			d.hasPrereq = true
			continue
		}
		byPrereq[p] = append(byPrereq[p], d)
	}
	for p, ds := range byPrereq {
		ids := make([]string, len(ds))
		for i, d := range ds {
			ids[i] = d.resource
		}
		rows, err := tx.Query(ctx, p.ExistsSQL, ids)
		if err != nil {
			return fmt.Errorf("checking whether %s exists (%s): %w", p.Name, p.ExistsSQL, err)
		}
		exists := map[string]bool{}
		var id string
		if _, err := pgx.ForEachRow(rows, []any{&id}, func() error {
			exists[id] = true
			return nil
		}); err != nil {
			return fmt.Errorf("checking whether %s exists (%s): %w", p.Name, p.ExistsSQL, err)
		}
		for _, d := range ds {
			d.hasPrereq = exists[d.resource]
		}
	}
	return nil
}

func (s *Sweeper) backoff(attempt int) time.Duration {
	d := time.Second << min(attempt, 20)
	return min(d, s.opts.BackoffMax)
}

// recordReleased queues the claim's final disposition and, for a dead
// letter, its row.
func recordReleased(rec *pgx.Batch, r *released) {
	dedupe.QueueDispositions(rec, []string{r.ev.Key}, []dedupe.Disposition{r.disposition})
	if r.disposition == dedupe.DeadLettered {
		deadletter.Queue(rec, r.letter())
	}
}

// ParkedEvent is a parked event as operators see it.
type ParkedEvent struct {
	EventKey      string    `json:"event_key"`
	Resource      string    `json:"resource"`
	Type          string    `json:"type"`
	Topic         string    `json:"topic"`
	Partition     int32     `json:"partition"`
	Offset        int64     `json:"offset"`
	Attempts      int       `json:"attempts"`
	ParkedAt      time.Time `json:"parked_at"`
	NextAttemptAt time.Time `json:"next_attempt_at"`
}

// ParkedFilter selects parked events; empty fields match everything.
type ParkedFilter struct {
	Resource string
	EventKey string
	Limit    int
}

const listParkedSQL = `
SELECT event_key, resource, event_type, topic, "partition", "offset", attempts, parked_at, next_attempt_at
FROM parked_events
WHERE ` + parkedWhere + `
ORDER BY resource, topic, "partition", "offset"
LIMIT $3`

// ListParked lists parked events in release order.
func ListParked(ctx context.Context, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, f ParkedFilter) ([]ParkedEvent, error) {
	if f.Limit <= 0 {
		f.Limit = 1000
	}
	rows, err := db.Query(ctx, listParkedSQL, f.Resource, f.EventKey, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("listing parked events: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ParkedEvent, error) {
		var p ParkedEvent
		err := row.Scan(&p.EventKey, &p.Resource, &p.Type, &p.Topic, &p.Partition, &p.Offset, &p.Attempts, &p.ParkedAt, &p.NextAttemptAt)
		return p, err
	})
}

// parkedWhere selects the parked events of a ParkedFilter ($1 resource, $2
// event key); ListParked, CountParkedMatching, RetryNow and DropParked share it, so
// a count an operator confirms is of the rows the action then changes.
const parkedWhere = `state = 'parked' AND ($1 = '' OR resource = $1) AND ($2 = '' OR event_key = $2)`

// CountParkedMatching counts the parked events f selects (its Limit
// aside): what RetryNow and DropParked with the same filter would change,
// for an operator to confirm first.
func CountParkedMatching(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, f ParkedFilter) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM parked_events WHERE `+parkedWhere, f.Resource, f.EventKey).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting parked events: %w", err)
	}
	return n, nil
}

// RetryNow makes the selected parked events due at once: the next sweep
// releases those whose prerequisite exists. It returns how many it touched.
func RetryNow(ctx context.Context, pool *pgxpool.Pool, f ParkedFilter) (int64, error) {
	ct, err := pool.Exec(ctx, `UPDATE parked_events SET next_attempt_at = now() WHERE `+parkedWhere, f.Resource, f.EventKey)
	if err != nil {
		return 0, fmt.Errorf("making parked events due: %w", err)
	}
	return ct.RowsAffected(), nil
}

// ReasonDropped: an operator gave up on a parked event.
const ReasonDropped event.Reason = "dropped"

// DropParked gives up on the selected parked events: each is dead-lettered
// with reason dropped (it keeps a disposition; nothing disappears).
func DropParked(ctx context.Context, pool *pgxpool.Pool, f ParkedFilter, why string) (int, error) {
	if f.Resource == "" && f.EventKey == "" {
		return 0, errors.New("drop needs a resource or an event key")
	}
	n := 0
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `UPDATE parked_events SET state = 'dropped', resolved_at = now()
WHERE `+parkedWhere+`
RETURNING consumer_group, topic, "partition", "offset", event`, f.Resource, f.EventKey)
		if err != nil {
			return fmt.Errorf("dropping parked events: %w", err)
		}
		var rels []*released
		var r released
		_, err = pgx.ForEachRow(rows, []any{&r.origin.Group, &r.origin.Topic, &r.origin.Partition, &r.origin.Offset, &r.raw}, func() error {
			rel := r
			ev, err := UnmarshalParked(rel.raw)
			if err != nil {
				return err
			}
			rel.ev = ev
			rel.disposition = dedupe.DeadLettered
			rel.reason = ReasonDropped
			rel.err = fmt.Errorf("dropped by an operator while parked: %s", why)
			rels = append(rels, &rel)
			return nil
		})
		if err != nil {
			return fmt.Errorf("dropping parked events: %w", err)
		}
		rec := &pgx.Batch{}
		for _, rel := range rels {
			recordReleased(rec, rel)
		}
		n = len(rels)
		if n == 0 {
			return nil
		}
		return tx.SendBatch(ctx, rec).Close()
	})
	return n, err
}

// ParkedCounts is how many parked events are in each state (parked,
// released, dead_lettered, dropped), and the age of the oldest still parked.
type ParkedCounts struct {
	ByState map[string]int64 `json:"by_state"`
	// OldestParkedSeconds is 0 when nothing is parked.
	OldestParkedSeconds float64 `json:"oldest_parked_seconds"`
}

// CountParked counts the parked events by state, for `effectively status`.
func CountParked(ctx context.Context, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}) (ParkedCounts, error) {
	rows, err := db.Query(ctx, `SELECT state, count(*), coalesce(extract(epoch FROM now() - min(parked_at)), 0)::float8
FROM parked_events GROUP BY state`)
	if err != nil {
		return ParkedCounts{}, fmt.Errorf("counting parked events: %w", err)
	}
	out := ParkedCounts{ByState: map[string]int64{}}
	var state string
	var n int64
	var oldest float64
	_, err = pgx.ForEachRow(rows, []any{&state, &n, &oldest}, func() error {
		out.ByState[state] = n
		if state == "parked" {
			out.OldestParkedSeconds = oldest
		}
		return nil
	})
	if err != nil {
		return ParkedCounts{}, fmt.Errorf("counting parked events: %w", err)
	}
	return out, nil
}
