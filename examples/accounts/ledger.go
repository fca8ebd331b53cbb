package accounts

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/text/currency"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
)

// LedgerEntry is a validated ledger event's data.
type LedgerEntry struct {
	AmountCents int64
	Currency    string
}

// ParseLedger validates a ledger event's data: amount_cents an integer > 0
// that fits int64, currency an ISO 4217 code.
func ParseLedger(ev event.Event) (LedgerEntry, error) {
	doc, err := ev.Document() // the decoder passed only valid JSON without repeated names
	if err != nil || doc.Root().Kind() != event.KindObject {
		return LedgerEntry{}, invalidPayload("%s data must be an object with amount_cents and currency", ev.Type)
	}
	av, ok := doc.Get("amount_cents")
	if !ok {
		return LedgerEntry{}, invalidPayload("%s data lacks amount_cents", ev.Type)
	}
	amount := string(av.Raw())
	if av.Kind() != event.KindNumber || strings.ContainsAny(amount, ".eE") {
		return LedgerEntry{}, invalidAmount("%s data.amount_cents must be an integer, got %s", ev.Type, event.Excerpt(amount))
	}
	n, err := strconv.ParseInt(amount, 10, 64)
	if err != nil {
		return LedgerEntry{}, invalidAmount("%s data.amount_cents %s does not fit in 64 bits", ev.Type, event.Excerpt(amount))
	}
	if n <= 0 {
		return LedgerEntry{}, invalidAmount("%s data.amount_cents must be > 0, got %d", ev.Type, n)
	}
	cv, _ := doc.Get("currency")
	if cv.Kind() != event.KindString {
		return LedgerEntry{}, invalidPayload("%s data.currency must be an ISO 4217 code string", ev.Type)
	}
	code := cv.Text()
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

// LedgerEntries is the ledger pattern: one row per event key, so nothing is
// ever written twice (a replay after the claim expired inserts nothing).
// The account exists: the engine parks ledger events until it does, and
// writes accounts before ledger entries (the foreign key orders them).
// Each entry inserted adds its amount to its account's balance in the same
// statement (a running total); an entry that exists adds nothing.
var LedgerEntries = &handlers.Table{
	Name:    "ledger_entries",
	Key:     []string{"event_key"},
	Columns: []string{"account_id", "currency", "amount_cents", "event_type"},
	Totals:  []*handlers.Total{Balances},
}

// Balances is account_balances: per account and currency, the sum of the
// ledger's entries.
var Balances = &handlers.Total{
	Name:   "account_balances",
	Key:    []string{"account_id", "currency"},
	Column: "balance_cents",
	Delta:  "amount_cents",
	Touch:  []string{"updated_at"},
}

// validateLedger is the ledger handlers' Validate: an entry with a
// negative amount or a malformed currency is dead-lettered at once, even
// while its account does not exist yet, instead of being parked for
// parking.max_age.
func validateLedger(ev event.Event) error {
	_, err := ParseLedger(ev)
	return err
}

func handleLedger(_ context.Context, e *handlers.Effects, ev event.Event) error {
	entry, err := ParseLedger(ev)
	if err != nil {
		return err
	}
	return e.InsertOnce(LedgerEntries, ev.Key, ev.Subject, entry.Currency, entry.AmountCents, ev.Type)
}
