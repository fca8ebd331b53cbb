package accounts

import (
	"context"
	"encoding/json"
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

// ParseAccount validates an account event's data.
func ParseAccount(ev event.Event) (AccountState, error) {
	if ev.Version < 1 {
		return AccountState{}, event.PermanentWithReason(ReasonMissingVersion, fmt.Errorf("%s needs the resourceversion extension (an integer ≥ 1)", ev.Type))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(ev.Data, &raw); err != nil || raw == nil {
		return AccountState{}, invalidPayload("%s data must be an object with name, email and plan", ev.Type)
	}
	var s AccountState
	for _, f := range []struct {
		name string
		dst  *string
	}{{"name", &s.Name}, {"email", &s.Email}, {"plan", &s.Plan}} {
		v, ok := raw[f.name]
		if !ok {
			return AccountState{}, invalidPayload("%s data lacks %s", ev.Type, f.name)
		}
		if err := json.Unmarshal(v, f.dst); err != nil || strings.TrimSpace(*f.dst) == "" {
			return AccountState{}, invalidPayload("%s data.%s must be a non-empty string", ev.Type, f.name)
		}
	}
	if !strings.Contains(s.Email, "@") {
		return AccountState{}, invalidPayload("%s data.email is not an email address", ev.Type)
	}
	return s, nil
}

// upsertAccountSQL is the version gate: the row changes only when the
// event's version is newer than the stored one. The WHERE is evaluated on
// the latest locked row version, so it holds under concurrency.
const upsertAccountSQL = `
INSERT INTO accounts (id, version, name, email, plan, status, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, now())
ON CONFLICT (id) DO UPDATE
SET version = excluded.version, name = excluded.name, email = excluded.email,
    plan = excluded.plan, status = excluded.status, updated_at = excluded.updated_at
WHERE accounts.version < excluded.version`

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
	e.Exec(handlers.AppliedOrStale, upsertAccountSQL, ev.Subject, ev.Version, s.Name, s.Email, s.Plan, status)
	return s, nil
}
