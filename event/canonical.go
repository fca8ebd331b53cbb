package event

import (
	"crypto/sha256"
	"errors"
	"hash"
	"strconv"
	"sync"
	"unicode/utf8"
)

// Canonicalize returns the RFC 8785 (JSON Canonicalization Scheme) form of
// the JSON text data: members sorted by the UTF-16 code units of their names,
// no insignificant whitespace, strings and numbers serialized as ECMAScript's
// JSON.stringify does.
//
// Input that RFC 8785 cannot canonicalise is refused: text that is not JSON
// (RFC 8259) or not UTF-8, and JSON outside I-JSON (RFC 7493): an object that
// repeats a member name, a string escape that leaves a lone surrogate, a
// number beyond the range of an IEEE 754 double. So is JSON that nests
// deeper than MaxNesting, as Decode refuses it.
//
// One extension: an integer written without fraction or exponent beyond
// ±2^53 (say a 64-bit provider ID) keeps its digits instead of being rounded
// to a double. Such numbers are outside I-JSON, where RFC 8785 promises
// nothing; rounding would make distinct IDs canonicalise — and so hash and
// deduplicate — alike. Every I-JSON value canonicalises exactly as the RFC
// says, and the output is a fixed point: Canonicalize of its own output
// returns that output unchanged.
//
// The canonical form is what the payload hash and the content-hash and
// natural keys are computed from, so it must never change for stored data.
func Canonicalize(data []byte) ([]byte, error) {
	doc, err := parseJSON(data, MaxNesting)
	if err != nil {
		return nil, err
	}
	if len(doc.issues) > 0 {
		return nil, errors.New(doc.issues[0].msg)
	}
	w := canonWriter{doc: doc, b: make([]byte, 0, len(data))}
	w.value(doc.root)
	return w.b, nil
}

// canonWriter writes the canonical form of values of a parsed text, from the
// text and its index: nothing is built but the output. With sum set it
// streams the output into a SHA-256 in pieces of about hashChunk bytes, so
// that the whole canonical form never sits in memory.
type canonWriter struct {
	doc *jsonDoc
	b   []byte
	// sum, when set, hashes the output: b holds only what was not hashed
	// yet, h is created at the first flush.
	sum bool
	h   hash.Hash
	// pooled is the pool's buffer b came from (newHashWriter).
	pooled *[]byte
}

// hashChunk is the buffer of a hashing canonWriter.
const hashChunk = 4096

// newHashWriter returns a writer that hashes, with a buffer of hashChunk
// bytes taken from a pool (every record is hashed: the buffer would
// otherwise be the decoder's largest allocation); release returns it.
func newHashWriter(doc *jsonDoc) canonWriter {
	b, _ := hashBuffers.Get().(*[]byte)
	if b == nil {
		buf := make([]byte, 0, hashChunk)
		b = &buf
	}
	return canonWriter{doc: doc, b: (*b)[:0], sum: true, pooled: b}
}

var hashBuffers sync.Pool

// release returns the writer's buffer to the pool, unless it grew past the
// chunk (a single string longer than the chunk is appended whole).
func (w *canonWriter) release() {
	if w.pooled != nil && cap(w.b) <= 2*hashChunk {
		*w.pooled = w.b[:0]
		hashBuffers.Put(w.pooled)
	}
	w.pooled, w.b = nil, nil
}

// flush hashes what the buffer holds once it is about full.
func (w *canonWriter) flush() {
	if w.sum && len(w.b) >= hashChunk-64 {
		w.hashOut()
	}
}

func (w *canonWriter) hashOut() {
	if w.h == nil {
		w.h = sha256.New()
	}
	w.h.Write(w.b)
	w.b = w.b[:0]
}

// digest returns the SHA-256 of everything written.
func (w *canonWriter) digest() [32]byte {
	if w.h == nil {
		return sha256.Sum256(w.b)
	}
	w.hashOut()
	var sum [32]byte
	w.h.Sum(sum[:0])
	return sum
}

// value writes the canonical form of the value at v and returns the offset
// just past it in the text.
func (w *canonWriter) value(v int) int {
	end := w.write(v)
	w.flush()
	return end
}

func (w *canonWriter) write(v int) int {
	d := w.doc
	data := d.data
	switch data[v] {
	case '{':
		o, ok := d.object(v)
		if !ok {
			w.b = append(w.b, "{}"...)
			return skipSpace(data, v+1) + 1
		}
		w.b = append(w.b, '{')
		for i, m := range d.members[o.first : o.first+o.n] {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.str(int(m.name))
			w.b = append(w.b, ':')
			w.value(int(m.value))
		}
		w.b = append(w.b, '}')
		return int(o.end)
	case '[':
		w.b = append(w.b, '[')
		i := skipSpace(data, v+1)
		if data[i] != ']' {
			for {
				i = skipSpace(data, w.value(i))
				if data[i] == ']' {
					break
				}
				w.b = append(w.b, ',')
				i = skipSpace(data, i+1)
			}
		}
		w.b = append(w.b, ']')
		return i + 1
	case '"':
		return w.str(v)
	case 't':
		w.b = append(w.b, "true"...)
		return v + 4
	case 'f':
		w.b = append(w.b, "false"...)
		return v + 5
	case 'n':
		w.b = append(w.b, "null"...)
		return v + 4
	default:
		end := numberEnd(data, v)
		w.b = appendCanonicalNumber(w.b, data[v:end])
		return end
	}
}

// str writes the string whose opening quote is at v as RFC 8785 (and
// JSON.stringify) writes it and returns the offset past its closing quote:
// the two-character escapes for '"', '\\', \b, \f, \n, \r and \t, \u00xx
// (lowercase hex) for the other control characters, everything else as is.
func (w *canonWriter) str(v int) int {
	data := w.doc.data
	w.b = append(w.b, '"')
	i := v + 1
	for {
		// A run of characters written as they are.
		j := i
		for data[j] != '"' && data[j] != '\\' {
			j++
		}
		if w.sum && j-i > hashChunk {
			w.hashOut()
			w.h.Write(data[i:j])
		} else {
			w.b = append(w.b, data[i:j]...)
		}
		if data[j] == '"' {
			w.b = append(w.b, '"')
			w.flush()
			return j + 1
		}
		r, next := nextRune(data, j)
		w.b = appendCanonicalRune(w.b, r)
		i = next
		w.flush()
	}
}

const hexDigits = "0123456789abcdef"

// appendCanonicalRune appends r as a character of a canonical string.
func appendCanonicalRune(b []byte, r rune) []byte {
	switch {
	case r == '"' || r == '\\':
		return append(b, '\\', byte(r))
	case r == '\b':
		return append(b, '\\', 'b')
	case r == '\f':
		return append(b, '\\', 'f')
	case r == '\n':
		return append(b, '\\', 'n')
	case r == '\r':
		return append(b, '\\', 'r')
	case r == '\t':
		return append(b, '\\', 't')
	case r < 0x20:
		return append(b, '\\', 'u', '0', '0', hexDigits[r>>4], hexDigits[r&0xf])
	case r < utf8.RuneSelf:
		return append(b, byte(r))
	default:
		return utf8.AppendRune(b, r)
	}
}

// appendCanonicalString appends s (valid UTF-8) as a canonical string.
func appendCanonicalString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' {
			b = appendCanonicalRune(b, rune(c))
		} else {
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// appendCanonicalNumber appends the canonical form of a valid JSON number
// literal that is within the range of a double. An integer literal (no
// fraction, no exponent) is its own canonical form, "-0" aside: up to ±2^53
// that is exactly what ECMAScript prints for it, and beyond, keeping the
// digits is the extension Canonicalize documents. Any other literal is
// parsed as a double and printed as ECMAScript does. A number beyond the
// range of a double (an I-JSON issue: such a text is never hashed) appends
// nothing.
func appendCanonicalNumber(b, lit []byte) []byte {
	if len(lit) > 300 || !isIntegerLiteral(lit) {
		f, err := parseDouble(string(lit))
		if err != nil {
			return b
		}
		if !isIntegerLiteral(lit) {
			return appendES6(b, f)
		}
	}
	if string(lit) == "-0" {
		return append(b, '0')
	}
	return append(b, lit...)
}

// appendES6 appends a finite double as ECMAScript's Number.prototype.
// toString writes it (ECMA-262 Number::toString), which RFC 8785 prescribes.
// Go's shortest formatting yields the same digits (the shortest that
// round-trip, the closest when there is a choice); only the layout differs.
func appendES6(b []byte, f float64) []byte {
	if f == 0 {
		return append(b, '0') // also for -0
	}
	var buf [32]byte
	s := strconv.AppendFloat(buf[:0], f, 'e', -1, 64) // -d.ddddde±xx
	if s[0] == '-' {
		b = append(b, '-')
		s = s[1:]
	}
	// The digits (the mantissa without its point) and the exponent.
	var digitBuf [24]byte
	digits := digitBuf[:0]
	i := 0
	for ; s[i] != 'e'; i++ {
		if s[i] != '.' {
			digits = append(digits, s[i])
		}
	}
	e := 0
	for _, c := range s[i+2:] {
		e = e*10 + int(c-'0')
	}
	if s[i+1] == '-' {
		e = -e
	}
	k := len(digits)
	n := e + 1 // the decimal point sits after n digits
	switch {
	case k <= n && n <= 21:
		b = append(b, digits...)
		for range n - k {
			b = append(b, '0')
		}
	case 0 < n && n <= 21:
		b = append(b, digits[:n]...)
		b = append(b, '.')
		b = append(b, digits[n:]...)
	case -6 < n && n <= 0:
		b = append(b, '0', '.')
		for range -n {
			b = append(b, '0')
		}
		b = append(b, digits...)
	default:
		b = append(b, digits[0])
		if k > 1 {
			b = append(b, '.')
			b = append(b, digits[1:]...)
		}
		b = append(b, 'e')
		if n-1 >= 0 {
			b = append(b, '+')
		}
		b = strconv.AppendInt(b, int64(n-1), 10)
	}
	return b
}
