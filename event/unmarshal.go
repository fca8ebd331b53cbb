package event

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hamba/avro/v2"
	"google.golang.org/protobuf/proto"
)

// Unmarshal decodes the event's data into v, a type a team generated or
// wrote for it:
//
//   - Avro: the payload, with the writer's schema, into a struct whose
//     fields carry `avro:"name"` tags (hamba/avro: fields the struct lacks
//     are skipped, so a type generated from an older or newer version of
//     the schema reads what it shares with the writer's);
//   - Protobuf: the payload into v, a proto.Message of the record's
//     message type (generated code, or a dynamic message);
//   - JSON formats and JSON Schema: Data with encoding/json.
//
// Data, the JSON form, stays the generic value of every format.
func (ev Event) Unmarshal(v any) error {
	w := ev.Wire
	if w == nil || w.Format == FormatJSONSchema {
		if ev.Data == nil {
			return errors.New("the event has no data")
		}
		return json.Unmarshal(ev.Data, v)
	}
	switch {
	case w.schema == nil:
		return errors.New("the event's Wire was not made by a Decoder: its schema is unknown")
	case w.schema.avro != nil:
		if err := avro.Unmarshal(w.schema.avro.schema, w.Payload, v); err != nil {
			return fmt.Errorf("unmarshaling schema %d's Avro payload into %T: %w", w.SchemaID, v, err)
		}
		return nil
	case w.schema.proto != nil:
		m, ok := v.(proto.Message)
		if !ok {
			return fmt.Errorf("a Protobuf payload unmarshals into a proto.Message, not %T", v)
		}
		md, err := w.schema.proto.message(w.MessageIndexes)
		if err != nil {
			return err
		}
		if got := m.ProtoReflect().Descriptor().FullName(); got != md.FullName() {
			return fmt.Errorf("the record is a %s message, not a %s", md.FullName(), got)
		}
		return proto.Unmarshal(w.Payload, m)
	}
	return fmt.Errorf("unknown wire format %q", w.Format)
}
