package accounts

import (
	"embed"
	"io/fs"
	"net/http"
	"time"

	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/outbox"
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

// Options configure the reference domain's handlers.
type Options struct {
	// SourceURL is the source API of accounts (sources.accounts.url): GET
	// <url>/<id>, or the URL with "{id}" replaced, answers the account's
	// current state. Empty: doorbells are dead-lettered until configured.
	SourceURL string
	// HTTPClient fetches; nil uses one with a 5 s timeout.
	HTTPClient *http.Client
	// CRMURL is the CRM API (effects.crm.url): a newly claimed
	// account.opened records an intent to PUT <url>/contacts/<id>. Empty:
	// no CRM sync.
	CRMURL string
	// MailURL is the mail API (effects.mail.url): a newly claimed
	// account.opened records an intent to POST a welcome mail to it. Empty:
	// no welcome mail.
	MailURL string
	// Expiry (outbox.retention, outbox.resend_expired): the side effects of
	// an event whose record is older than the retention are recorded as
	// suppressed, not sent.
	Expiry outbox.Expiry
}

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
// their account), the doorbell (fetch-on-event) and, when their URLs are
// set, the side effects of account.opened.
func Register(r *handlers.Registry, opts Options) {
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 5 * time.Second}
	}
	var acct handlers.Handler = handlers.HandlerFunc(handleAccount)
	if opts.CRMURL != "" || opts.MailURL != "" {
		acct = &accountHandler{opts: opts}
	}
	for _, t := range []string{TypeAccountOpened, TypeAccountUpdated, TypeAccountClosed} {
		r.Handle(t, acct)
	}
	r.HandleFunc(TypeLedgerCredited, handleLedger)
	r.HandleFunc(TypeLedgerDebited, handleLedger)
	r.Handle(TypeAccountRefreshed, &doorbell{opts: opts})
	r.Require(Account)
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
