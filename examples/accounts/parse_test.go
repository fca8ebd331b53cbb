package accounts_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/examples/accounts"
)

// The parsers' fast paths (strings without escapes, plain integer
// literals, a plain currency code) accept and refuse exactly what the
// general decoding does.
func TestParseLedgerAndAccount(t *testing.T) {
	ledger := func(data string) (accounts.LedgerEntry, error) {
		return accounts.ParseLedger(event.Event{Type: accounts.TypeLedgerDebited, Data: []byte(data)})
	}
	for data, want := range map[string]int64{
		`{"amount_cents": 250, "currency": "EUR"}`:                 -250,
		`{"currency": "U\u0053D", "amount_cents": 1}`:              -1,
		`{"amount_cents": 9223372036854775807, "currency": "JPY"}`: -9223372036854775807,
	} {
		e, err := ledger(data)
		require.NoError(t, err, data)
		require.Equal(t, want, e.AmountCents, data)
	}
	for data, reason := range map[string]event.Reason{
		`{"amount_cents": 1.0, "currency": "EUR"}`:                 accounts.ReasonInvalidAmount,
		`{"amount_cents": 1e3, "currency": "EUR"}`:                 accounts.ReasonInvalidAmount,
		`{"amount_cents": 9223372036854775808, "currency": "EUR"}`: accounts.ReasonInvalidAmount,
		`{"amount_cents": "12", "currency": "EUR"}`:                accounts.ReasonInvalidAmount,
		`{"amount_cents": -5, "currency": "EUR"}`:                  accounts.ReasonInvalidAmount,
		`{"amount_cents": 0, "currency": "EUR"}`:                   accounts.ReasonInvalidAmount,
		`{"amount_cents": 5, "currency": "eur"}`:                   accounts.ReasonInvalidCurrency,
		`{"amount_cents": 5, "currency": "XYZ"}`:                   accounts.ReasonInvalidCurrency,
		`{"amount_cents": 5, "currency": 978}`:                     accounts.ReasonInvalidPayload,
		`{"amount_cents": 5}`:                                      accounts.ReasonInvalidPayload,
		`null`:                                                     accounts.ReasonInvalidPayload,
	} {
		_, err := ledger(data)
		require.Equal(t, reason, event.ReasonOf(err), data)
	}

	account := func(data string) (accounts.AccountState, error) {
		return accounts.ParseAccount(event.Event{Type: accounts.TypeAccountOpened, Version: 1, Data: []byte(data)})
	}
	s, err := account(`{"name": "Zo\u00eb", "email": "z@x", "plan": "pro"}`)
	require.NoError(t, err)
	require.Equal(t, accounts.AccountState{Name: "Zoë", Email: "z@x", Plan: "pro"}, s)
	for _, data := range []string{
		`{"name": "  ", "email": "z@x", "plan": "pro"}`,
		`{"name": "\u0020", "email": "z@x", "plan": "pro"}`,
		`{"name": 5, "email": "z@x", "plan": "pro"}`,
		`{"Name": "z", "email": "z@x", "plan": "pro"}`,
		`{"name": "z", "email": "no-at", "plan": "pro"}`,
		`[]`,
	} {
		_, err := account(data)
		require.Equal(t, accounts.ReasonInvalidPayload, event.ReasonOf(err), data)
	}
}
