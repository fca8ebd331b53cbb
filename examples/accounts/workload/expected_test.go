package workload

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestExpectedFileRoundTrip(t *testing.T) {
	t.Parallel()
	s := setup(t)
	path := filepath.Join(t.TempDir(), "expected.json")
	require.NoError(t, s.exp.WriteFile(path))
	got, err := ReadExpected(path)
	require.NoError(t, err)
	require.Equal(t, s.exp, got)

	_, err = ReadExpected(filepath.Join(t.TempDir(), "missing.json"))
	require.Error(t, err)
}

func TestExpectedJSONNames(t *testing.T) {
	t.Parallel()
	e := Expected{
		Records: 3, Distinct: 2, Duplicates: 1, OutOfOrder: 1, StaleExpected: 1,
		ByType:      map[string]int{TypeAccountOpened: 1, TypeLedgerCredited: 1},
		Accounts:    map[string]AccountState{"acct-000001": {Version: 1, Name: "Ada", Email: "ada@example.com", Plan: "pro", Status: StatusOpen}},
		Balances:    map[string]map[string]int64{"acct-000001": {"EUR": 100}},
		LedgerTotal: map[string]int64{"EUR": 100},
	}
	b, err := json.Marshal(e)
	require.NoError(t, err)
	require.JSONEq(t, `{
		"records": 3, "distinct": 2, "duplicates": 1, "out_of_order": 1, "stale_expected": 1,
		"by_type": {"account.opened": 1, "ledger.credited": 1},
		"accounts": {"acct-000001": {"version": 1, "name": "Ada", "email": "ada@example.com", "plan": "pro", "status": "open"}},
		"balances": {"acct-000001": {"EUR": 100}},
		"ledger_total": {"EUR": 100}
	}`, string(b))
	var back Expected
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, e, back)
}

func TestExpectedSummary(t *testing.T) {
	t.Parallel()
	e := Expected{
		Records: 3, Distinct: 2, Duplicates: 1,
		ByType:      map[string]int{TypeLedgerCredited: 1, TypeAccountOpened: 1},
		Accounts:    map[string]AccountState{"acct-000001": {Status: StatusClosed}},
		LedgerTotal: map[string]int64{"USD": -5, "EUR": 100},
	}
	require.Equal(t,
		"records=3 distinct=2 duplicates=1 out_of_order=0 stale=0 accounts=1 closed=1 account.opened=1 ledger.credited=1 total_EUR=100 total_USD=-5",
		e.Summary())
}
