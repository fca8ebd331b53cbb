package event

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Key strategies: how a topic derives the dedupe key of its events.
const (
	// StrategyCloudEvents keys an event by its CloudEvents (source, id),
	// which the spec makes unique per distinct event.
	StrategyCloudEvents = "cloudevents"
	// StrategyField keys an event by one provider ID field of its payload.
	StrategyField = "field"
	// StrategyNatural keys an event by a combination of payload fields that
	// identifies the work (a natural key).
	StrategyNatural = "natural"
	// StrategyContentHash keys an event by the hash of its canonical
	// content. The last resort: distinct events with identical content
	// collide and all but the first are dropped as duplicates.
	StrategyContentHash = "content-hash"
)

// MaxKeyBytes bounds the length of a dedupe key. A derived key that is
// longer, or that contains a control character, is replaced by
// "sha256:" + the hex SHA-256 of it; no other key starts with "sha256:".
const MaxKeyBytes = 512

// The key formats. <source> is the event's Source (for format json, the
// topic), length-prefixed so that no choice of source and value can make two
// distinct pairs spell the same key:
//
//	cloudevents   ce:<len(source)>:<source>:<id>
//	field         field:<len(source)>:<source>:<value>
//	natural       natural:<len(source)>:<source>:<hex SHA-256 of the canonical JSON array of the values>
//	content-hash  content:<len(source)>:<source>:<hex PayloadHash>
//	position      position:<len(source)>:<source>:<lsn>:<row key>
//
// Keys are unique database-wide, so the three payload strategies are scoped
// by source too: two providers' webhook topics may well both number their
// events 1, 2, 3.
func scopedKey(prefix, source, value string) string {
	var b strings.Builder
	b.Grow(len(prefix) + len(source) + len(value) + 8)
	b.WriteString(prefix)
	b.WriteByte(':')
	b.WriteString(strconv.Itoa(len(source)))
	b.WriteByte(':')
	b.WriteString(source)
	b.WriteByte(':')
	b.WriteString(value)
	return b.String()
}

// boundKey applies MaxKeyBytes and keeps keys printable (a NUL would not even
// fit a PostgreSQL text column).
func boundKey(k string) string {
	if len(k) <= MaxKeyBytes && !hasControl(k) {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// deriveKey sets ev.Key and ev.Strategy. payload is what key pointers resolve
// against in doc: the data of a CloudEvent, the whole value for format json;
// -1 when the event has no data. ev.PayloadHash must be set.
func (d *Decoder) deriveKey(ev *Event, doc *jsonDoc, payload int) error {
	var k string
	switch d.strategy {
	case StrategyCloudEvents:
		k = scopedKey("ce", ev.Source, ev.ID)
	case StrategyField:
		v, err := keyValue(doc, payload, d.keyPointer)
		if err != nil {
			return err
		}
		if doc.kind(v) == KindString {
			k = scopedKey("field", ev.Source, doc.str(v))
		} else {
			k = scopedKey("field", ev.Source, doc.integer(v))
		}
	case StrategyNatural:
		w := canonWriter{doc: doc, b: []byte{'['}}
		for i, p := range d.natural {
			v, err := keyValue(doc, payload, p)
			if err != nil {
				return err
			}
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.value(v)
		}
		w.b = append(w.b, ']')
		sum := sha256.Sum256(w.b)
		k = scopedKey("natural", ev.Source, hex.EncodeToString(sum[:]))
	case StrategyContentHash:
		k = scopedKey("content", ev.Source, hex.EncodeToString(ev.PayloadHash[:]))
	case StrategyPosition:
		k = scopedKey("position", ev.Source, ev.ID)
	}
	ev.Key = boundKey(k)
	ev.Strategy = d.strategy
	return nil
}

// keyValue resolves a key pointer of strategy field or natural. A key value
// is a non-empty string or an integer written without fraction or exponent
// (kept digit for digit, so large provider IDs never round together). A
// fraction, a boolean, null, an array or an object is more likely a wrong
// pointer than an identity, and is refused.
func keyValue(doc *jsonDoc, payload int, p *pointer) (int, error) {
	if payload < 0 {
		return 0, decodeErr(ReasonMissingKeyField, "key pointer %s: the event has no data", Excerpt(p.text))
	}
	v, found := doc.resolve(p, payload)
	switch {
	case !found:
		return 0, decodeErr(ReasonMissingKeyField, "key pointer %s: not found", Excerpt(p.text))
	case doc.kind(v) == KindString && doc.data[v+1] != '"':
		return v, nil
	case doc.isInteger(v):
		return v, nil
	case doc.kind(v) == KindString:
		return 0, decodeErr(ReasonMissingKeyField, "key pointer %s: empty string", Excerpt(p.text))
	default:
		return 0, decodeErr(ReasonMissingKeyField, "key pointer %s: found %s %s, want a non-empty string or an integer",
			Excerpt(p.text), article(doc.kind(v)), Excerpt(doc.head(v)))
	}
}

func article(k Kind) string {
	switch k {
	case KindArray, KindObject:
		return "an " + k.String()
	default:
		return "a " + k.String()
	}
}

// payloadHash computes Event.PayloadHash: the SHA-256 of the RFC 8785
// canonical JSON of {"data","resourceversion","subject","type"} (members in
// canonical order), data being the value at offset data in doc; -1 stands
// for JSON null. The canonical form is streamed into the hash, never held
// whole. branches, when not "", are the Avro union branches the data does
// not show (Wire.unionBranches), hashed as a first member
// "avro_union_branches".
func payloadHash(typ, subject string, version int64, doc *jsonDoc, data int, branches string) [32]byte {
	w := newHashWriter(doc)
	defer w.release()
	w.b = append(w.b, '{')
	if branches != "" {
		w.b = append(w.b, `"avro_union_branches":`...)
		w.b = appendCanonicalString(w.b, branches)
		w.b = append(w.b, ',')
	}
	w.b = append(w.b, `"data":`...)
	if data < 0 {
		w.b = append(w.b, "null"...)
	} else {
		w.value(data)
	}
	w.b = append(w.b, `,"resourceversion":`...)
	w.b = strconv.AppendInt(w.b, version, 10)
	w.b = append(w.b, `,"subject":`...)
	w.b = appendCanonicalString(w.b, subject)
	w.b = append(w.b, `,"type":`...)
	w.b = appendCanonicalString(w.b, typ)
	w.b = append(w.b, '}')
	return w.digest()
}

// pointer is a parsed JSON pointer (RFC 6901).
type pointer struct {
	text   string
	tokens []string
}

// parsePointer parses an RFC 6901 JSON pointer: "" for the whole document,
// else "/"-separated reference tokens in which "~1" stands for "/" and "~0"
// for "~".
func parsePointer(s string) (*pointer, error) {
	if !utf8.ValidString(s) {
		return nil, errors.New("not valid UTF-8")
	}
	if s == "" {
		return &pointer{}, nil
	}
	if s[0] != '/' {
		return nil, errors.New("must be empty or start with '/'")
	}
	p := &pointer{text: s}
	for _, tok := range strings.Split(s[1:], "/") {
		for i := 0; i < len(tok); i++ {
			if tok[i] == '~' && (i+1 == len(tok) || (tok[i+1] != '0' && tok[i+1] != '1')) {
				return nil, errors.New("'~' must be followed by '0' or '1'")
			}
		}
		// ~1 first: "~01" is "~1", not "/".
		tok = strings.ReplaceAll(tok, "~1", "/")
		tok = strings.ReplaceAll(tok, "~0", "~")
		p.tokens = append(p.tokens, tok)
	}
	return p, nil
}

// arrayIndex parses an RFC 6901 array index: "0" or digits without a leading
// zero. "-" (past the end) never refers to a value.
func arrayIndex(tok string) (int, bool) {
	if tok == "" || len(tok) > 9 || (len(tok) > 1 && tok[0] == '0') {
		return 0, false
	}
	n := 0
	for i := 0; i < len(tok); i++ {
		if tok[i] < '0' || tok[i] > '9' {
			return 0, false
		}
		n = n*10 + int(tok[i]-'0')
	}
	return n, true
}
