package event

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"mime"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Topic formats.
const (
	// FormatCloudEvents: CloudEvents 1.0 in JSON structured mode or Kafka
	// binary mode.
	FormatCloudEvents = "cloudevents"
	// FormatJSON: a provider's JSON (webhook payloads), mapped to events by
	// JSON pointers.
	FormatJSON = "json"
)

// DecoderConfig configures the decoding of one topic.
//
// JSON pointers (RFC 6901) resolve against the event's data for format
// cloudevents (the same in structured and binary mode) and against the whole
// value for format json. An empty pointer means "not set".
type DecoderConfig struct {
	// Topic is the topic's name. Format json uses it as the events' Source.
	Topic string
	// Format is FormatCloudEvents (the default when empty), FormatJSON, or
	// a registry format: FormatAvro, FormatProtobuf, FormatJSONSchema.
	//
	// A registry format's payload, decoded to JSON (see [Wire]), is mapped
	// to the event like format json's, by the pointers below, when
	// TypePointer is set; without it, every record must be a CloudEvent in
	// Kafka binary mode (ce_ headers; the value is the event's data in the
	// wire format, whatever its content-type says).
	Format string
	// Registry is where a registry format's schemas are fetched (required
	// for those formats). For format debezium it is optional: with it,
	// change events in the wire format (a registry converter's) are read
	// beside JSON ones.
	Registry SchemaRegistry
	// KeyStrategy is StrategyCloudEvents (the default for format
	// cloudevents, and invalid for format json, whose events have no
	// CloudEvents id), StrategyField, StrategyNatural or StrategyContentHash.
	KeyStrategy string
	// KeyPointer points at the provider ID field, for strategy field. The
	// field is a non-empty string or an integer; "42" and 42 give the same
	// key.
	KeyPointer string
	// NaturalKey points at the fields that together identify the work, for
	// strategy natural; each is a non-empty string or an integer.
	NaturalKey []string
	// IDPointer points at the event ID, for format json (optional: without
	// it the event's ID is its Key). A non-empty string or an integer.
	IDPointer string
	// TypePointer points at the event type, for format json (required). A
	// non-empty string.
	TypePointer string
	// SubjectPointer points at the resource ID, for format json (required).
	// A non-empty string or an integer; it must equal the record key.
	SubjectPointer string
	// VersionPointer points at the resource version, for format json
	// (optional). Where it finds nothing or null the event is relative
	// (Version 0); anything else must be an integer ≥ 1.
	VersionPointer string
	// MaxPayloadBytes refuses larger record values, and keys, with
	// ReasonTooLarge; 0 means no limit.
	MaxPayloadBytes int
	// RequireSubject, for format cloudevents, dead-letters an event without
	// a subject (ReasonMissingSubject) instead of taking its resource ID
	// from the partitionkey extension or the record key.
	RequireSubject bool
}

// Decoder decodes and validates the records of one topic and derives their
// dedupe keys. It is safe for concurrent use.
type Decoder struct {
	topic      string
	format     string
	strategy   string
	keyPointer *pointer
	natural    []*pointer
	idPtr      *pointer
	typePtr    *pointer
	subjectPtr *pointer
	versionPtr *pointer
	maxBytes   int
	requireSub bool
	warnings   []string
	registry   *registryDecoder
}

// NewDecoder validates cfg and returns a decoder for its topic. Its errors
// name the setting at fault and the fix.
func NewDecoder(cfg DecoderConfig) (*Decoder, error) {
	if cfg.Topic == "" {
		return nil, errors.New("topic: must not be empty")
	}
	d := &Decoder{topic: cfg.Topic, format: cfg.Format, strategy: cfg.KeyStrategy, maxBytes: cfg.MaxPayloadBytes, requireSub: cfg.RequireSubject}
	if d.format == "" {
		d.format = FormatCloudEvents
	}
	if cfg.MaxPayloadBytes < 0 {
		return nil, fmt.Errorf("topic %s: max payload bytes %d: must be 0 (no limit) or more", cfg.Topic, cfg.MaxPayloadBytes)
	}
	var err error
	ptr := func(name, s string) *pointer {
		if err != nil || s == "" {
			return nil
		}
		p, perr := parsePointer(s)
		if perr != nil {
			err = fmt.Errorf("topic %s: %s %q is not a JSON pointer (RFC 6901): %w", cfg.Topic, name, s, perr)
		}
		return p
	}
	switch d.format {
	case FormatCloudEvents:
		if d.strategy == "" {
			d.strategy = StrategyCloudEvents
		}
		for _, f := range [...]struct{ name, value string }{
			{"id pointer", cfg.IDPointer}, {"type pointer", cfg.TypePointer},
			{"subject pointer", cfg.SubjectPointer}, {"version pointer", cfg.VersionPointer},
		} {
			if f.value != "" {
				return nil, fmt.Errorf("topic %s: %s is only for format %q; CloudEvents carry their own attributes: remove it or set format %q",
					cfg.Topic, f.name, FormatJSON, FormatJSON)
			}
		}
	case FormatJSON, FormatAvro, FormatProtobuf, FormatJSONSchema:
		if isRegistryFormat(d.format) {
			if cfg.Registry == nil {
				return nil, fmt.Errorf("topic %s: format %q needs a schema registry: set schema_registry.url", cfg.Topic, d.format)
			}
			d.registry = newRegistryDecoder(d.format, cfg.Registry)
			if cfg.TypePointer == "" {
				// CloudEvents binary mode: the attributes are headers.
				if d.strategy == "" {
					d.strategy = StrategyCloudEvents
				}
				for _, f := range [...]struct{ name, value string }{
					{"id pointer", cfg.IDPointer}, {"subject pointer", cfg.SubjectPointer}, {"version pointer", cfg.VersionPointer},
				} {
					if f.value != "" {
						return nil, fmt.Errorf("topic %s: format %q maps its events by pointers only with a type pointer; without one its records are CloudEvents in binary mode: set type_pointer or remove the %s", cfg.Topic, d.format, f.name)
					}
				}
				break
			}
		}
		if d.strategy == "" || d.strategy == StrategyCloudEvents {
			return nil, fmt.Errorf("topic %s: format %q with pointers needs key strategy %q, %q or %q (its events have no CloudEvents id)",
				cfg.Topic, d.format, StrategyField, StrategyNatural, StrategyContentHash)
		}
		if cfg.TypePointer == "" {
			return nil, fmt.Errorf("topic %s: format %q needs a type pointer (the event type handlers are registered by)", cfg.Topic, FormatJSON)
		}
		if cfg.SubjectPointer == "" {
			return nil, fmt.Errorf("topic %s: format %q needs a subject pointer (the resource ID, equal to the record key)", cfg.Topic, d.format)
		}
		d.idPtr = ptr("id pointer", cfg.IDPointer)
		d.typePtr = ptr("type pointer", cfg.TypePointer)
		d.subjectPtr = ptr("subject pointer", cfg.SubjectPointer)
		d.versionPtr = ptr("version pointer", cfg.VersionPointer)
	case FormatDebezium:
		if d.strategy == "" {
			d.strategy = StrategyPosition
		}
		if cfg.Registry != nil {
			// Change events written by a registry converter (Avro,
			// Protobuf, JSON Schema) beside JSON ones.
			d.registry = newRegistryDecoder(FormatDebezium, cfg.Registry)
		}
		if d.strategy != StrategyPosition {
			return nil, fmt.Errorf("topic %s: format %q keys its events by their position in the source's log: key strategy %q (or none), not %q",
				cfg.Topic, FormatDebezium, StrategyPosition, d.strategy)
		}
		for _, f := range [...]struct{ name, value string }{
			{"id pointer", cfg.IDPointer}, {"type pointer", cfg.TypePointer},
			{"subject pointer", cfg.SubjectPointer}, {"version pointer", cfg.VersionPointer},
		} {
			if f.value != "" {
				return nil, fmt.Errorf("topic %s: %s: format %q maps every change event the same way (the row key, the log position, the table and op): remove it",
					cfg.Topic, f.name, FormatDebezium)
			}
		}
	default:
		return nil, fmt.Errorf("topic %s: format %q: must be %q, %q, %q, %q, %q or %q", cfg.Topic, cfg.Format,
			FormatCloudEvents, FormatJSON, FormatAvro, FormatProtobuf, FormatJSONSchema, FormatDebezium)
	}
	if cfg.Registry != nil && d.registry == nil {
		return nil, fmt.Errorf("topic %s: a schema registry is only for formats %q, %q, %q and %q", cfg.Topic, FormatAvro, FormatProtobuf, FormatJSONSchema, FormatDebezium)
	}
	switch d.strategy {
	case StrategyCloudEvents, StrategyContentHash, StrategyPosition:
	case StrategyField:
		if cfg.KeyPointer == "" {
			return nil, fmt.Errorf("topic %s: key strategy %q needs a key pointer to the provider ID field", cfg.Topic, StrategyField)
		}
	case StrategyNatural:
		if len(cfg.NaturalKey) == 0 {
			return nil, fmt.Errorf("topic %s: key strategy %q needs at least one natural key pointer", cfg.Topic, StrategyNatural)
		}
	default:
		return nil, fmt.Errorf("topic %s: key strategy %q: must be %q, %q, %q or %q", cfg.Topic, cfg.KeyStrategy,
			StrategyCloudEvents, StrategyField, StrategyNatural, StrategyContentHash)
	}
	if cfg.KeyPointer != "" && d.strategy != StrategyField {
		return nil, fmt.Errorf("topic %s: a key pointer is only for key strategy %q: remove it or change the strategy", cfg.Topic, StrategyField)
	}
	if len(cfg.NaturalKey) > 0 && d.strategy != StrategyNatural {
		return nil, fmt.Errorf("topic %s: natural key pointers are only for key strategy %q: remove them or change the strategy", cfg.Topic, StrategyNatural)
	}
	d.keyPointer = ptr("key pointer", cfg.KeyPointer)
	seen := make(map[string]bool)
	for i, s := range cfg.NaturalKey {
		if s == "" {
			return nil, fmt.Errorf("topic %s: natural key pointer %d is empty: point at a field", cfg.Topic, i+1)
		}
		if seen[s] {
			return nil, fmt.Errorf("topic %s: natural key pointer %q is listed twice", cfg.Topic, s)
		}
		seen[s] = true
		d.natural = append(d.natural, ptr("natural key pointer", s))
	}
	if err != nil {
		return nil, err
	}
	if d.strategy == StrategyContentHash {
		d.warnings = append(d.warnings, fmt.Sprintf(
			"topic %s uses key strategy content-hash: distinct events with identical content will collide and be treated as duplicates", d.topic))
	}
	return d, nil
}

// Warnings returns what an operator should hear about the configuration at
// start-up (the content-hash strategy's collision risk).
func (d *Decoder) Warnings() []string {
	return append([]string(nil), d.warnings...)
}

// Decode decodes r into an Event. Its errors are *DecodeError: permanent,
// with one Reason per kind of bad input. Checks run from the outside in: the
// value's size and encoding, the headers, the JSON, the envelope and its
// attributes, the data, the key; the first failure is reported.
//
// Format cloudevents: binary mode when a ce_specversion header is present,
// unless a content-type header declares application/cloudevents (then
// structured mode, and ce_ headers are ignored); ce_ headers without
// ce_specversion are ReasonMissingBinaryHeaders; otherwise structured mode.
// The headers Decode reads must be valid UTF-8; others are ignored (retry or
// attempt counters a client may add change nothing).
func (d *Decoder) Decode(r Record) (Event, error) {
	return d.DecodeContext(context.Background(), r)
}

// DecodeContext is Decode with a context for the schema registry's
// requests (registry formats). An error wrapping
// ErrSchemaRegistryUnavailable is not the record's fault and not
// permanent: decode the record again later.
func (d *Decoder) DecodeContext(ctx context.Context, r Record) (Event, error) {
	ev, err := d.decode(ctx, r)
	if err != nil {
		return Event{}, err
	}
	ev.RecordTime = r.Timestamp
	return ev, nil
}

func (d *Decoder) decode(ctx context.Context, r Record) (Event, error) {
	switch {
	case d.maxBytes > 0 && len(r.Key) > d.maxBytes:
		// A key is decoded too (a wire-format key through the registry,
		// a key strategy's pointer): the same bound.
		return Event{}, decodeErr(ReasonTooLarge, "the record key has %d bytes, more than the limit of %d", len(r.Key), d.maxBytes)
	case d.format == FormatDebezium && d.maxBytes > 0 && len(r.Value) > d.maxBytes:
		return Event{}, decodeErr(ReasonTooLarge, "the record value has %d bytes, more than the limit of %d", len(r.Value), d.maxBytes)
	case d.format == FormatDebezium:
		return d.decodeDebezium(ctx, r)
	case len(r.Value) == 0:
		return Event{}, decodeErr(ReasonEmptyValue, "the record value is empty (a tombstone?)")
	case d.maxBytes > 0 && len(r.Value) > d.maxBytes:
		return Event{}, decodeErr(ReasonTooLarge, "the record value has %d bytes, more than the limit of %d", len(r.Value), d.maxBytes)
	case d.registry != nil:
		return d.decodeRegistry(ctx, r)
	case !utf8.Valid(r.Value):
		return Event{}, decodeErr(ReasonInvalidUTF8, "the record value is not valid UTF-8 at byte %d", invalidUTF8Offset(r.Value))
	}
	if d.format == FormatJSON {
		return d.decodeJSON(r)
	}
	ct, hasCT, err := contentType(r.Headers)
	if err != nil {
		return Event{}, err
	}
	if hasCT && strings.HasPrefix(ct, "application/cloudevents") {
		if ct != "application/cloudevents+json" {
			return Event{}, decodeErr(ReasonNotCloudEvents, "content-type %s: only application/cloudevents+json (one event in JSON) is supported", Excerpt(ct))
		}
		return d.decodeStructured(r)
	}
	hasCE, hasSpec := ceHeaders(r.Headers)
	switch {
	case hasSpec:
		return d.decodeBinary(r, ct, hasCT)
	case hasCE:
		return Event{}, decodeErr(ReasonMissingBinaryHeaders, "the record has ce_ headers but no ce_specversion: send all of ce_specversion, ce_id, ce_source, ce_type and ce_subject, or none")
	default:
		return d.decodeStructured(r)
	}
}

// MaxDataBytes is the most bytes of data decoding r can build: the
// Event.Data of r, and while it decodes, the JSON of its key. A value or
// key in the Confluent wire format (a registry format's, or a Debezium
// change's through a registry) becomes JSON of at most 16 times its bytes
// plus 64 KiB; other formats' data is taken from the record's value,
// about its length at most. A pipeline that holds many decoded records
// at once can reserve this much before it decodes r.
func (d *Decoder) MaxDataBytes(r Record) int {
	n := len(r.Value)
	if d.registry == nil || (d.maxBytes > 0 && (len(r.Value) > d.maxBytes || len(r.Key) > d.maxBytes)) {
		return n // refused before it decodes
	}
	if isWireFormat(r.Value) {
		n = maxExpansion*len(r.Value) + maxExpansionSlack
	}
	if isWireFormat(r.Key) {
		n += maxExpansion*len(r.Key) + maxExpansionSlack
	}
	return n
}

// data is the event's copy of r's value: the value itself when the
// decoder made it (a registry format's JSON), else a copy (the record's
// bytes belong to the caller).
func (r Record) data() []byte {
	if r.wire != nil {
		return r.Value
	}
	return bytes.Clone(r.Value)
}

// maxExpansion bounds the JSON a registry format's payload may decode to:
// this many times its bytes, plus maxExpansionSlack. Binary encodings are
// denser than JSON (field names, quotes, digits), but an array of a
// billion nulls takes a few bytes: the bound keeps a record's memory a
// multiple of its size.
const (
	maxExpansion      = 16
	maxExpansionSlack = 64 << 10
)

// decodeRegistry decodes a record of a registry format: the payload to
// JSON, then the envelope from the pointers (as format json) or from the
// CloudEvents binary-mode headers.
//
// A record key in the wire format (a registry serializer's, as Kafka
// Connect's and most producers' key converters write) is decoded too, and
// compared and claimed as its text (keyText): a string key as the string,
// a record of one field as that field's value.
func (d *Decoder) decodeRegistry(ctx context.Context, r Record) (Event, error) {
	js, wire, err := d.registry.transcode(ctx, "value", r.Value, maxExpansion*len(r.Value)+maxExpansionSlack)
	if err != nil {
		return Event{}, err
	}
	if isWireFormat(r.Key) {
		// A key that does not decode as the wire format (a plain
		// serializer's bytes that start with zero) stays as it is.
		kjs, _, err := d.wirePart(ctx, "record key", r.Key)
		if err != nil && !IsPermanent(err) {
			return Event{}, err
		}
		if err == nil {
			if pd, err := parseDocument(kjs, MaxNesting); err == nil && len(pd.d.issues) == 0 {
				r.Key = []byte(keyText(&pd.d, pd.d.root))
			}
		}
	}
	r.Value, r.wire = js, wire
	if d.typePtr != nil {
		return d.decodeJSON(r)
	}
	return d.decodeRegistryBinary(r)
}

// decodeRegistryBinary reads the attributes of a registry format's record
// from its ce_ headers. Its content-type (application/avro, or none)
// describes the wire bytes, not the JSON they became, so it is not the
// event's datacontenttype.
func (d *Decoder) decodeRegistryBinary(r Record) (Event, error) {
	hasCE, hasSpec := ceHeaders(r.Headers)
	switch {
	case hasSpec:
		return d.decodeBinary(r, "", false)
	case hasCE:
		return Event{}, decodeErr(ReasonMissingBinaryHeaders, "the record has ce_ headers but no ce_specversion: send all of ce_specversion, ce_id, ce_source, ce_type and ce_subject, or none")
	default:
		return Event{}, decodeErr(ReasonMissingBinaryHeaders, "the record has no ce_ headers, and topic %s maps no type pointer: send CloudEvents binary-mode headers, or set the topic's type_pointer and subject_pointer", Excerpt(d.topic))
	}
}

// ceHeaders reports whether headers has ce_ headers, and ce_specversion.
func ceHeaders(headers []Header) (hasCE, hasSpec bool) {
	for _, h := range headers {
		if name, ok := strings.CutPrefix(h.Key, "ce_"); ok {
			hasCE = true
			hasSpec = hasSpec || name == "specversion"
		}
	}
	return hasCE, hasSpec
}

// notJSON is the DecodeError of a parse failure of what: ReasonNotJSON,
// or ReasonNestingTooDeep for JSON that nests deeper than MaxNesting.
func notJSON(what string, err error) error {
	var se *syntaxError
	if errors.As(err, &se) && se.tooDeep {
		return decodeErr(ReasonNestingTooDeep, "%s nests arrays and objects deeper than %d levels (at byte %d)", what, MaxNesting, se.off)
	}
	return decodeErr(ReasonNotJSON, "%s is not JSON: %v", what, err)
}

// contentType returns the media type of the first content-type header
// (lowercased, parameters dropped).
func contentType(headers []Header) (string, bool, error) {
	for _, h := range headers {
		if !strings.EqualFold(h.Key, "content-type") {
			continue
		}
		if !utf8.Valid(h.Value) {
			return "", false, decodeErr(ReasonInvalidUTF8, "header content-type is not valid UTF-8")
		}
		mt, _, err := mime.ParseMediaType(string(h.Value))
		if err != nil {
			// Not a media type at all: keep it for the JSON check to refuse.
			mt = strings.ToLower(strings.TrimSpace(string(h.Value)))
		}
		return mt, true, nil
	}
	return "", false, nil
}

// isJSONMediaType reports whether data of media type mt is JSON.
func isJSONMediaType(mt string) bool {
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

// attribute is one CloudEvents attribute as found in the envelope: a JSON
// value in structured mode, a header (always a string) in binary mode.
type attribute struct {
	present bool
	kind    Kind
	text    string // decoded string, number literal or "true"/"false"
	raw     []byte // the start of the JSON text (the header value), for messages
}

// attributes are an event's attributes by name, in the order found: a
// handful, looked up by a dozen fixed names, for which a slice does better
// than a map. Names are unique (the decoder refuses a repeated one).
type attributes []namedAttribute

type namedAttribute struct {
	// name is a sub-slice of the record where it can be.
	name []byte
	attribute
}

// get returns the attribute called name, or the zero attribute.
func (as attributes) get(name string) attribute {
	for i := range as {
		if string(as[i].name) == name {
			return as[i].attribute
		}
	}
	return attribute{}
}

// index returns the position of the attribute called name, or -1.
func (as attributes) index(name string) int {
	for i := range as {
		if string(as[i].name) == name {
			return i
		}
	}
	return -1
}

// head returns enough of b for an excerpt.
func head(b []byte) string {
	return string(b[:min(len(b), excerptBytes+utf8.UTFMax)])
}

func (d *Decoder) decodeStructured(r Record) (Event, error) {
	// The envelope is one level more than its data.
	pd, err := parseDocument(r.Value, MaxNesting+1)
	if err != nil {
		return Event{}, notJSON("the value", err)
	}
	doc := &pd.d
	root := doc.root
	if k := doc.kind(root); k != KindObject {
		return Event{}, decodeErr(ReasonNotCloudEvents, "the value is %s, not a JSON object", article(k))
	}
	if msg, ok := doc.rootIssue(); ok {
		return Event{}, decodeErr(ReasonNotCloudEvents, "the envelope has a %s", msg)
	}
	attrs := make(attributes, 0, 10)
	data := -1
	var base64 bool
	var nameErr error
	// In input order, so that the messages are deterministic.
	doc.eachMember(root, func(nameAt, value int) bool {
		name := doc.strBytes(nameAt)
		kind := doc.kind(value)
		switch string(name) {
		case "data":
			if kind != KindNull {
				data = value
			}
			return true
		case "data_base64":
			base64 = kind != KindNull
			return true
		}
		if !validAttributeName(string(name)) {
			nameErr = decodeErr(ReasonNotCloudEvents, "attribute name %s: CloudEvents attribute names are lowercase letters and digits", Excerpt(string(name)))
			return false
		}
		if kind == KindNull {
			return true // null is absent (CloudEvents JSON format)
		}
		attrs = append(attrs, namedAttribute{name: name, attribute: attribute{present: true, kind: kind, text: doc.text(value), raw: doc.headBytes(value)}})
		return true
	})
	if nameErr != nil {
		return Event{}, nameErr
	}
	if sv := attrs.get("specversion"); !sv.present {
		return Event{}, decodeErr(ReasonNotCloudEvents, "the object has no specversion: not a CloudEvent")
	} else if sv.kind != KindString || sv.text != "1.0" {
		return Event{}, decodeErr(ReasonNotCloudEvents, "specversion %s: only CloudEvents 1.0 is supported", Excerpt(string(sv.raw)))
	}
	// Every member but data, data_base64 and those that are null (which
	// can be neither): in input order.
	for _, a := range attrs {
		if k := a.kind; k == KindArray || k == KindObject {
			return Event{}, decodeErr(ReasonInvalidAttribute, "attribute %s is %s; CloudEvents attributes are strings, numbers or booleans", a.name, article(k))
		}
		if len(doc.issues) == 0 {
			continue
		}
		if msg, ok := doc.memberIssue(string(a.name)); ok {
			return Event{}, decodeErr(ReasonInvalidAttribute, "attribute %s: %s", a.name, msg)
		}
	}
	ev, err := d.envelope(r, attrs, false)
	if err != nil {
		return Event{}, err
	}
	if base64 {
		return Event{}, decodeErr(ReasonUnsupportedData, "data_base64: only JSON data is supported")
	}
	if msg, ok := doc.memberIssue("data"); ok && data >= 0 {
		return Event{}, decodeErr(ReasonInvalidData, "data is not I-JSON: %s", msg)
	}
	if data >= 0 {
		ev.Data = bytes.Clone(doc.raw(data))
	}
	if ev, err = d.finish(ev, doc, data); err != nil {
		return Event{}, err
	}
	if data >= 0 {
		ev.doc = pd.keep(ev.Data, data, data)
	}
	return ev, nil
}

func (d *Decoder) decodeBinary(r Record, ct string, hasCT bool) (Event, error) {
	var attrs attributes
	// Repeated headers are found by a linear search while there are few,
	// by a map beyond.
	const fewHeaders = 16
	var seen map[string]bool
	for _, h := range r.Headers {
		name, ok := strings.CutPrefix(h.Key, "ce_")
		if !ok {
			continue
		}
		if !validAttributeName(name) {
			return Event{}, decodeErr(ReasonNotCloudEvents, "header %s: CloudEvents attribute names are lowercase letters and digits", Excerpt(h.Key))
		}
		if !utf8.Valid(h.Value) {
			return Event{}, decodeErr(ReasonInvalidUTF8, "header %s is not valid UTF-8", h.Key)
		}
		if seen[name] || (seen == nil && attrs.index(name) >= 0) {
			return Event{}, decodeErr(ReasonNotCloudEvents, "header %s appears twice", h.Key)
		}
		attrs = append(attrs, namedAttribute{name: []byte(name), attribute: attribute{present: true, kind: KindString, text: string(h.Value), raw: h.Value}})
		switch {
		case seen != nil:
			seen[name] = true
		case len(attrs) > fewHeaders:
			seen = make(map[string]bool, 2*len(attrs))
			for _, a := range attrs {
				seen[string(a.name)] = true
			}
		}
	}
	if sv := attrs.get("specversion"); sv.text != "1.0" {
		return Event{}, decodeErr(ReasonNotCloudEvents, "header ce_specversion %s: only CloudEvents 1.0 is supported", Excerpt(sv.text))
	}
	// The binding carries the data content type in content-type only.
	if i := attrs.index("datacontenttype"); i >= 0 {
		attrs = append(attrs[:i], attrs[i+1:]...)
	}
	if hasCT {
		attrs = append(attrs, namedAttribute{name: []byte("datacontenttype"), attribute: attribute{present: true, kind: KindString, text: ct, raw: []byte(ct)}})
	}
	ev, err := d.envelope(r, attrs, true)
	if err != nil {
		return Event{}, err
	}
	pd, err := parseDocument(r.Value, MaxNesting)
	if err != nil {
		return Event{}, notJSON("the value (the event's data)", err)
	}
	doc := &pd.d
	if len(doc.issues) > 0 {
		return Event{}, decodeErr(ReasonInvalidData, "data is not I-JSON: %s", doc.issues[0].msg)
	}
	ev.Data, ev.Wire = r.data(), r.wire
	if ev, err = d.finish(ev, doc, doc.root); err != nil {
		return Event{}, err
	}
	ev.doc = pd.keep(ev.Data, 0, doc.root)
	return ev, nil
}

// envelope validates the CloudEvents attributes common to both modes, in
// one fixed order: id, source, type, subject, the subject against the key,
// forbidden characters, time, resourceversion, datacontenttype. In binary mode every attribute is a string, so
// resourceversion arrives as decimal text; in structured mode it must be a
// JSON number.
func (d *Decoder) envelope(r Record, attrs attributes, binary bool) (Event, error) {
	var ev Event
	var err error
	req := func(name string, reason Reason) string {
		if err != nil {
			return ""
		}
		a := attrs.get(name)
		switch {
		case !a.present || (a.kind == KindString && a.text == ""):
			err = decodeErr(reason, "the event has no %s", name)
		case a.kind != KindString:
			err = decodeErr(ReasonInvalidAttribute, "%s %s is %s, not a string", name, Excerpt(string(a.raw)), article(a.kind))
		}
		return a.text
	}
	ev.ID = req("id", ReasonMissingID)
	ev.Source = req("source", ReasonMissingSource)
	ev.Type = req("type", ReasonMissingType)
	if err != nil {
		return Event{}, err
	}
	if err := checkAttributeLengths(ev.ID, ev.Source, ev.Type); err != nil {
		return Event{}, err
	}
	if ev.Subject, err = d.resourceID(attrs, r.Key); err != nil {
		return Event{}, err
	}
	for _, name := range []string{"id", "source", "type", "subject", "partitionkey", "datacontenttype"} {
		if a := attrs.get(name); a.present && a.kind == KindString {
			if err := checkChars(name, a.text); err != nil {
				return Event{}, err
			}
		}
	}
	if a := attrs.get("time"); a.present {
		if a.kind != KindString {
			return Event{}, decodeErr(ReasonInvalidAttribute, "time %s is not an RFC 3339 timestamp", Excerpt(string(a.raw)))
		}
		t, terr := ParseTime(a.text)
		if terr != nil {
			return Event{}, decodeErr(ReasonInvalidAttribute, "time %s is not an RFC 3339 timestamp: %v", Excerpt(string(a.raw)), terr)
		}
		ev.Time = t
	}
	if a := attrs.get("resourceversion"); a.present {
		if !binary && a.kind != KindNumber {
			return Event{}, decodeErr(ReasonInvalidVersion, "resourceversion %s is %s; want an integer ≥ 1", Excerpt(string(a.raw)), article(a.kind))
		}
		if ev.Version, err = parseVersion(a.text); err != nil {
			return Event{}, err
		}
	}
	if a := attrs.get("datacontenttype"); a.present {
		mt := a.text
		if !binary {
			if a.kind != KindString {
				return Event{}, decodeErr(ReasonInvalidAttribute, "datacontenttype %s is %s, not a string", Excerpt(string(a.raw)), article(a.kind))
			}
			if parsed, _, perr := mime.ParseMediaType(mt); perr == nil {
				mt = parsed
			}
		}
		if !isJSONMediaType(strings.ToLower(mt)) {
			return Event{}, decodeErr(ReasonUnsupportedData, "data content type %s: only JSON data is supported", Excerpt(a.text))
		}
	}
	ev.TraceParent, ev.TraceState = traceContext(attrs, r.Headers)
	return ev, nil
}

func (d *Decoder) decodeJSON(r Record) (Event, error) {
	pd, err := parseDocument(r.Value, MaxNesting)
	if err != nil {
		return Event{}, notJSON("the value", err)
	}
	doc := &pd.d
	if len(doc.issues) > 0 {
		return Event{}, decodeErr(ReasonInvalidData, "the payload is not I-JSON: %s", doc.issues[0].msg)
	}
	root := doc.root
	ev := Event{Source: d.topic}
	if d.idPtr != nil {
		if ev.ID, err = field(doc, root, d.idPtr, "id", ReasonMissingID, true); err != nil {
			return Event{}, err
		}
	}
	if ev.Type, err = field(doc, root, d.typePtr, "type", ReasonMissingType, false); err != nil {
		return Event{}, err
	}
	if ev.Subject, err = field(doc, root, d.subjectPtr, "subject", ReasonMissingSubject, true); err != nil {
		return Event{}, err
	}
	// The ID defaults to the key (bounded by MaxKeyBytes) when unmapped.
	if err := checkAttributeLengths(ev.ID, "", ev.Type); err != nil {
		return Event{}, err
	}
	if err := checkResourceIDLength("subject", ev.Subject); err != nil {
		return Event{}, err
	}
	if err := checkSubject(ev.Subject, r.Key); err != nil {
		return Event{}, err
	}
	for _, f := range [...]struct{ name, value string }{{"id", ev.ID}, {"type", ev.Type}, {"subject", ev.Subject}} {
		if err := checkChars(f.name, f.value); err != nil {
			return Event{}, err
		}
	}
	if d.versionPtr != nil {
		if v, ok := doc.resolve(d.versionPtr, root); ok && doc.kind(v) != KindNull {
			if k := doc.kind(v); k == KindString && d.format == FormatProtobuf {
				// Protobuf's JSON writes 64-bit integers as decimal strings.
				if ev.Version, err = parseVersion(doc.str(v)); err != nil {
					return Event{}, err
				}
			} else if k != KindNumber {
				return Event{}, decodeErr(ReasonInvalidVersion, "version %s is %s; want an integer ≥ 1", Excerpt(doc.head(v)), article(k))
			} else if ev.Version, err = parseVersion(string(doc.raw(v))); err != nil {
				return Event{}, err
			}
		}
	}
	ev.Data, ev.Wire = r.data(), r.wire
	ev, err = d.finish(ev, doc, root)
	if err != nil {
		return Event{}, err
	}
	if d.idPtr == nil {
		ev.ID = ev.Key
	}
	ev.TraceParent, ev.TraceState = traceContext(nil, r.Headers)
	ev.doc = pd.keep(ev.Data, 0, root)
	return ev, nil
}

// field reads a required event field of format json through p: a non-empty
// string or, when integers is set, an integer literal.
func field(doc *jsonDoc, root int, p *pointer, name string, reason Reason, integers bool) (string, error) {
	v, found := doc.resolve(p, root)
	var k Kind
	if found {
		k = doc.kind(v)
	}
	switch {
	case !found || k == KindNull || (k == KindString && doc.data[v+1] == '"'):
		return "", decodeErr(reason, "the payload has no %s at %s", name, Excerpt(p.text))
	case k == KindString:
		return doc.str(v), nil
	case integers && doc.isInteger(v):
		return doc.integer(v), nil
	default:
		want := "a non-empty string"
		if integers {
			want += " or an integer"
		}
		return "", decodeErr(ReasonInvalidAttribute, "%s at %s is %s %s; want %s", name, Excerpt(p.text), article(k), Excerpt(doc.head(v)), want)
	}
}

// finish computes the payload hash and the key. payload is the offset of
// the event's data in doc, -1 for none.
func (d *Decoder) finish(ev Event, doc *jsonDoc, payload int) (Event, error) {
	var branches string
	if ev.Wire != nil {
		branches = ev.Wire.unionBranches
	}
	ev.PayloadHash = payloadHash(ev.Type, ev.Subject, ev.Version, doc, payload, branches)
	if err := d.deriveKey(&ev, doc, payload); err != nil {
		return Event{}, err
	}
	return ev, nil
}

// resourceID is the event's resource: its subject, else its partitionkey
// extension (what the CloudEvents Kafka binding keys records by), else the
// record key. Every one of them that is present must name the same
// resource, or the record's partition may not be its resource's.
func (d *Decoder) resourceID(attrs attributes, key []byte) (string, error) {
	var id, from string
	for _, name := range []string{"subject", "partitionkey"} {
		a := attrs.get(name)
		if !a.present || (a.kind == KindString && a.text == "") {
			continue
		}
		if a.kind != KindString {
			return "", decodeErr(ReasonInvalidAttribute, "%s %s is %s, not a string", name, Excerpt(string(a.raw)), article(a.kind))
		}
		switch {
		case from == "":
			id, from = a.text, name
		case a.text != id:
			return "", decodeErr(ReasonSubjectMismatch, "subject %s differs from partitionkey %s", Excerpt(id), Excerpt(a.text))
		}
	}
	if from != "subject" && d.requireSub {
		return "", decodeErr(ReasonMissingSubject, "the event has no subject (the topic requires one: require_subject)")
	}
	if from == "" {
		if len(key) == 0 {
			return "", decodeErr(ReasonMissingSubject, "the event has no subject and no partitionkey, and the record has no key; key records by resource ID")
		}
		if err := checkResourceIDLength("record key", string(key)); err != nil {
			return "", err
		}
		if !utf8.Valid(key) {
			return "", decodeErr(ReasonInvalidUTF8, "the record key, the event's resource ID, is not valid UTF-8 at byte %d", invalidUTF8Offset(key))
		}
		if err := checkChars("record key", string(key)); err != nil {
			return "", err
		}
		return string(key), nil
	}
	if err := checkResourceIDLength(from, id); err != nil {
		return "", err
	}
	if err := checkSubject(id, key); err != nil {
		return "", err
	}
	return id, nil
}

// checkAttributeLengths applies MaxAttributeBytes to an event's id, source
// and type.
func checkAttributeLengths(id, source, typ string) error {
	for _, a := range [...]struct{ name, value string }{{"id", id}, {"source", source}, {"type", typ}} {
		if len(a.value) > MaxAttributeBytes {
			return decodeErr(ReasonAttributeTooLong, "%s %s has %d bytes, more than the limit of %d", a.name, Excerpt(a.value), len(a.value), MaxAttributeBytes)
		}
	}
	return nil
}

// checkResourceIDLength applies MaxResourceIDBytes to the resource ID, found
// in the named attribute (or the record key).
func checkResourceIDLength(name, id string) error {
	if len(id) > MaxResourceIDBytes {
		return decodeErr(ReasonResourceIDTooLong, "%s %s has %d bytes, more than the limit of %d for a resource ID", name, Excerpt(id), len(id), MaxResourceIDBytes)
	}
	return nil
}

// checkSubject requires the subject to equal the record key: records are
// partitioned by key, so a record keyed otherwise may sit in another
// partition than its resource's other events, and its order is unknown.
func checkSubject(subject string, key []byte) error {
	if string(key) == subject {
		return nil
	}
	if len(key) == 0 {
		return decodeErr(ReasonSubjectMismatch, "subject %s but the record has no key; key records by resource ID", Excerpt(subject))
	}
	return decodeErr(ReasonSubjectMismatch, "subject %s differs from the record key %s", Excerpt(subject), Excerpt(string(key)))
}

// parseVersion parses a resourceversion: an integer from 1 to 2^63-1 in
// plain decimal digits, no sign, no leading zero, no fraction or exponent.
func parseVersion(s string) (int64, error) {
	ok := s != "" && s[0] >= '1' && s[0] <= '9'
	for i := 0; ok && i < len(s); i++ {
		ok = s[i] >= '0' && s[i] <= '9'
	}
	if !ok {
		return 0, decodeErr(ReasonInvalidVersion, "resourceversion %s is not an integer ≥ 1 in plain decimal digits", Excerpt(s))
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, decodeErr(ReasonInvalidVersion, "resourceversion %s is larger than 2^63-1", Excerpt(s))
	}
	return v, nil
}

// validAttributeName reports whether name is a CloudEvents attribute name:
// lowercase ASCII letters and digits.
func validAttributeName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// checkChars refuses the characters CloudEvents forbids in strings: control
// characters (which no database column or log line should receive either;
// PostgreSQL text cannot even hold NUL) and noncharacters.
func checkChars(name, s string) error {
	for _, r := range s {
		if isControl(r) || isNoncharacter(r) {
			return decodeErr(ReasonInvalidAttribute, "%s %s contains %U, which CloudEvents strings must not", name, Excerpt(s), r)
		}
	}
	return nil
}

func isControl(r rune) bool {
	return r < 0x20 || (r >= 0x7f && r <= 0x9f)
}

func isNoncharacter(r rune) bool {
	return (r >= 0xfdd0 && r <= 0xfdef) || r&0xfffe == 0xfffe
}

func hasControl(s string) bool {
	for _, r := range s {
		if isControl(r) {
			return true
		}
	}
	return false
}
