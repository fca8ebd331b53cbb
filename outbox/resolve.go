package outbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
)

// Action is how an operator resolves an unknown intent.
type Action string

// Resolutions of an unknown intent.
const (
	// ResolveSent: the call was made (the mail arrived); mark it sent.
	ResolveSent Action = "sent"
	// ResolveResend: the call was not made; deliver it again, once.
	ResolveResend Action = "resend"
)

// ErrNotFound: no intent has the ID.
var ErrNotFound = errors.New("no such outbox intent")

// ErrNotUnknown: the intent is not in state unknown, so there is nothing to
// resolve.
var ErrNotUnknown = errors.New("the outbox intent is not unknown")

const resolveSQL = `
UPDATE outbox
SET state = CASE WHEN $2::text = 'sent' THEN 'sent' ELSE 'pending' END,
    sent_at = CASE WHEN $2::text = 'sent' THEN now() END,
    next_attempt_at = now(), updated_at = now(),
    last_error = 'resolved by an operator: ' || $2::text
WHERE id = $1 AND state = 'unknown'`

// Resolve settles an unknown intent: ResolveSent marks it sent,
// ResolveResend puts it back in the queue to be delivered once more.
func (d *Dispatcher) Resolve(ctx context.Context, id int64, action Action) error {
	if action != ResolveSent && action != ResolveResend {
		return fmt.Errorf("resolving outbox intent %d: action %q is neither %q nor %q", id, action, ResolveSent, ResolveResend)
	}
	ct, err := d.pool.Exec(ctx, resolveSQL, id, string(action))
	if err != nil {
		return fmt.Errorf("resolving outbox intent %d: %w", id, err)
	}
	if ct.RowsAffected() == 1 {
		d.log.Info("outbox intent resolved", zap.Int64("intent_id", id), zap.String("action", string(action)))
		return nil
	}
	var state string
	err = d.pool.QueryRow(ctx, `SELECT state FROM outbox WHERE id = $1`, id).Scan(&state)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("resolving outbox intent %d: %w", id, ErrNotFound)
	case err != nil:
		return fmt.Errorf("resolving outbox intent %d: %w", id, err)
	}
	return fmt.Errorf("resolving outbox intent %d: it is %s: %w", id, state, ErrNotUnknown)
}
