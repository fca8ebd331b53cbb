package console

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/effectively-io/effectively/internal/pgtext"
	"github.com/effectively-io/effectively/internal/redact"
)

// Outcomes of an action.
const (
	OutcomeOK      = "ok"      // done
	OutcomeRefused = "refused" // a check said no (a replay while members run, an intent no longer unknown)
	OutcomeFailed  = "failed"  // an error
)

// Action is one row of the operator-action log.
type Action struct {
	ID       int64     `json:"id"`
	At       time.Time `json:"at"`
	Operator string    `json:"operator"`
	Action   string    `json:"action"`
	Target   string    `json:"target"`
	Outcome  string    `json:"outcome"`
	Result   string    `json:"result"`
}

// db is what the log needs of a pool.
type db interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// maxResultBytes bounds an action's result in the log; a longer one is cut
// on a character boundary and marked with "…".
const maxResultBytes = 4000

// RecordAction appends a to the operator-action log. Its text is made
// storable first — invalid UTF-8 and NUL replaced, the result cut on a
// character boundary — because PostgreSQL refuses such text, and the
// action, already taken, would then be missing from the log.
func RecordAction(ctx context.Context, pool db, a Action) error {
	_, err := pool.Exec(ctx, `INSERT INTO operator_actions (operator, action, target, outcome, result) VALUES ($1, $2, $3, $4, $5)`,
		pgtext.Clean(a.Operator), pgtext.Clean(a.Action), pgtext.Clean(a.Target), a.Outcome, pgtext.Storable(redact.Text(a.Result), maxResultBytes))
	if err != nil {
		return fmt.Errorf("recording the operator action %s on %s: %w", a.Action, a.Target, err)
	}
	return nil
}

// ListActions returns the newest limit actions, newest first.
func ListActions(ctx context.Context, pool db, limit int) ([]Action, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := pool.Query(ctx, `SELECT id, at, operator, action, target, outcome, result FROM operator_actions ORDER BY id DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("listing operator actions: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Action])
	if err != nil {
		return nil, fmt.Errorf("listing operator actions: %w", err)
	}
	return out, nil
}
