package pipeline

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/consumer"
	"github.com/effectively-io/effectively/dedupe"
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

// DeadLetterFilter selects dead letters; zero fields match everything.
type DeadLetterFilter struct {
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

// ListDeadLetters lists dead letters, oldest first.
func ListDeadLetters(ctx context.Context, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, f DeadLetterFilter) ([]DeadLetter, error) {
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
		return d, err
	})
}

// RedriveResult is what a redrive did with one dead letter.
type RedriveResult struct {
	ID int64 `json:"id"`
	// Resolution is applied, stale, parked or duplicate when the dead
	// letter is resolved; empty when it is still dead.
	Resolution string `json:"resolution,omitempty"`
	// Already is true when it had been resolved before: nothing was done.
	Already bool `json:"already_resolved,omitempty"`
	// Reason and Error say why it is still dead.
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
}

// ErrTruncated means the dead letter kept only a prefix of its record: it
// cannot be redriven, only re-produced upstream.
var ErrTruncated = errors.New("the dead letter kept only a prefix of its record (larger than 64 KiB); re-produce the event upstream instead")

// Redrive re-applies a dead letter after a fix, through the same claim, so
// nothing applies twice: a claim dead-lettered before gets its handler run
// again; an event whose claim was applied meanwhile is a duplicate; one that
// still fails stays dead with the new error. Redriving a resolved dead
// letter does nothing.
func (a *Applier) Redrive(ctx context.Context, id int64) (RedriveResult, error) {
	res := RedriveResult{ID: id}
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		res = RedriveResult{ID: id}
		ds, err := ListDeadLetters(ctx, tx, DeadLetterFilter{ID: id, Limit: 1})
		if err != nil {
			return err
		}
		if len(ds) == 0 {
			return fmt.Errorf("dead letter %d does not exist", id)
		}
		d := ds[0]
		if _, err := tx.Exec(ctx, `SELECT 1 FROM dead_letters WHERE id = $1 FOR UPDATE`, id); err != nil {
			return fmt.Errorf("locking dead letter %d: %w", id, err)
		}
		if d.ResolvedAt != nil {
			res.Already, res.Resolution = true, *d.Resolution
			return nil
		}
		if d.ValueSize > len(d.Value) {
			return ErrTruncated
		}
		rec, err := d.record()
		if err != nil {
			return err
		}
		b := consumer.Batch{Group: d.Group, Topic: d.Topic, Partition: d.Partition, Records: []*kgo.Record{rec}}
		it := a.decode(b)[0]
		if it.disposition == "" {
			if err := a.claim(ctx, tx, b, []*item{it}); err != nil {
				return err
			}
			if !it.claimed && it.disposition == dedupe.Duplicate {
				// Claimed before with the same payload: dead-lettered then
				// (run its handler again) or applied since (a duplicate).
				var disp string
				if err := tx.QueryRow(ctx, `SELECT disposition FROM processed_events WHERE event_key = $1 FOR UPDATE`, it.ev.Key).Scan(&disp); err != nil {
					return fmt.Errorf("reading the claim of dead letter %d: %w", id, err)
				}
				if disp == string(dedupe.DeadLettered) {
					it.claimed, it.disposition = true, ""
				}
			}
			if it.claimed {
				jobs := a.itemJobs(b, []*item{it})
				gate, err := a.parkingGate(ctx, tx, jobs)
				if err != nil {
					return err
				}
				if err := a.runJobs(ctx, tx, jobs, true, gate); err != nil {
					return err
				}
			}
		}
		if it.disposition == dedupe.DeadLettered {
			res.Reason = string(it.reason)
			res.Error = it.err.Error()
			_, err := tx.Exec(ctx, `UPDATE dead_letters SET attempts = attempts + 1, last_seen_at = now(), reason = $2, error = $3 WHERE id = $1`,
				id, res.Reason, truncateError(res.Error))
			return err
		}
		res.Resolution = string(it.disposition)
		rec2 := &pgx.Batch{}
		if it.claimed {
			dedupe.QueueDispositions(rec2, []string{it.ev.Key}, []dedupe.Disposition{it.disposition})
		}
		rec2.Queue(`UPDATE dead_letters SET resolved_at = now(), resolution = $2, attempts = attempts + 1, last_seen_at = now() WHERE id = $1`, id, res.Resolution)
		return tx.SendBatch(ctx, rec2).Close()
	})
	return res, err
}

func truncateError(s string) string {
	if len(s) > 1000 {
		return s[:1000] + "…"
	}
	return s
}

// record rebuilds the Kafka record the dead letter came from.
func (d DeadLetter) record() (*kgo.Record, error) {
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
