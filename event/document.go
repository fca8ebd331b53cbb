package event

// Document is a JSON text — an event's Data — checked and indexed by the
// decoder's own parser, for reading values by JSON pointer. No tree of
// values is built: the index costs 16 bytes per object with members and 8
// per member (about a byte per byte of dense data, 3.4 at the very worst),
// and a value read is a position in the text, so a string is decoded, and
// a nested object or array copied, only when asked for. A handler that
// needs a few fields of a large payload pays for the index once, not for
// a Go value per JSON value: a parser that builds one (encoding/json into
// maps, fastjson) costs tens of bytes per value, 20 to 100 times a
// payload of small values, for every record in flight.
//
// Parse an event's data once per handler call (ParseDocument(ev.Data)) and
// read every field from it. A Document is not safe for concurrent use
// while it is being parsed; once parsed, reading it is.
type Document struct {
	d jsonDoc
}

// ParseDocument checks data strictly as JSON (RFC 8259, valid UTF-8,
// nested at most MaxNesting levels) and indexes it. The decoder has
// checked the data of every event it made, so for those ParseDocument
// fails only when the event has no data (a nil Data). A member name that
// repeats in an object is not an error here (the decoder refuses it): Get
// finds the first.
func ParseDocument(data []byte) (*Document, error) {
	doc := &Document{}
	if err := doc.d.parse(data, MaxNesting); err != nil {
		return nil, err
	}
	return doc, nil
}

// Root is the document's top-level value.
func (doc *Document) Root() Value {
	return Value{d: &doc.d, at: doc.d.root}
}

// Get returns the value that the reference tokens of a JSON pointer (RFC
// 6901, unescaped: "a/b" is the tokens "a", "b") reach from the top-level
// value: an object's member by name, an array's element by its decimal
// index. Without tokens it is the top-level value. It reports false when
// there is no such value.
func (doc *Document) Get(tokens ...string) (Value, bool) {
	return doc.Root().Get(tokens...)
}

// Value is one value of a Document: a position in its text. The zero Value
// stands for a value that is absent: its Kind is KindNull, its Raw nil.
type Value struct {
	d  *jsonDoc
	at int
}

// Kind is the JSON type of a value.
type Kind uint8

// The kinds of JSON values.
const (
	KindNull Kind = iota
	KindBool
	KindNumber
	KindString
	KindArray
	KindObject
)

// String names the kind as JSON does: "null", "boolean", "number",
// "string", "array", "object".
func (k Kind) String() string {
	switch k {
	case KindNull:
		return "null"
	case KindBool:
		return "boolean"
	case KindNumber:
		return "number"
	case KindString:
		return "string"
	case KindArray:
		return "array"
	default:
		return "object"
	}
}

// Kind is the value's JSON type.
func (v Value) Kind() Kind {
	if v.d == nil {
		return KindNull
	}
	return v.d.kind(v.at)
}

// Raw returns the value's JSON text as it was written: a sub-slice of the
// document's data, not a copy, valid as long as the data is and never to
// be modified. It is what a jsonb column takes: no value is re-serialised.
func (v Value) Raw() []byte {
	if v.d == nil {
		return nil
	}
	return v.d.raw(v.at)
}

// Text returns a string's decoded text, a number's literal as written, or
// "true" or "false"; "" for null, arrays and objects. A lone surrogate
// escape decodes to U+FFFD.
func (v Value) Text() string {
	if v.d == nil {
		return ""
	}
	return v.d.text(v.at)
}

// Get returns the value the reference tokens reach from v, as
// Document.Get does from the top-level value.
func (v Value) Get(tokens ...string) (Value, bool) {
	if v.d == nil {
		return Value{}, false
	}
	at, ok := v.d.lookup(v.at, tokens)
	if !ok {
		return Value{}, false
	}
	return Value{d: v.d, at: at}, true
}
