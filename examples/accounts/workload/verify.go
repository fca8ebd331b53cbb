package workload

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Querier runs queries: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Report compares a database with the Expected end state. It reads only the
// effect tables and the claims; it shares no code with the worker, so a bug
// there cannot hide itself here.
type Report struct {
	// Claims by disposition, as stored.
	Claims map[string]int64
	// DeadLetters is the number of dead-letter rows.
	DeadLetters int64
	// Accounts is the number of account rows.
	Accounts int
	// LedgerEntries is the number of ledger rows.
	LedgerEntries int64
	// LedgerTotal is currency → the sum of all balances.
	LedgerTotal map[string]int64
	// Problems lists every difference from Expected; empty means the
	// database holds exactly the expected effects.
	Problems []string
}

// OK reports whether the database matched.
func (r Report) OK() bool { return len(r.Problems) == 0 }

func (r *Report) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// maxListed bounds the per-row problems listed.
const maxListed = 10

// Verify compares the database's effect tables with exp: one claim per
// distinct event, every account at its latest version (no regression),
// exactly one ledger entry per distinct ledger event, every balance, and the
// stale count. wantDeadLetters is the number of dead letters the run should
// have made (0 for a generated workload without poison).
func Verify(ctx context.Context, q Querier, exp Expected, wantDeadLetters int64) (Report, error) {
	r := Report{Claims: map[string]int64{}, LedgerTotal: map[string]int64{}}

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
	if claims != int64(exp.Distinct) {
		r.problem("claims: %d, want one per distinct event: %d", claims, exp.Distinct)
	}
	if got := r.Claims["stale"]; got != int64(exp.StaleExpected) {
		r.problem("stale claims: %d, want %d", got, exp.StaleExpected)
	}
	if err := q.QueryRow(ctx, `SELECT count(*) FROM dead_letters`).Scan(&r.DeadLetters); err != nil {
		return r, fmt.Errorf("counting dead letters: %w", err)
	}
	if r.DeadLetters != wantDeadLetters {
		r.problem("dead letters: %d, want %d", r.DeadLetters, wantDeadLetters)
	}

	return r, r.verifyEffects(ctx, q, exp)
}

// VerifyEffects compares only the effect tables with exp: every account at
// its latest version and state, exactly one ledger entry per distinct ledger
// event, every balance. It is Verify without the claim and dead-letter
// counts, for streams that carry more than a generated workload (poison,
// doorbells) whose claims the caller accounts for itself.
func VerifyEffects(ctx context.Context, q Querier, exp Expected) (Report, error) {
	r := Report{Claims: map[string]int64{}, LedgerTotal: map[string]int64{}}
	return r, r.verifyEffects(ctx, q, exp)
}

func (r *Report) verifyEffects(ctx context.Context, q Querier, exp Expected) error {
	if err := r.verifyAccounts(ctx, q, exp); err != nil {
		return err
	}
	return r.verifyLedger(ctx, q, exp)
}

func (r *Report) verifyAccounts(ctx context.Context, q Querier, exp Expected) error {
	rows, err := q.Query(ctx, `SELECT id, version, name, email, plan, status FROM accounts`)
	if err != nil {
		return fmt.Errorf("reading accounts: %w", err)
	}
	got := make(map[string]AccountState, len(exp.Accounts))
	var id string
	var s AccountState
	_, err = pgx.ForEachRow(rows, []any{&id, &s.Version, &s.Name, &s.Email, &s.Plan, &s.Status}, func() error {
		got[id] = s
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading accounts: %w", err)
	}
	r.Accounts = len(got)
	var bad []string
	regressions := 0
	for id, want := range exp.Accounts {
		g, ok := got[id]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("account %s missing (want version %d)", id, want.Version))
		case g.Version < want.Version:
			regressions++
			bad = append(bad, fmt.Sprintf("account %s at version %d, want %d (a lost update)", id, g.Version, want.Version))
		case g != want:
			bad = append(bad, fmt.Sprintf("account %s is %+v, want %+v", id, g, want))
		}
	}
	for id := range got {
		if _, ok := exp.Accounts[id]; !ok {
			bad = append(bad, fmt.Sprintf("account %s exists but no event created it", id))
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		r.problem("accounts: %d differ from their latest version (%d behind it): %s", len(bad), regressions, strings.Join(bad[:min(len(bad), maxListed)], "; "))
	}
	return nil
}

func (r *Report) verifyLedger(ctx context.Context, q Querier, exp Expected) error {
	if err := q.QueryRow(ctx, `SELECT count(*) FROM ledger_entries`).Scan(&r.LedgerEntries); err != nil {
		return fmt.Errorf("counting ledger entries: %w", err)
	}
	want := int64(exp.ByType[TypeLedgerCredited] + exp.ByType[TypeLedgerDebited])
	if r.LedgerEntries != want {
		r.problem("ledger entries: %d, want one per distinct ledger event: %d", r.LedgerEntries, want)
	}
	rows, err := q.Query(ctx, `SELECT account_id, currency, balance_cents::bigint FROM account_balances`)
	if err != nil {
		return fmt.Errorf("reading balances: %w", err)
	}
	got := map[string]map[string]int64{}
	var acct, cur string
	var bal int64
	_, err = pgx.ForEachRow(rows, []any{&acct, &cur, &bal}, func() error {
		if got[acct] == nil {
			got[acct] = map[string]int64{}
		}
		got[acct][cur] = bal
		r.LedgerTotal[cur] += bal
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading balances: %w", err)
	}
	var bad []string
	for acct, curs := range exp.Balances {
		for cur, want := range curs {
			if g := got[acct][cur]; g != want {
				bad = append(bad, fmt.Sprintf("%s %s: %d, want %d", acct, cur, g, want))
			}
		}
	}
	for acct, curs := range got {
		for cur, g := range curs {
			if _, ok := exp.Balances[acct][cur]; !ok && g != 0 {
				bad = append(bad, fmt.Sprintf("%s %s: %d, want none", acct, cur, g))
			}
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		r.problem("balances: %d differ: %s", len(bad), strings.Join(bad[:min(len(bad), maxListed)], "; "))
	}
	return nil
}

// Digest is a fingerprint of the effect tables: equal digests mean equal
// effects, so a replay or a re-produce that changed nothing shows it.
type Digest struct {
	Accounts      string
	LedgerEntries string
	Balances      string
	Claims        int64
}

// StateDigest fingerprints the effect tables (ignoring timestamps, which a
// no-op does not touch anyway).
func StateDigest(ctx context.Context, q Querier) (Digest, error) {
	var d Digest
	err := q.QueryRow(ctx, `
SELECT
  (SELECT coalesce(md5(string_agg(concat_ws('|', id, version, name, email, plan, status), ',' ORDER BY id)), '') FROM accounts),
  (SELECT coalesce(md5(string_agg(concat_ws('|', event_key, account_id, currency, amount_cents), ',' ORDER BY event_key)), '') FROM ledger_entries),
  (SELECT coalesce(md5(string_agg(concat_ws('|', account_id, currency, balance_cents), ',' ORDER BY account_id, currency)), '') FROM account_balances),
  (SELECT count(*) FROM effectively_claims)`).Scan(&d.Accounts, &d.LedgerEntries, &d.Balances, &d.Claims)
	if err != nil {
		return d, fmt.Errorf("fingerprinting the effect tables: %w", err)
	}
	return d, nil
}
