package accounts_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/dedupe"
	"github.com/effectively-io/effectively/effectivelytest"
	"github.com/effectively-io/effectively/examples/accounts"
	"github.com/effectively-io/effectively/service"
)

// The reference domain's handlers as a team tests its own, with the test
// kit: through the real pipeline on a fresh schema, asserting dispositions,
// dead letters, parked events and recorded intents.
func TestAccountsWithTheKit(t *testing.T) {
	t.Parallel()
	app := service.New("accounts")
	accounts.Register(&app.Registry)
	app.Migrations(accounts.Migrations())
	cfg := config.Default()
	cfg.Kafka.Topics = []string{"accounts"}
	// Targets with URLs: the account's side effects are recorded (the kit
	// sends nothing).
	cfg.Targets = map[string]config.Target{accounts.TargetCRM: {URL: "https://crm.example.com/v1"}, accounts.TargetMail: {URL: "https://mail.example.com"}}
	kit := effectivelytest.New(t, app, effectivelytest.Options{Config: &cfg, Topic: "accounts"})

	opened := kit.CloudEvent("o1", accounts.TypeAccountOpened, "a1", 1, map[string]any{"name": "Ann", "email": "ann@example.com", "plan": "pro"})
	credit := kit.CloudEvent("c1", accounts.TypeLedgerCredited, "a2", 0, map[string]any{"amount_cents": 500, "currency": "EUR"})
	res := kit.Apply(
		opened,
		credit, // a2 does not exist yet: parked
		kit.CloudEvent("c2", accounts.TypeLedgerCredited, "a1", 0, map[string]any{"amount_cents": -5, "currency": "EUR"}),
		opened, // a redelivery
		kit.CloudEvent("u0", accounts.TypeAccountUpdated, "a1", 1, map[string]any{"name": "Old", "email": "old@example.com", "plan": "free"}),
	)
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 1, dedupe.Parked: 1, dedupe.DeadLettered: 1, dedupe.Duplicate: 1, dedupe.Stale: 1}, res.Counts)
	require.Len(t, res.DeadLetters, 1)
	require.EqualValues(t, "invalid_amount", res.DeadLetters[0].Reason)
	require.EqualValues(t, "invalid_amount", kit.DeadLetters()[0].Reason)

	parked := kit.Parked()
	require.Len(t, parked, 1)
	require.Equal(t, "a2", parked[0].Resource)

	intents := kit.Intents()
	require.Len(t, intents, 2, "one CRM upsert and one welcome mail, once")
	require.Equal(t, []string{accounts.TargetCRM, accounts.TargetMail}, []string{intents[0].Target, intents[1].Target})

	// a2 opens: its parked credit is released and applied in the same
	// transaction.
	res = kit.Apply(kit.CloudEvent("o2", accounts.TypeAccountOpened, "a2", 1, map[string]any{"name": "Bo", "email": "bo@example.com", "plan": "pro"}))
	require.Equal(t, 1, res.Counts[dedupe.Applied])
	require.Equal(t, 1, res.Released[dedupe.Applied])
	require.Empty(t, kit.Parked())
	var balance int64
	require.NoError(t, kit.Pool.QueryRow(t.Context(), `SELECT balance_cents FROM account_balances WHERE account_id = 'a2'`).Scan(&balance))
	require.Equal(t, int64(500), balance)
}
