package accounts

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/outbox"
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

// accountHandler applies account events like handleAccount and, for a newly
// claimed account.opened, records its side effects as outbox intents in the
// same transaction. They are recorded even when the state arrives stale:
// the account was opened.
type accountHandler struct {
	opts Options
}

// Handle implements handlers.Handler.
func (h *accountHandler) Handle(ctx context.Context, e *handlers.Effects, ev event.Event) error {
	if err := handleAccount(ctx, e, ev); err != nil {
		return err
	}
	if ev.Type != TypeAccountOpened {
		return nil
	}
	s, _ := ParseAccount(ev) // handleAccount validated it
	if intents := h.intents(ev, s); len(intents) > 0 {
		sql, args := outbox.Record(intents...)
		e.Exec(nil, sql, args...) // nil: the upsert decides the disposition
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

func (h *accountHandler) intents(ev event.Event, s AccountState) []outbox.Intent {
	var out []outbox.Intent
	// Older than the outbox's retention, the event's intents may have been
	// pruned: recording them again would fire them again. Unless asked to,
	// they are recorded as suppressed (listed, never sent).
	suppressed := h.opts.Expiry.Suppress(ev.RecordTime)
	if u := h.opts.CRMURL; u != "" {
		body, _ := json.Marshal(contact{ID: ev.Subject, Version: ev.Version, Name: s.Name, Email: s.Email, Plan: s.Plan}) // strings and an integer: cannot fail
		out = append(out, outbox.Intent{
			EventKey: ev.Key, Operation: OpCRMUpsertContact,
			Resource: "crm:contact:" + ev.Subject,
			Method:   http.MethodPut,
			Target:   strings.TrimSuffix(u, "/") + "/contacts/" + url.PathEscape(ev.Subject),
			Request:  body, Idempotent: true, Suppressed: suppressed,
		})
	}
	if u := h.opts.MailURL; u != "" {
		body, _ := json.Marshal(welcomeMail{Template: "welcome", To: s.Email, Name: s.Name, AccountID: ev.Subject})
		out = append(out, outbox.Intent{
			EventKey: ev.Key, Operation: OpMailWelcome,
			Resource: "mail:account:" + ev.Subject,
			Method:   http.MethodPost,
			Target:   u,
			Request:  body, Idempotent: false, Suppressed: suppressed,
		})
	}
	return out
}
