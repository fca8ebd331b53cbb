package event

import (
	"cmp"
	"slices"
)

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
// Get an event's data with Event.Document — the decoder's own index when
// it made the event, so the data is not parsed twice — once per handler
// call, and read every field from it. Reading a Document is safe for
// concurrent use.
type Document struct {
	d jsonDoc
}

// ParseDocument checks data strictly as JSON (RFC 8259, valid UTF-8,
// nested at most MaxNesting levels) and indexes it. A member name that
// repeats in an object is not an error here (the decoder refuses it): Get
// finds the first.
func ParseDocument(data []byte) (*Document, error) {
	return parseDocument(data, MaxNesting)
}

func parseDocument(data []byte, maxDepth int) (*Document, error) {
	doc := &Document{}
	if err := doc.d.parse(data, maxDepth); err != nil {
		return nil, err
	}
	return doc, nil
}

// Document returns the event's Data as a Document. For an event the
// decoder made it is the decoder's own index of the data, when that is
// small enough to have been kept with the event (keepMaxData): reading it
// parses nothing again. Otherwise — a large payload, an event made by
// hand or read back from storage, a Data replaced since (a prefetcher's)
// — it is ParseDocument(ev.Data), a parse per call: call it once per
// handler call. The decoder has checked the data of every event it made,
// so for those it fails only when the event has no data (a nil Data).
func (ev Event) Document() (*Document, error) {
	if doc := ev.doc; doc != nil && len(ev.Data) > 0 && len(doc.d.data) == len(ev.Data) && &doc.d.data[0] == &ev.Data[0] {
		return doc, nil
	}
	return ParseDocument(ev.Data)
}

// keepMaxData is the largest Data whose index the decoder keeps with its
// event. The events of a batch live until it commits: kept, every small
// event's data is read without a second parse (the hot path), at most
// twice its size in index for the batch's life; a large record's index —
// up to 3.4 bytes per byte of data — is built only while its handler
// reads it, one at a time per partition.
const keepMaxData = 64 << 10

// size is about the bytes the index holds: its objects and members (16
// and 8 bytes each), all of the document's, which a kept index shares.
func (doc *Document) size() int {
	return 16*cap(doc.d.objects) + 8*cap(doc.d.members)
}

// keep turns the decoder's document into the index of data, the event's
// copy of the text that starts at offset base of the document's and whose
// top-level value is at offset root, and returns it; nil when it is not
// kept: data longer than keepMaxData, or an index over twice the data's
// size (JSON dense with objects and members: it can reach 3.4 times). The decoder is done with the
// document: its offsets are rebased to data's.
func (doc *Document) keep(data []byte, base, root int) *Document {
	d := &doc.d
	if len(data) == 0 || len(data) > keepMaxData {
		return nil
	}
	end := base + len(data)
	byStart := func(o object, at int32) int { return cmp.Compare(o.start, at) }
	lo, _ := slices.BinarySearchFunc(d.objects, int32(base), byStart)
	hi, _ := slices.BinarySearchFunc(d.objects, int32(end), byStart)
	objects := d.objects[lo:hi]
	index := 16 * len(objects)
	for _, o := range objects {
		index += 8 * int(o.n)
	}
	if index > 2*len(data)+64 {
		return nil
	}
	if base != 0 {
		// The objects inside data, and their members' runs (disjoint from
		// the envelope's), move to data's offsets.
		off := int32(base)
		for i := range objects {
			o := &objects[i]
			for j := o.first; j < o.first+o.n; j++ {
				d.members[j].name -= off
				d.members[j].value -= off
			}
			o.start -= off
			o.end -= off
		}
	}
	d.data, d.root, d.objects, d.issues = data, root-base, objects, nil
	return doc
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
