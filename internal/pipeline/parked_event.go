package pipeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/effectively-io/effectively/event"
)

// parkedEvent is an event.Event as stored in parked_events.event, so that it can
// be applied when its prerequisite arrives without the original record.
type parkedEvent struct {
	Source  string `json:"source"`
	ID      string `json:"id"`
	Type    string `json:"type"`
	Subject string `json:"subject"`
	Version int64  `json:"resourceversion,omitempty"`
	// Sequence is a Debezium change's LSN (event.Event.Sequence).
	Sequence int64           `json:"sequence,omitempty"`
	Time     *time.Time      `json:"time,omitempty"`
	Data     json.RawMessage `json:"data,omitempty"`
	// DataBytes holds data that jsonb cannot (a \u0000 escape, which
	// PostgreSQL refuses in jsonb: 22P05), base64-encoded, instead of
	// Data. Such an event is valid and would apply once its prerequisite
	// exists (its handler may never store that string), so it must park
	// like any other rather than be dead-lettered for the parking lot's
	// encoding.
	DataBytes   []byte `json:"data_bytes,omitempty"`
	Key         string `json:"key"`
	Strategy    string `json:"strategy"`
	PayloadHash []byte `json:"payload_hash"`
	// The producer's trace context, so a released event's trace continues.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
}

// MarshalParked encodes ev for parked_events.event.
func MarshalParked(ev event.Event) ([]byte, error) {
	p := parkedEvent{Source: ev.Source, ID: ev.ID, Type: ev.Type, Subject: ev.Subject, Version: ev.Version, Sequence: ev.Sequence,
		Data: ev.Data, Key: ev.Key, Strategy: ev.Strategy, PayloadHash: ev.PayloadHash[:],
		TraceParent: ev.TraceParent, TraceState: ev.TraceState}
	if !ev.Time.IsZero() {
		p.Time = &ev.Time
	}
	if bytes.Contains(ev.Data, []byte(`\u0000`)) {
		p.Data, p.DataBytes = nil, ev.Data
	}
	return json.Marshal(p)
}

// UnmarshalParked decodes parked_events.event.
func UnmarshalParked(b []byte) (event.Event, error) {
	var p parkedEvent
	if err := json.Unmarshal(b, &p); err != nil {
		return event.Event{}, fmt.Errorf("decoding a parked event: %w", err)
	}
	if len(p.PayloadHash) != 32 {
		return event.Event{}, fmt.Errorf("decoding a parked event: payload hash of %d bytes", len(p.PayloadHash))
	}
	ev := event.Event{Source: p.Source, ID: p.ID, Type: p.Type, Subject: p.Subject, Version: p.Version, Sequence: p.Sequence,
		Data: p.Data, Key: p.Key, Strategy: p.Strategy, TraceParent: p.TraceParent, TraceState: p.TraceState}
	if p.Time != nil {
		ev.Time = *p.Time
	}
	if p.DataBytes != nil {
		ev.Data = p.DataBytes
	}
	copy(ev.PayloadHash[:], p.PayloadHash)
	return ev, nil
}
