package accounts

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
)

// The side effects of account.opened (outbox operations).
const (
	// OpCRMUpsertContact syncs the contact to the CRM, with an
	// Idempotency-Key.
	OpCRMUpsertContact = "crm.upsert_contact"
	// OpMailWelcome sends the welcome mail through a mail API without
	// idempotency support (recorded intent).
	OpMailWelcome = "mail.welcome"
)

// The reference domain's targets (targets.<name>.url; the reference build
// also reads the older keys effects.crm.url and effects.mail.url).
const (
	// TargetCRM is the CRM API; it honours idempotency keys.
	TargetCRM = "crm"
	// TargetMail is the mail API; it does not (recorded intent).
	TargetMail = "mail"
)

// handleAccountWithSideEffects applies account events like handleAccount
// and, for a newly claimed account.opened, records its side effects as
// outbox intents in the same transaction: the contact's sync to the CRM
// and the welcome mail, each when its target is configured. They are
// recorded even when the state arrives stale: the account was opened.

func handleAccountWithSideEffects(_ context.Context, e *handlers.Effects, ev event.Event) error {
	s, err := applyAccount(e, ev)
	if err != nil || ev.Type != TypeAccountOpened {
		return err
	}
	// A target without a URL is off: nothing is recorded for it.
	if e.Configured(TargetCRM) {
		body, _ := json.Marshal(contact{ID: ev.Subject, Version: ev.Version, Name: s.Name, Email: s.Email, Plan: s.Plan}) // strings and an integer: cannot fail
		if err := e.Send(handlers.Request{Target: TargetCRM, Operation: OpCRMUpsertContact, Resource: "crm:contact:" + ev.Subject,
			Method: http.MethodPut, Path: "/contacts/" + url.PathEscape(ev.Subject), Body: body}); err != nil {
			return err
		}
	}
	if e.Configured(TargetMail) {
		body, _ := json.Marshal(welcomeMail{Template: "welcome", To: s.Email, Name: s.Name, AccountID: ev.Subject})
		if err := e.Send(handlers.Request{Target: TargetMail, Operation: OpMailWelcome, Resource: "mail:account:" + ev.Subject,
			Method: http.MethodPost, Body: body}); err != nil {
			return err
		}
	}
	return nil
}

// contact is the CRM's request body; version lets the CRM order updates.
type contact struct {
	ID      string `json:"id"`
	Version int64  `json:"version"`
	Name    string `json:"name"`
	Email   string `json:"email"`
	Plan    string `json:"plan"`
}

// welcomeMail is the mail API's request body.
type welcomeMail struct {
	Template  string `json:"template"`
	To        string `json:"to"`
	Name      string `json:"name"`
	AccountID string `json:"account_id"`
}
