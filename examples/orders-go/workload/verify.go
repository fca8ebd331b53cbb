package workload

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
)

// OpReserve is the outbox operation of the warehouse reservation an
// order.placed makes.
const OpReserve = "warehouse.reserve"

// Querier runs queries: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Options says what else the run did besides the workload.
type Options struct {
	// DeadLetters is the number of dead letters the run should have made
	// (poison records sent with the workload).
	DeadLetters int64
	// DeadLetteredClaims is how many of those have a claim (decodable
	// events a handler refused; not undecodable records or conflicts).
	DeadLetteredClaims int64
	// Intents: the warehouse target was configured, so every distinct
	// order.placed recorded exactly one reservation intent.
	Intents bool
}

// Report compares a database with an Expected end state. It reads the
// effect tables, the claims and the outbox, and shares no code with the
// worker.
type Report struct {
	// Claims by disposition, as stored.
	Claims map[string]int64
	// DeadLetters is the number of dead-letter rows.
	DeadLetters int64
	// Orders and Lines are the numbers of rows.
	Orders, Lines int64
	// Intents is the number of reservation intents in the outbox, and
	// IntentEvents the number of distinct events they belong to.
	Intents, IntentEvents int64
	// Problems lists every difference; empty means the database holds
	// exactly the expected effects.
	Problems []string
}

// OK reports whether the database matched.
func (r Report) OK() bool { return len(r.Problems) == 0 }

// maxListed bounds the per-row problems listed.
const maxListed = 10

func (r *Report) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// Verify compares the database with exp: claims (applied, stale, parked,
// dead-lettered: exactly one per distinct event), every order at its
// latest version, exactly one line per distinct line event and none for an
// orphan, and (with opts.Intents) one reservation per distinct
// order.placed.
func Verify(ctx context.Context, q Querier, exp Expected, opts Options) (Report, error) {
	r := Report{Claims: map[string]int64{}}
	rows, err := q.Query(ctx, `SELECT disposition, count(*) FROM effectively_claims GROUP BY 1`)
	if err != nil {
		return r, fmt.Errorf("counting claims: %w", err)
	}
	var d string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&d, &n}, func() error { r.Claims[d] = n; return nil }); err != nil {
		return r, fmt.Errorf("counting claims: %w", err)
	}
	var claims int64
	for _, n := range r.Claims {
		claims += n
	}
	if want := int64(exp.Distinct) + opts.DeadLetteredClaims; claims != want {
		r.problem("claims: %d, want one per distinct event: %d (%d generated, %d poison)", claims, want, exp.Distinct, opts.DeadLetteredClaims)
	}
	for _, c := range []struct {
		disposition string
		want        int64
	}{
		{"applied", int64(exp.Applied())},
		{"stale", int64(exp.Stale)},
		{"parked", int64(len(exp.Parked))},
		{"dead_lettered", opts.DeadLetteredClaims},
	} {
		if got := r.Claims[c.disposition]; got != c.want {
			r.problem("%s claims: %d, want %d", c.disposition, got, c.want)
		}
	}
	if err := q.QueryRow(ctx, `SELECT count(*) FROM dead_letters`).Scan(&r.DeadLetters); err != nil {
		return r, fmt.Errorf("counting dead letters: %w", err)
	}
	if r.DeadLetters != opts.DeadLetters {
		r.problem("dead letters: %d, want %d", r.DeadLetters, opts.DeadLetters)
	}
	if err := r.orders(ctx, q, exp); err != nil {
		return r, err
	}
	if err := r.lines(ctx, q, exp); err != nil {
		return r, err
	}
	if err := q.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_key) FROM outbox WHERE operation = $1`, OpReserve).
		Scan(&r.Intents, &r.IntentEvents); err != nil {
		return r, fmt.Errorf("counting reservation intents: %w", err)
	}
	if opts.Intents && (r.Intents != int64(exp.Placed) || r.IntentEvents != int64(exp.Placed)) {
		r.problem("reservation intents: %d for %d events, want one per distinct order.placed: %d", r.Intents, r.IntentEvents, exp.Placed)
	}
	return r, nil
}

func (r *Report) orders(ctx context.Context, q Querier, exp Expected) error {
	rows, err := q.Query(ctx, `SELECT id, version, customer, total_cents, status FROM orders`)
	if err != nil {
		return fmt.Errorf("reading orders: %w", err)
	}
	var id string
	var o Order
	seen := map[string]bool{}
	var bad []string
	_, err = pgx.ForEachRow(rows, []any{&id, &o.Version, &o.Customer, &o.TotalCents, &o.Status}, func() error {
		r.Orders++
		seen[id] = true
		want, ok := exp.Orders[id]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("order %s: not in the workload", id))
		case o != want:
			bad = append(bad, fmt.Sprintf("order %s: %+v, want %+v", id, o, want))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading orders: %w", err)
	}
	for id := range exp.Orders {
		if !seen[id] {
			bad = append(bad, fmt.Sprintf("order %s: missing", id))
		}
	}
	r.listed(bad)
	return nil
}

func (r *Report) lines(ctx context.Context, q Querier, exp Expected) error {
	rows, err := q.Query(ctx, `SELECT line_id, order_id, sku, quantity, unit_price_cents FROM order_lines`)
	if err != nil {
		return fmt.Errorf("reading order lines: %w", err)
	}
	var id string
	var l Line
	seen := map[string]int{}
	var bad []string
	_, err = pgx.ForEachRow(rows, []any{&id, &l.OrderID, &l.SKU, &l.Quantity, &l.UnitPriceCents}, func() error {
		r.Lines++
		seen[id]++
		want, ok := exp.Lines[id]
		switch {
		case seen[id] == 2:
			bad = append(bad, fmt.Sprintf("line %s: written more than once", id))
		case !ok:
			bad = append(bad, fmt.Sprintf("line %s: not expected (an orphan's line must stay parked)", id))
		case l != want:
			bad = append(bad, fmt.Sprintf("line %s: %+v, want %+v", id, l, want))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading order lines: %w", err)
	}
	for id := range exp.Lines {
		if seen[id] == 0 {
			bad = append(bad, fmt.Sprintf("line %s: missing", id))
		}
	}
	r.listed(bad)
	return nil
}

// listed adds the first maxListed of bad, sorted, and a count of the rest.
func (r *Report) listed(bad []string) {
	sort.Strings(bad)
	for i, b := range bad {
		if i == maxListed {
			r.problem("... and %d more", len(bad)-maxListed)
			break
		}
		r.problem("%s", b)
	}
}
