package workload

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
)

// Account statuses.
const (
	StatusOpen   = "open"
	StatusClosed = "closed"
)

// AccountState is an account's expected row: the state carried by its
// highest-version event.
type AccountState struct {
	Version int64  `json:"version"`
	Name    string `json:"name"`
	Email   string `json:"email"`
	Plan    string `json:"plan"`
	// Status is StatusClosed when the highest version is an account.closed,
	// StatusOpen otherwise.
	Status string `json:"status"`
}

// Expected is the end state a correct worker reaches from a generated
// stream, computed from the logical events the generator emitted. It is
// plain data and round-trips through encoding/json (the maps are never nil
// when it comes from a Generator).
type Expected struct {
	// Records is the number of records emitted, re-sends included.
	Records int `json:"records"`
	// Distinct is the number of distinct logical events: distinct
	// CloudEvents (source, id), so distinct dedupe keys.
	Distinct int `json:"distinct"`
	// Duplicates is the number of records that are re-sends; Records =
	// Distinct + Duplicates.
	Duplicates int `json:"duplicates"`
	// OutOfOrder is the number of events that arrived after a later event
	// of their account (swapped).
	OutOfOrder int `json:"out_of_order"`
	// ByType counts the distinct events by type.
	ByType map[string]int `json:"by_type"`
	// Accounts is the final state of every account with an emitted event.
	Accounts map[string]AccountState `json:"accounts"`
	// Balances is account → currency → balance in cents (credits positive,
	// debits negative), for every account and currency with a ledger event.
	Balances map[string]map[string]int64 `json:"balances"`
	// StaleExpected is the number of distinct account events that arrive
	// after a higher version of their account: a worker counts them stale
	// and leaves the state alone.
	StaleExpected int `json:"stale_expected"`
	// LedgerTotal is currency → the sum of Balances over all accounts.
	LedgerTotal map[string]int64 `json:"ledger_total"`
}

// Summary describes e in one line: counts, accounts, ledger totals.
func (e Expected) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "records=%d distinct=%d duplicates=%d out_of_order=%d stale=%d accounts=%d",
		e.Records, e.Distinct, e.Duplicates, e.OutOfOrder, e.StaleExpected, len(e.Accounts))
	closed := 0
	for _, a := range e.Accounts {
		if a.Status == StatusClosed {
			closed++
		}
	}
	fmt.Fprintf(&b, " closed=%d", closed)
	for _, typ := range slices.Sorted(maps.Keys(e.ByType)) {
		fmt.Fprintf(&b, " %s=%d", typ, e.ByType[typ])
	}
	for _, cur := range slices.Sorted(maps.Keys(e.LedgerTotal)) {
		fmt.Fprintf(&b, " total_%s=%d", cur, e.LedgerTotal[cur])
	}
	return b.String()
}

// WriteFile writes e as JSON to path.
func (e Expected) WriteFile(path string) error {
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encoding the expected state: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the expected state: %w", err)
	}
	return nil
}

// ReadExpected reads an Expected that WriteFile wrote.
func ReadExpected(path string) (Expected, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Expected{}, fmt.Errorf("reading the expected state: %w", err)
	}
	var e Expected
	if err := json.Unmarshal(b, &e); err != nil {
		return Expected{}, fmt.Errorf("decoding the expected state in %s: %w", path, err)
	}
	return e, nil
}
