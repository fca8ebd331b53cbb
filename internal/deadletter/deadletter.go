// Package deadletter records what could not be applied — undecodable
// records, conflicts, permanent handler failures — with the reason and the
// origin, in the transaction that moves the partition past it.
package deadletter

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/effectively-io/effectively/internal/pgtext"
	"github.com/effectively-io/effectively/internal/redact"
)

// Letter is one dead letter.
type Letter struct {
	Group     string
	Topic     string
	Partition int32
	Offset    int64
	// EventKey is the dedupe key when the record decoded far enough to have
	// one; empty otherwise.
	EventKey  string
	RecordKey []byte
	// Value is the record value, or a prefix of it at least MaxValueBytes
	// long (only that much is kept).
	Value []byte
	// ValueSize is the size of the whole value when Value is a prefix of
	// it; 0 means len(Value).
	ValueSize int
	Headers   []Header
	// Reason is the reason code (one per kind of bad input).
	Reason string
	// Error explains the reason; it never holds a whole payload.
	Error string
}

// Header is a record header as stored: text when it is valid UTF-8 without
// NUL (which jsonb cannot hold), base64 otherwise.
type Header struct {
	Key         string `json:"key"`
	Value       string `json:"value,omitempty"`
	ValueBase64 string `json:"value_base64,omitempty"`
}

// NewHeader makes the stored form of a record header.
func NewHeader(key string, value []byte) Header {
	if !utf8.ValidString(key) || strings.ContainsRune(key, 0) {
		key = base64.StdEncoding.EncodeToString([]byte(key))
	}
	if utf8.Valid(value) && !bytes.ContainsRune(value, 0) {
		return Header{Key: key, Value: string(value)}
	}
	return Header{Key: key, ValueBase64: base64.StdEncoding.EncodeToString(value)}
}

// Bounds on what a dead letter keeps: the whole value of any record up to
// 64 KiB (so it can be redriven), a prefix of larger ones — never a whole
// hostile payload — and a bounded error.
const (
	MaxValueBytes = 64 << 10
	MaxErrorBytes = 1024
)

const insertSQL = `
INSERT INTO dead_letters
    (consumer_group, topic, "partition", "offset", event_key, record_key, value_prefix, value_size, headers, reason, error)
VALUES ($1, $2, $3, $4, NULLIF($5, ''), $6, $7, $8, $9, $10, $11)
ON CONFLICT (topic, "partition", "offset") DO UPDATE
SET attempts = dead_letters.attempts + 1, last_seen_at = now()`

// Queue queues, on b, the insert of l. A redelivered record (same origin)
// makes no second dead letter; its attempts count goes up.
func Queue(b *pgx.Batch, l Letter) {
	value := l.Value
	if len(value) > MaxValueBytes {
		value = value[:MaxValueBytes]
	}
	headers, _ := json.Marshal(l.Headers) // strings only: cannot fail
	if l.Headers == nil {
		headers = []byte("[]")
	}
	size := l.ValueSize
	if size == 0 {
		size = len(l.Value)
	}
	b.Queue(insertSQL, l.Group, l.Topic, l.Partition, l.Offset, l.EventKey, l.RecordKey, value, size,
		headers, l.Reason, storedError(l.Error))
}

// storedError is an error text as a dead letter keeps it (the row, the
// .dlq record's header): without the credentials of any URL in it (an
// HTTP client's error holds the whole URL; redacted where it was made,
// redacted again here for one that was not), storable, bounded. Redacted
// before it is cut, so a cut URL is not missed.
func storedError(s string) string {
	return pgtext.Storable(redact.Text(s), MaxErrorBytes)
}
