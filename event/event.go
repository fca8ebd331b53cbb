package event

import (
	"encoding/json"
	"time"
)

// Record is what the decoder needs of a Kafka record. The consumer copies it
// from a *kgo.Record, so this package needs no Kafka client.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	// Key is the record key: the producer's resource ID.
	Key []byte
	// Value is the record value; nil for a tombstone.
	Value   []byte
	Headers []Header
	// Timestamp is the broker or producer timestamp. It is never part of an
	// event's identity.
	Timestamp time.Time

	// wire is, while a registry format's record is decoded, how its value
	// was encoded (the value then holds its JSON).
	wire *Wire
}

// Header is one Kafka record header. Kafka allows a key to repeat.
type Header struct {
	Key   string
	Value []byte
}

// Event is a decoded, validated event. Its fields are the same whether it
// arrived in structured mode, in binary mode or (for topics configured with
// format json) as provider JSON mapped by JSON pointers.
type Event struct {
	// Source is the CloudEvents source; for format json, the topic name.
	Source string
	// ID is the CloudEvents id; for format json, the value at IDPointer or,
	// without one, the event's Key.
	ID string
	// Type is the event type the domain handlers are registered by.
	Type string
	// Subject is the resource ID: the subject attribute, else the
	// partitionkey extension, else the record key (for format json, the
	// value at SubjectPointer). Two of them present and different are
	// subject_mismatch.
	Subject string
	// Version is the resourceversion extension (≥ 1) of an absolute-state
	// event, 0 when absent (relative events, doorbells).
	Version int64
	// Sequence orders events of one Version: an event is newer than
	// another when its Version is higher, or its Version is the same and
	// its Sequence higher. It is 0 except for a streamed Debezium change,
	// whose Version is the commit it follows and whose Sequence is its
	// own LSN (see FormatDebezium). A version column holds the two as
	// numeric Version.Sequence (20 digits after the point); a bigint one
	// holds only a Sequence of 0. It is not part of the event's identity.
	Sequence int64
	// Time is the CloudEvents time attribute; zero when absent.
	Time time.Time
	// Data is the data member as received (structured mode), the record
	// value (binary mode), or the whole payload (format json); nil when a
	// structured event has no data. It does not alias the record. Read it
	// with Document; never modify it in place (the event's copies share it,
	// and so does the decoder's index of it): replace it.
	Data json.RawMessage
	// Key is the dedupe key, derived by the topic's key strategy: the
	// identity of the work, claimed once in the database.
	Key string
	// Strategy names the key strategy that made Key: cloudevents, field,
	// natural or content-hash. Claims record it so that a topic's strategy
	// cannot change while its claims are retained.
	Strategy string
	// PayloadHash is the SHA-256 of the RFC 8785 canonical JSON of
	// {"data": D, "resourceversion": V, "subject": S, "type": T}, where D is
	// Data (null when absent) and V is Version (the number 0 when absent);
	// for an Avro record whose unions of more than one non-null type the
	// JSON does not tell apart, also {"avro_union_branches": the branches
	// written}. A redelivery with the same Key and another PayloadHash is a
	// conflict.
	// Time, id, source, extensions and the transport mode are not part of
	// it: a structured and a binary copy of one event, or one with a new
	// time, hash alike.
	PayloadHash [32]byte
	// RecordTime is the record's timestamp on the topic (zero when the
	// broker gave none). It is not part of the event's identity; the
	// side effects of an event older than the outbox retention are
	// suppressed unless configured otherwise.
	RecordTime time.Time
	// TraceParent and TraceState are the producer's W3C trace context, as
	// received (the CloudEvents distributed-tracing extension, else the
	// traceparent and tracestate record headers); empty when absent or
	// malformed. Like RecordTime they are not part of the event's identity.
	// The engine continues the producer's trace from them: the handler's
	// span, and the outbox calls the event causes.
	TraceParent string
	TraceState  string
	// Wire is, for a registry format (avro, protobuf, jsonschema), the
	// writer's schema and the payload as produced: Data is its JSON form,
	// Unmarshal decodes it into a generated type. Nil for the JSON formats.
	Wire *Wire

	// doc is the decoder's index of Data (Document), kept when small.
	doc *Document
}

// Size is about the bytes of memory ev holds: its data and attributes, the
// index of its data the decoder keeps with a small event, and a registry
// format's wire payload. A pipeline that holds many decoded events at once
// can count them by it.
func (ev Event) Size() int {
	n := len(ev.Data) + len(ev.Source) + len(ev.ID) + len(ev.Type) + len(ev.Subject) + len(ev.Key) +
		len(ev.Strategy) + len(ev.TraceParent) + len(ev.TraceState)
	if ev.doc != nil {
		n += ev.doc.size()
	}
	if w := ev.Wire; w != nil {
		n += len(w.Format) + 8*len(w.MessageIndexes)
		if len(w.Payload) == 0 || len(ev.Data) == 0 || &w.Payload[0] != &ev.Data[0] {
			n += len(w.Payload) // not shared with Data (JSON Schema's is)
		}
	}
	return n
}
