package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/effectively-io/effectively/internal/redact"
)

// Stored is an intent as the outbox holds it, for operators.
type Stored struct {
	ID             int64           `json:"id"`
	EventKey       string          `json:"event_key"`
	Operation      string          `json:"operation"`
	Resource       string          `json:"resource"`
	Method         string          `json:"method"`
	TargetName     string          `json:"target_name,omitempty"`
	Target         string          `json:"target"`
	IdempotencyKey string          `json:"idempotency_key"`
	Idempotent     bool            `json:"idempotent"`
	State          State           `json:"state"`
	Attempts       int             `json:"attempts"`
	LastStatus     *int            `json:"last_status,omitempty"`
	LastError      string          `json:"last_error,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
	NextAttemptAt  time.Time       `json:"next_attempt_at"`
	SentAt         *time.Time      `json:"sent_at,omitempty"`
	Request        json.RawMessage `json:"request,omitempty"` // only from Get
}

// Filter selects intents. Zero fields match everything.
type Filter struct {
	State     State
	Operation string
	EventKey  string
	Resource  string
	// Limit bounds List (default 1000).
	Limit int
}

// ErrBadFilter: a filter names no state that exists.
var ErrBadFilter = errors.New("bad outbox filter")

// States are every intent state, for validating a filter.
var States = []State{Pending, Sending, Sent, Unknown, Suppressed, DeadLettered}

func (f Filter) where() (string, []any, error) {
	if f.State != "" && !slices.Contains(States, f.State) {
		return "", nil, fmt.Errorf("%w: state %q is not one of %s", ErrBadFilter, f.State, joinStates(States))
	}
	var (
		conds []string
		args  []any
	)
	add := func(col, v string) {
		if v != "" {
			args = append(args, v)
			conds = append(conds, fmt.Sprintf("%s = $%d", col, len(args)))
		}
	}
	add("state", string(f.State))
	add("operation", f.Operation)
	add("event_key", f.EventKey)
	add("resource", f.Resource)
	if len(conds) == 0 {
		return "true", args, nil
	}
	return strings.Join(conds, " AND "), args, nil
}

func joinStates(ss []State) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return strings.Join(out, ", ")
}

const storedColumns = `id, event_key, operation, resource, method, coalesce(target_name, ''), target, idempotency_key, idempotent, state, attempts,
       last_status, coalesce(last_error, ''), created_at, updated_at, next_attempt_at, sent_at`

func scanStored(row pgx.Row, s *Stored, extra ...any) error {
	err := row.Scan(append([]any{&s.ID, &s.EventKey, &s.Operation, &s.Resource, &s.Method, &s.TargetName, &s.Target, &s.IdempotencyKey,
		&s.Idempotent, &s.State, &s.Attempts, &s.LastStatus, &s.LastError, &s.CreatedAt, &s.UpdatedAt,
		&s.NextAttemptAt, &s.SentAt}, extra...)...)
	// Stored redacted already; redacted again for rows an older version
	// wrote, before they reach a terminal or the console.
	s.LastError = redact.Text(s.LastError)
	return err
}

// List returns the intents f selects, oldest first.
func List(ctx context.Context, pool *pgxpool.Pool, f Filter) ([]Stored, error) {
	where, args, err := f.where()
	if err != nil {
		return nil, err
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 1000
	}
	args = append(args, limit)
	rows, err := pool.Query(ctx, fmt.Sprintf(`SELECT %s FROM outbox WHERE %s ORDER BY id LIMIT $%d`, storedColumns, where, len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("listing outbox intents: %w", err)
	}
	defer rows.Close()
	var out []Stored
	for rows.Next() {
		var s Stored
		if err := scanStored(rows, &s); err != nil {
			return nil, fmt.Errorf("listing outbox intents: %w", err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing outbox intents: %w", err)
	}
	return out, nil
}

// Get returns one intent with its request body.
func Get(ctx context.Context, pool *pgxpool.Pool, id int64) (Stored, error) {
	var (
		s   Stored
		req string
	)
	err := scanStored(pool.QueryRow(ctx, fmt.Sprintf(`SELECT %s, request::text FROM outbox WHERE id = $1`, storedColumns), id), &s, &req)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, fmt.Errorf("outbox intent %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return s, fmt.Errorf("reading outbox intent %d: %w", id, err)
	}
	s.Request = json.RawMessage(req)
	return s, nil
}

// Counts returns how many intents are in each state.
func Counts(ctx context.Context, pool *pgxpool.Pool) (map[State]int64, error) {
	rows, err := pool.Query(ctx, `SELECT state, count(*) FROM outbox GROUP BY state`)
	if err != nil {
		return nil, fmt.Errorf("counting outbox intents: %w", err)
	}
	out := map[State]int64{}
	for _, s := range States {
		out[s] = 0
	}
	var (
		state string
		n     int64
	)
	_, err = pgx.ForEachRow(rows, []any{&state, &n}, func() error { out[State(state)] = n; return nil })
	if err != nil {
		return nil, fmt.Errorf("counting outbox intents: %w", err)
	}
	return out, nil
}

// ErrNotFound: no intent has the ID.
var ErrNotFound = errors.New("no such outbox intent")

// ErrNotUnknown: the intent is not in state unknown, so there is nothing to
// resolve.
var ErrNotUnknown = errors.New("the outbox intent is not unknown")

// Action is how an operator resolves an unknown intent.
type Action string

// Resolutions of an unknown intent.
const (
	// ResolveSent: the call was made (the message arrived); mark it sent.
	ResolveSent Action = "sent"
	// ResolveResend: the call was not made; deliver it again, once.
	ResolveResend Action = "resend"
)

const resolveSQL = `
UPDATE outbox
SET state = CASE WHEN $2::text = 'sent' THEN 'sent' ELSE 'pending' END,
    sent_at = CASE WHEN $2::text = 'sent' THEN now() END,
    next_attempt_at = now(), updated_at = now(),
    last_error = 'resolved by an operator: ' || $2::text
WHERE id = ANY($1) AND state = 'unknown'
RETURNING id`

// NotSettled is an ID ResolveAll left as it was: no intent has it (State
// is empty; it matches ErrNotFound) or the intent is not unknown (it
// matches ErrNotUnknown).
type NotSettled struct {
	ID    int64 `json:"id"`
	State State `json:"state,omitempty"`
}

func (n NotSettled) Error() string {
	switch n.State {
	case "":
		return fmt.Sprintf("outbox intent %d: %s", n.ID, ErrNotFound)
	case Unknown: // it turned unknown after the update looked (a dispatcher's call ended in doubt)
		return fmt.Sprintf("resolving outbox intent %d: it became unknown while this ran; run the command again for it", n.ID)
	}
	return fmt.Sprintf("resolving outbox intent %d: it is %s: %s", n.ID, n.State, ErrNotUnknown)
}

func (n NotSettled) Unwrap() error {
	if n.State == "" {
		return ErrNotFound
	}
	return ErrNotUnknown
}

// ResolveAll settles the unknown intents among ids (ResolveSent marks them
// sent, ResolveResend puts them back in the queue to be delivered once
// more) in one statement: on an error none of them is settled. It returns
// the IDs it settled and those it left, each in the order given.
func ResolveAll(ctx context.Context, pool *pgxpool.Pool, ids []int64, action Action) (settled []int64, left []NotSettled, err error) {
	if action != ResolveSent && action != ResolveResend {
		return nil, nil, fmt.Errorf("resolving outbox intents: action %q is neither %q nor %q", action, ResolveSent, ResolveResend)
	}
	rows, err := pool.Query(ctx, resolveSQL, ids, string(action))
	if err != nil {
		return nil, nil, fmt.Errorf("resolving outbox intents: %w", err)
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, nil, fmt.Errorf("resolving outbox intents: %w", err)
	}
	isDone := make(map[int64]bool, len(done))
	for _, id := range done {
		isDone[id] = true
	}
	rest := make([]int64, 0, len(ids)-len(done))
	for _, id := range ids {
		if isDone[id] {
			settled = append(settled, id)
		} else {
			rest = append(rest, id)
		}
	}
	if len(rest) == 0 {
		return settled, nil, nil
	}
	// Why each was left, as it is now.
	states := map[int64]State{}
	rows, err = pool.Query(ctx, `SELECT id, state FROM outbox WHERE id = ANY($1)`, rest)
	if err != nil {
		return settled, nil, fmt.Errorf("resolving outbox intents (%d settled): reading the state of the others: %w", len(settled), err)
	}
	var (
		id    int64
		state string
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &state}, func() error { states[id] = State(state); return nil }); err != nil {
		return settled, nil, fmt.Errorf("resolving outbox intents (%d settled): reading the state of the others: %w", len(settled), err)
	}
	for _, id := range rest {
		left = append(left, NotSettled{ID: id, State: states[id]})
	}
	return settled, left, nil
}

// Resolve settles one unknown intent (ResolveAll of one ID); an intent it
// leaves is an error matching ErrNotFound or ErrNotUnknown.
func Resolve(ctx context.Context, pool *pgxpool.Pool, id int64, action Action) error {
	_, left, err := ResolveAll(ctx, pool, []int64{id}, action)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return left[0]
	}
	return nil
}

// ErrNotRetryable: retry applies to dead-lettered, suppressed and pending
// intents only. An unknown one is resolved (it may have been sent); a sent
// or sending one is not repeated.
var ErrNotRetryable = errors.New("only dead_lettered, suppressed and pending intents can be retried")

// retryableStates are those Retry moves.
var retryableStates = []string{string(DeadLettered), string(Suppressed), string(Pending)}

// Retry queues the intents f selects for delivery now: dead-lettered ones
// (after the target was fixed), suppressed ones (an operator chose to send a
// replay's side effects after all) and pending ones waiting for a backoff.
// It returns how many it queued. With a State that is not retryable it
// returns ErrNotRetryable.
func Retry(ctx context.Context, pool *pgxpool.Pool, f Filter, ids ...int64) (int64, error) {
	if f.State != "" && !slices.Contains(retryableStates, string(f.State)) {
		return 0, fmt.Errorf("%w: retrying %s intents: %w", ErrBadFilter, f.State, ErrNotRetryable)
	}
	where, args, err := f.where()
	if err != nil {
		return 0, err
	}
	args = append(args, retryableStates)
	where += fmt.Sprintf(" AND state = ANY($%d)", len(args))
	if len(ids) > 0 {
		args = append(args, ids)
		where += fmt.Sprintf(" AND id = ANY($%d)", len(args))
	}
	// Attempts restart: the ceiling (outbox.max_attempts) counts from the
	// operator's decision. The age (outbox.max_age) does not: an intent
	// older than it gets one attempt.
	ct, err := pool.Exec(ctx, `UPDATE outbox SET state = 'pending', next_attempt_at = now(), updated_at = now(),
    attempts = CASE WHEN state = 'pending' THEN attempts ELSE 0 END,
    last_error = CASE WHEN state = 'pending' THEN last_error ELSE 'queued again by an operator; was ' || state || coalesce(': ' || last_error, '') END
WHERE `+where, args...)
	if err != nil {
		return 0, fmt.Errorf("retrying outbox intents: %w", err)
	}
	if ct.RowsAffected() == 0 && len(ids) == 1 {
		s, err := Get(ctx, pool, ids[0])
		if err != nil {
			return 0, fmt.Errorf("retrying: %w", err)
		}
		return 0, fmt.Errorf("retrying outbox intent %d: it is %s: %w", ids[0], s.State, ErrNotRetryable)
	}
	return ct.RowsAffected(), nil
}
