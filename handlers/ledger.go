package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"golang.org/x/text/currency"

	"github.com/effectively-io/effectively/dedupe"
	"github.com/effectively-io/effectively/event"
)

// LedgerEntry is a validated ledger event's data.
type LedgerEntry struct {
	AmountCents int64
	Currency    string
}

// ParseLedger validates a ledger event's data: amount_cents an integer > 0
// that fits int64, currency an ISO 4217 code.
func ParseLedger(ev event.Event) (LedgerEntry, error) {
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
		return LedgerEntry{}, invalidAmount("%s data.amount_cents must be an integer, got %s", ev.Type, event.Excerpt(string(raw.AmountCents)))
	}
	var amount json.Number
	dec := json.NewDecoder(bytes.NewReader(raw.AmountCents))
	dec.UseNumber()
	if err := dec.Decode(&amount); err != nil {
		return LedgerEntry{}, invalidAmount("%s data.amount_cents must be an integer, got %s", ev.Type, event.Excerpt(string(raw.AmountCents)))
	}
	n, err := amount.Int64()
	if err != nil {
		if strings.ContainsAny(amount.String(), ".eE") {
			return LedgerEntry{}, invalidAmount("%s data.amount_cents must be an integer, got %s", ev.Type, event.Excerpt(amount.String()))
		}
		return LedgerEntry{}, invalidAmount("%s data.amount_cents %s does not fit in 64 bits", ev.Type, event.Excerpt(amount.String()))
	}
	if n <= 0 {
		return LedgerEntry{}, invalidAmount("%s data.amount_cents must be > 0, got %d", ev.Type, n)
	}
	var code string
	if raw.Currency == nil || json.Unmarshal(raw.Currency, &code) != nil {
		return LedgerEntry{}, invalidPayload("%s data.currency must be an ISO 4217 code string", ev.Type)
	}
	if len(code) != 3 || code[0] < 'A' || code[0] > 'Z' || code[1] < 'A' || code[1] > 'Z' || code[2] < 'A' || code[2] > 'Z' {
		return LedgerEntry{}, event.PermanentWithReason(ReasonInvalidCurrency, fmt.Errorf("%s data.currency %s is not an ISO 4217 code", ev.Type, event.Excerpt(code)))
	}
	if _, err := currency.ParseISO(code); err != nil {
		return LedgerEntry{}, event.PermanentWithReason(ReasonInvalidCurrency, fmt.Errorf("%s data.currency %s is not an ISO 4217 code", ev.Type, code))
	}
	if ev.Type == TypeLedgerDebited {
		n = -n
	}
	return LedgerEntry{AmountCents: n, Currency: code}, nil
}

// ReasonInvalidCurrency: a ledger event's currency is not an ISO 4217 code.
const ReasonInvalidCurrency event.Reason = "invalid_currency"

// ReasonInvalidAmount: a ledger event's amount_cents is not an integer > 0
// that fits in 64 bits.
const ReasonInvalidAmount event.Reason = "invalid_amount"

func invalidAmount(format string, args ...any) error {
	return event.PermanentWithReason(ReasonInvalidAmount, fmt.Errorf(format, args...))
}

// ledgerSQL applies a ledger entry, or parks it, in one statement, so the
// next event of the same resource in the same pipelined batch already sees
// it parked and queues behind it:
//   - the entry exists already (a replay after its claim expired): nothing;
//   - the account exists and nothing of it is parked: insert the entry;
//   - otherwise, below the per-resource bound: park it;
//   - otherwise: neither (the caller dead-letters it).
//
// The entry's key is the event key, so nothing is ever written twice.
const ledgerSQL = `
WITH acct AS (SELECT 1 FROM accounts WHERE id = $2),
done AS (SELECT 1 FROM ledger_entries WHERE event_key = $1),
blocked AS (SELECT count(*) AS n FROM parked_events WHERE resource = $2 AND state = 'parked'),
ins AS (
    INSERT INTO ledger_entries (event_key, account_id, currency, amount_cents, event_type)
    SELECT $1, $2, $3, $4, $5 FROM blocked
    WHERE blocked.n = 0 AND EXISTS (SELECT 1 FROM acct) AND NOT EXISTS (SELECT 1 FROM done)
    RETURNING 1
),
park AS (
    INSERT INTO parked_events (event_key, consumer_group, topic, "partition", "offset", resource, event_type, event)
    SELECT $1, $6, $7, $8, $9, $2, $5, $10 FROM blocked
    WHERE NOT EXISTS (SELECT 1 FROM done) AND (blocked.n > 0 OR NOT EXISTS (SELECT 1 FROM acct)) AND blocked.n < $11
    ON CONFLICT (event_key) DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM done), EXISTS (SELECT 1 FROM ins), EXISTS (SELECT 1 FROM park), (SELECT n FROM blocked)`

func handleLedger(_ context.Context, e *Effects, ev event.Event) error {
	entry, err := ParseLedger(ev)
	if err != nil {
		return err
	}
	parked, err := MarshalParked(ev)
	if err != nil {
		return err
	}
	o, limit := e.Origin(), e.Limits().MaxPerResource
	e.QueryRow(func(row pgx.Row) (dedupe.Disposition, error) {
		var done, inserted, wasParked bool
		var blocked int64
		if err := row.Scan(&done, &inserted, &wasParked, &blocked); err != nil {
			return "", err
		}
		switch {
		case done, inserted:
			return dedupe.Applied, nil
		case wasParked:
			return dedupe.Parked, nil
		default:
			return dedupe.DeadLettered, event.PermanentWithReason(ReasonPrerequisiteMissing,
				fmt.Errorf("account %s does not exist and already has %d parked events (parking.max_per_resource %d)", event.Excerpt(ev.Subject), blocked, limit))
		}
	}, ledgerSQL, ev.Key, ev.Subject, entry.Currency, entry.AmountCents, ev.Type,
		o.Group, o.Topic, o.Partition, o.Offset, parked, limit)
	return nil
}
