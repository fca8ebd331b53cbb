package deadletter

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/internal/redact"
)

// DeadLetter is a dead letter as operators see it.
type DeadLetter struct {
	ID          int64             `json:"id"`
	Group       string            `json:"consumer_group"`
	Topic       string            `json:"topic"`
	Partition   int32             `json:"partition"`
	Offset      int64             `json:"offset"`
	EventKey    *string           `json:"event_key"`
	RecordKey   []byte            `json:"record_key"`
	Value       []byte            `json:"value"`
	ValueSize   int               `json:"value_size"`
	Headers     []json.RawMessage `json:"headers"`
	Reason      string            `json:"reason"`
	Error       string            `json:"error"`
	Attempts    int               `json:"attempts"`
	FirstSeen   time.Time         `json:"first_seen_at"`
	LastSeen    time.Time         `json:"last_seen_at"`
	PublishedAt *time.Time        `json:"published_at"`
	ResolvedAt  *time.Time        `json:"resolved_at"`
	Resolution  *string           `json:"resolution"`
}

// Filter selects dead letters; zero fields match everything.
type Filter struct {
	ID         int64
	Reason     string
	Topic      string
	Since      time.Time
	Until      time.Time
	Unresolved bool
	Limit      int
}

const listDeadLettersSQL = `
SELECT id, consumer_group, topic, "partition", "offset", event_key, record_key, value_prefix, value_size, headers,
       reason, error, attempts, first_seen_at, last_seen_at, published_at, resolved_at, resolution
FROM dead_letters
WHERE ($1 = 0 OR id = $1) AND ($2 = '' OR reason = $2) AND ($3 = '' OR topic = $3)
  AND ($4::timestamptz IS NULL OR first_seen_at >= $4) AND ($5::timestamptz IS NULL OR first_seen_at < $5)
  AND (NOT $6 OR resolved_at IS NULL)
ORDER BY id
LIMIT $7`

// List lists dead letters, oldest first.
func List(ctx context.Context, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, f Filter) ([]DeadLetter, error) {
	if f.Limit <= 0 {
		f.Limit = 1000
	}
	var since, until *time.Time
	if !f.Since.IsZero() {
		since = &f.Since
	}
	if !f.Until.IsZero() {
		until = &f.Until
	}
	rows, err := db.Query(ctx, listDeadLettersSQL, f.ID, f.Reason, f.Topic, since, until, f.Unresolved, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("listing dead letters: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (DeadLetter, error) {
		var d DeadLetter
		var headers []byte
		err := row.Scan(&d.ID, &d.Group, &d.Topic, &d.Partition, &d.Offset, &d.EventKey, &d.RecordKey, &d.Value, &d.ValueSize,
			&headers, &d.Reason, &d.Error, &d.Attempts, &d.FirstSeen, &d.LastSeen, &d.PublishedAt, &d.ResolvedAt, &d.Resolution)
		if err == nil {
			err = json.Unmarshal(headers, &d.Headers)
		}
		// Stored redacted; redacted again for rows an older version wrote,
		// before they reach a terminal or the console.
		d.Error = redact.Text(d.Error)
		return d, err
	})
}

// Record rebuilds the Kafka record the dead letter came from.
func (d DeadLetter) Record() (*kgo.Record, error) {
	r := &kgo.Record{Topic: d.Topic, Partition: d.Partition, Offset: d.Offset, Key: d.RecordKey, Value: d.Value}
	for _, raw := range d.Headers {
		var h struct {
			Key         string `json:"key"`
			Value       string `json:"value"`
			ValueBase64 string `json:"value_base64"`
		}
		if err := json.Unmarshal(raw, &h); err != nil {
			return nil, fmt.Errorf("dead letter %d: headers: %w", d.ID, err)
		}
		v := []byte(h.Value)
		if h.ValueBase64 != "" {
			b, err := base64.StdEncoding.DecodeString(h.ValueBase64)
			if err != nil {
				return nil, fmt.Errorf("dead letter %d: header %s: %w", d.ID, h.Key, err)
			}
			v = b
		}
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: v})
	}
	return r, nil
}

// ErrTruncated means the dead letter kept only a prefix of its record: it
// cannot be redriven, only re-produced upstream.
var ErrTruncated = errors.New("the dead letter kept only a prefix of its record (larger than 64 KiB); re-produce the event upstream instead")

// Lock locks dead letter id for a redrive, in tx.
func Lock(ctx context.Context, tx pgx.Tx, id int64) error {
	if _, err := tx.Exec(ctx, `SELECT 1 FROM dead_letters WHERE id = $1 FOR UPDATE`, id); err != nil {
		return fmt.Errorf("locking dead letter %d: %w", id, err)
	}
	return nil
}

// StillDead records a redrive that failed again: one more attempt, and why.
func StillDead(ctx context.Context, tx pgx.Tx, id int64, reason, msg string) error {
	_, err := tx.Exec(ctx, `UPDATE dead_letters SET attempts = attempts + 1, last_seen_at = now(), reason = $2, error = $3 WHERE id = $1`,
		id, reason, storedError(msg))
	if err != nil {
		return fmt.Errorf("recording the redrive of dead letter %d: %w", id, err)
	}
	return nil
}

// QueueResolved queues the statement that marks dead letter id resolved
// (applied, stale, parked or duplicate) by a redrive.
func QueueResolved(b *pgx.Batch, id int64, resolution string) {
	b.Queue(`UPDATE dead_letters SET resolved_at = now(), resolution = $2, attempts = attempts + 1, last_seen_at = now() WHERE id = $1`, id, resolution)
}

// Counts is how many dead letters there are, by state and by reason.
type Counts struct {
	// Unresolved are waiting for an operator (not yet redriven).
	Unresolved int64 `json:"unresolved"`
	// Resolved were redriven (applied, stale, parked or duplicate).
	Resolved int64 `json:"resolved"`
	// Unpublished are not yet copied to their dead-letter topic.
	Unpublished int64 `json:"unpublished"`
	// UnresolvedByReason splits Unresolved by reason.
	UnresolvedByReason map[string]int64 `json:"unresolved_by_reason"`
}

// Count counts the dead letters, for `effectively status`.
func Count(ctx context.Context, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}) (Counts, error) {
	rows, err := db.Query(ctx, `SELECT reason, count(*) FILTER (WHERE resolved_at IS NULL), count(*) FILTER (WHERE resolved_at IS NOT NULL),
       count(*) FILTER (WHERE published_at IS NULL)
FROM dead_letters GROUP BY reason`)
	if err != nil {
		return Counts{}, fmt.Errorf("counting dead letters: %w", err)
	}
	out := Counts{UnresolvedByReason: map[string]int64{}}
	var reason string
	var unresolved, resolved, unpublished int64
	_, err = pgx.ForEachRow(rows, []any{&reason, &unresolved, &resolved, &unpublished}, func() error {
		out.Unresolved += unresolved
		out.Resolved += resolved
		out.Unpublished += unpublished
		if unresolved > 0 {
			out.UnresolvedByReason[reason] = unresolved
		}
		return nil
	})
	if err != nil {
		return Counts{}, fmt.Errorf("counting dead letters: %w", err)
	}
	return out, nil
}
