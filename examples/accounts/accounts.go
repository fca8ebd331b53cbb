package accounts

import (
	"embed"
	"io/fs"

	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/schema"
)

// The reference domain's event types.
const (
	TypeAccountOpened    = "account.opened"
	TypeAccountUpdated   = "account.updated"
	TypeAccountClosed    = "account.closed"
	TypeAccountRefreshed = "account.refreshed"
	TypeLedgerCredited   = "ledger.credited"
	TypeLedgerDebited    = "ledger.debited"
)

// Account is the prerequisite of ledger entries (and of doorbells whose
// account the source does not know yet): they wait, parked, until the
// account exists. Any account event creates it.
var Account = handlers.Prerequisite{
	Name:      "account",
	ExistsSQL: `SELECT id FROM accounts WHERE id = ANY($1)`,
	CreatedBy: []string{TypeAccountOpened, TypeAccountUpdated, TypeAccountClosed, TypeAccountRefreshed},
	Waiting:   []string{TypeLedgerCredited, TypeLedgerDebited, TypeAccountRefreshed},
}

// Register registers the reference domain on r: account events (absolute,
// version-gated), ledger events (relative, one row per event, waiting for
// their account), the doorbell (fetch-on-event, from the target accounts)
// and the side effects of account.opened (to the targets crm and mail, when
// they are configured).
func Register(r *handlers.Registry) {
	for _, t := range []string{TypeAccountOpened, TypeAccountUpdated, TypeAccountClosed} {
		r.HandleFunc(t, handleAccountWithSideEffects)
	}
	r.Handle(TypeLedgerCredited, handlers.Validated(validateLedger, handleLedger))
	r.Handle(TypeLedgerDebited, handlers.Validated(validateLedger, handleLedger))
	r.Handle(TypeAccountRefreshed, &doorbell{})
	r.Table(Accounts)
	r.Table(LedgerEntries)
	r.Require(Account)
	r.Target(TargetCRM, handlers.Idempotent)
	r.Target(TargetMail, handlers.RecordedIntent)
	r.Target(TargetSource, handlers.RecordedIntent)
}

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations are the reference domain's tables (accounts, ledger_entries,
// the account_balances view), applied after the engine's with a version
// table of their own.
func Migrations() schema.Set {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // the embed pattern guarantees the folder exists
	}
	return schema.Set{Name: "accounts", Table: "accounts_schema_version", FS: sub}
}
