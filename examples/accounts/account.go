package accounts

import (
	"context"
	"fmt"
	"strings"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
)

// AccountState is an account's whole state: account events are absolute
// (an update is not a patch).
type AccountState struct {
	Name  string `json:"name"`
	Email string `json:"email"`
	Plan  string `json:"plan"`
}

// ReasonInvalidPayload: the data does not fit the event type (not an object,
// a missing or mistyped field). Amounts and currencies have reasons of their
// own.
const ReasonInvalidPayload event.Reason = "invalid_payload"

// ReasonMissingVersion: an absolute-state event without resourceversion.
const ReasonMissingVersion event.Reason = "missing_version"

func invalidPayload(format string, args ...any) error {
	return event.PermanentWithReason(ReasonInvalidPayload, fmt.Errorf(format, args...))
}

// ParseAccount validates an account event's data. Like ParseLedger it
// reads the fields through ev.Document — the decoder's own index of the
// data, or one parse for a large payload — where they lie in the text:
// nothing is built for the rest of the payload, however large (a tree of
// values, encoding/json's or fastjson's, costs 20 to 100 times a payload
// of small values for every record in flight).
func ParseAccount(ev event.Event) (AccountState, error) {
	if ev.Version < 1 {
		return AccountState{}, event.PermanentWithReason(ReasonMissingVersion, fmt.Errorf("%s needs the resourceversion extension (an integer ≥ 1)", ev.Type))
	}
	doc, err := ev.Document() // the decoder passed only valid JSON without repeated names
	if err != nil || doc.Root().Kind() != event.KindObject {
		return AccountState{}, invalidPayload("%s data must be an object with name, email and plan", ev.Type)
	}
	var s AccountState
	for _, f := range []struct {
		name string
		dst  *string
	}{{"name", &s.Name}, {"email", &s.Email}, {"plan", &s.Plan}} {
		fv, ok := doc.Get(f.name)
		if !ok {
			return AccountState{}, invalidPayload("%s data lacks %s", ev.Type, f.name)
		}
		if fv.Kind() != event.KindString {
			return AccountState{}, invalidPayload("%s data.%s must be a non-empty string", ev.Type, f.name)
		}
		*f.dst = fv.Text()
		if strings.TrimSpace(*f.dst) == "" {
			return AccountState{}, invalidPayload("%s data.%s must be a non-empty string", ev.Type, f.name)
		}
	}
	if !strings.Contains(s.Email, "@") {
		return AccountState{}, invalidPayload("%s data.email is not an email address", ev.Type)
	}
	return s, nil
}

// Accounts is the accounts table, written with the version gate: a row
// changes only when the event's version is newer than the stored one.
var Accounts = &handlers.Table{
	Name:    "accounts",
	Key:     []string{"id"},
	Version: "version",
	Columns: []string{"name", "email", "plan", "status"},
	Touch:   []string{"updated_at"},
}

func handleAccount(_ context.Context, e *handlers.Effects, ev event.Event) error {
	_, err := applyAccount(e, ev)
	return err
}

// applyAccount validates an account event and queues its version-gated
// upsert; it returns the state for the side effects.
func applyAccount(e *handlers.Effects, ev event.Event) (AccountState, error) {
	s, err := ParseAccount(ev)
	if err != nil {
		return AccountState{}, err
	}
	status := "open"
	if ev.Type == TypeAccountClosed {
		status = "closed"
	}
	return s, e.Upsert(Accounts, ev.Version, ev.Subject, s.Name, s.Email, s.Plan, status)
}
