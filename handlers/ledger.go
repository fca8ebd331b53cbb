package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"golang.org/x/text/currency"

	"github.com/effectively-io/effectively/dedupe"
)

// LedgerEntry is a validated ledger event's data.
type LedgerEntry struct {
	AmountCents int64
	Currency    string
}

// ParseLedger validates a ledger event's data: amount_cents an integer > 0
// that fits int64, currency an ISO 4217 code.
func ParseLedger(ev Event) (LedgerEntry, error) {
	var raw struct {
		AmountCents json.RawMessage `json:"amount_cents"`
		Currency    json.RawMessage `json:"currency"`
	}
	if err := json.Unmarshal(ev.Data, &raw); err != nil || bytes.Equal(bytes.TrimSpace(ev.Data), []byte("null")) {
		return LedgerEntry{}, invalidPayload("%s data must be an object with amount_cents and currency", ev.Type)
	}
	if raw.AmountCents == nil {
		return LedgerEntry{}, invalidPayload("%s data lacks amount_cents", ev.Type)
	}
	if c := raw.AmountCents[0]; c != '-' && (c < '0' || c > '9') {
		return LedgerEntry{}, invalidPayload("%s data.amount_cents must be an integer, got %s", ev.Type, excerpt(string(raw.AmountCents)))
	}
	var amount json.Number
	dec := json.NewDecoder(bytes.NewReader(raw.AmountCents))
	dec.UseNumber()
	if err := dec.Decode(&amount); err != nil {
		return LedgerEntry{}, invalidPayload("%s data.amount_cents must be an integer, got %s", ev.Type, excerpt(string(raw.AmountCents)))
	}
	n, err := amount.Int64()
	if err != nil {
		if !isIntegerLiteral(amount.String()) {
			return LedgerEntry{}, invalidPayload("%s data.amount_cents must be an integer, got %s", ev.Type, excerpt(amount.String()))
		}
		return LedgerEntry{}, invalidPayload("%s data.amount_cents %s does not fit in 64 bits", ev.Type, excerpt(amount.String()))
	}
	if n <= 0 {
		return LedgerEntry{}, invalidPayload("%s data.amount_cents must be > 0, got %d", ev.Type, n)
	}
	var code string
	if raw.Currency == nil || json.Unmarshal(raw.Currency, &code) != nil {
		return LedgerEntry{}, invalidPayload("%s data.currency must be an ISO 4217 code string", ev.Type)
	}
	if len(code) != 3 || code[0] < 'A' || code[0] > 'Z' || code[1] < 'A' || code[1] > 'Z' || code[2] < 'A' || code[2] > 'Z' {
		return LedgerEntry{}, PermanentWithReason(ReasonInvalidCurrency, fmt.Errorf("%s data.currency %s is not an ISO 4217 code", ev.Type, excerpt(code)))
	}
	if _, err := currency.ParseISO(code); err != nil {
		return LedgerEntry{}, PermanentWithReason(ReasonInvalidCurrency, fmt.Errorf("%s data.currency %s is not an ISO 4217 code", ev.Type, code))
	}
	if ev.Type == TypeLedgerDebited {
		n = -n
	}
	return LedgerEntry{AmountCents: n, Currency: code}, nil
}

// ReasonInvalidCurrency: a ledger event's currency is not an ISO 4217 code.
const ReasonInvalidCurrency Reason = "invalid_currency"

// insertLedgerSQL writes the entry only if the account exists, and says
// which of the two was the case; the entry's key is the event key, so a
// replay after the claim expired writes nothing twice.
const insertLedgerSQL = `
WITH acct AS (SELECT id FROM accounts WHERE id = $2),
ins AS (
    INSERT INTO ledger_entries (event_key, account_id, currency, amount_cents, event_type)
    SELECT $1, acct.id, $3, $4, $5 FROM acct
    ON CONFLICT (event_key) DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM acct), EXISTS (SELECT 1 FROM ins)`

func handleLedger(_ context.Context, e *Effects, ev Event) error {
	entry, err := ParseLedger(ev)
	if err != nil {
		return err
	}
	e.QueryRow(func(row pgx.Row) (dedupe.Disposition, error) {
		var exists, inserted bool
		if err := row.Scan(&exists, &inserted); err != nil {
			return "", err
		}
		if !exists {
			return dedupe.DeadLettered, PermanentWithReason(ReasonPrerequisiteMissing,
				fmt.Errorf("account %s does not exist", excerpt(ev.Subject)))
		}
		return dedupe.Applied, nil
	}, insertLedgerSQL, ev.Key, ev.Subject, entry.Currency, entry.AmountCents, ev.Type)
	return nil
}
