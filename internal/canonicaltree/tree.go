// Package canonicaltree is the tree-building RFC 8785 canonicaliser that
// package event used until the streaming one replaced it, kept verbatim as
// a test oracle: the tests and fuzz targets of event (and the workload's
// hash-equality test) check that the streaming implementation yields the
// same canonical bytes, the same payload hashes and the same errors. Nothing
// but tests imports it.
package canonicaltree

import (
	"cmp"
	"crypto/sha256"
	"errors"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxNesting is event.MaxNesting.
const MaxNesting = 128

// Canonicalize is event.Canonicalize as it was.
func Canonicalize(data []byte) ([]byte, error) {
	doc, err := parseJSON(data, MaxNesting)
	if err != nil {
		return nil, err
	}
	if len(doc.issues) > 0 {
		return nil, errors.New(doc.issues[0].msg)
	}
	return doc.root.appendCanonical(make([]byte, 0, len(data))), nil
}

// Issue is an I-JSON violation found by Parse.
type Issue struct {
	Member   string
	InMember bool
	Msg      string
}

// Doc is a parsed JSON text.
type Doc struct {
	doc *jsonDoc
}

// Parse parses data as event's decoder did (maxDepth: MaxNesting for data,
// MaxNesting+1 for a structured envelope). A syntax error is reported with
// its message, offset and whether it is the nesting limit.
func Parse(data []byte, maxDepth int) (*Doc, error) {
	doc, err := parseJSON(data, maxDepth)
	if err != nil {
		return nil, err
	}
	return &Doc{doc: doc}, nil
}

// SyntaxError unpacks an error of Parse.
func SyntaxError(err error) (msg string, off int, tooDeep bool, ok bool) {
	var se *syntaxError
	if !errors.As(err, &se) {
		return "", 0, false, false
	}
	return se.msg, se.off, se.tooDeep, true
}

// Issues returns the document's I-JSON violations, as the decoder saw them.
func (d *Doc) Issues() []Issue {
	out := make([]Issue, 0, len(d.doc.issues))
	for _, is := range d.doc.issues {
		out = append(out, Issue{Member: is.member, InMember: is.inMember, Msg: is.msg})
	}
	return out
}

// Canonical returns the canonical form of the whole document (whatever its
// issues).
func (d *Doc) Canonical() []byte {
	return d.doc.root.appendCanonical(nil)
}

// Resolve resolves the RFC 6901 reference tokens (already unescaped) from
// the root and returns the raw text of the value found, false for none.
func (d *Doc) Resolve(tokens []string) ([]byte, bool) {
	v := &d.doc.root
	for _, tok := range tokens {
		switch v.kind {
		case kindObject:
			v = v.member(tok)
		case kindArray:
			i, ok := arrayIndex(tok)
			if !ok || i >= len(v.elems) {
				return nil, false
			}
			v = &v.elems[i]
		default:
			return nil, false
		}
		if v == nil {
			return nil, false
		}
	}
	return v.raw, true
}

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

// PayloadHash is event's payload hash as it was computed: the SHA-256 of the
// canonical JSON of {data, resourceversion, subject, type}; data nil stands
// for JSON null. It fails where the decoder refused data.
func PayloadHash(typ, subject string, version int64, data []byte) ([32]byte, error) {
	var v *jsonValue
	if data != nil {
		doc, err := parseJSON(data, MaxNesting)
		if err != nil {
			return [32]byte{}, err
		}
		if len(doc.issues) > 0 {
			return [32]byte{}, errors.New(doc.issues[0].msg)
		}
		v = &doc.root
	}
	return payloadHash(typ, subject, version, v), nil
}

func payloadHash(typ, subject string, version int64, data *jsonValue) [32]byte {
	b := make([]byte, 0, 128+len(subject)+len(typ))
	b = append(b, `{"data":`...)
	if data == nil {
		b = append(b, "null"...)
	} else {
		b = data.appendCanonical(b)
	}
	b = append(b, `,"resourceversion":`...)
	v, _ := canonicalNumber(strconv.FormatInt(version, 10))
	b = append(b, v...)
	b = append(b, `,"subject":`...)
	b = appendCanonicalString(b, subject)
	b = append(b, `,"type":`...)
	b = appendCanonicalString(b, typ)
	b = append(b, '}')
	return sha256.Sum256(b)
}

// FormatES6 is the number serialisation as it was.
func FormatES6(f float64) string { return formatES6(f) }

// Excerpt is event.Excerpt (copied: this package must not import event).
func Excerpt(s string) string {
	if len(s) <= excerptBytes {
		return strconv.Quote(s)
	}
	cut := s[:excerptBytes]
	for i := len(cut) - 1; i >= 0 && i >= len(cut)-utf8.UTFMax; i-- {
		if utf8.RuneStart(cut[i]) {
			if !utf8.FullRuneInString(cut[i:]) {
				cut = cut[:i]
			}
			break
		}
	}
	return strconv.Quote(cut) + "..."
}

const excerptBytes = 64

type jsonKind uint8

const (
	kindNull jsonKind = iota
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

func (k jsonKind) String() string {
	switch k {
	case kindNull:
		return "null"
	case kindBool:
		return "boolean"
	case kindNumber:
		return "number"
	case kindString:
		return "string"
	case kindArray:
		return "array"
	default:
		return "object"
	}
}

// jsonValue is one parsed JSON value. The tree keeps what canonicalisation,
// JSON pointers and the envelope need: the decoded strings, the literal and
// canonical text of numbers, members in input order, and the raw bytes.
type jsonValue struct {
	kind jsonKind
	// raw is the value as it appears in the input (a sub-slice of it).
	raw []byte
	// text is the decoded string (kindString), the number literal
	// (kindNumber) or "true"/"false" (kindBool).
	text string
	// canon is the canonical form of a number.
	canon   string
	elems   []jsonValue
	members []jsonMember
}

type jsonMember struct {
	name  string
	value jsonValue
}

// member returns the value of the member called name, or nil.
func (v *jsonValue) member(name string) *jsonValue {
	for i := range v.members {
		if v.members[i].name == name {
			return &v.members[i].value
		}
	}
	return nil
}

// jsonIssue is a violation of I-JSON in otherwise well-formed JSON.
type jsonIssue struct {
	// member is the top-level member the issue lies in, when inMember.
	member   string
	inMember bool
	msg      string
}

// jsonDoc is a parsed JSON text.
type jsonDoc struct {
	root jsonValue
	// issues lists I-JSON violations in input order: at most one per
	// top-level member, at most maxIssues in all. Syntax errors are not
	// issues: they fail the parse.
	issues []jsonIssue
}

// memberIssue returns the first issue inside the top-level member name.
func (d *jsonDoc) memberIssue(name string) (string, bool) {
	for _, is := range d.issues {
		if is.inMember && is.member == name {
			return is.msg, true
		}
	}
	return "", false
}

// rootIssue returns the first issue that lies in no top-level member's value
// (a repeated top-level member name, or anything when the root is no object).
func (d *jsonDoc) rootIssue() (string, bool) {
	for _, is := range d.issues {
		if !is.inMember {
			return is.msg, true
		}
	}
	return "", false
}

const maxIssues = 32

// syntaxError reports text that is not JSON, or (tooDeep) JSON that nests
// deeper than the parse allows.
type syntaxError struct {
	off     int
	msg     string
	tooDeep bool
}

func (e *syntaxError) Error() string {
	return e.msg + " at byte " + strconv.Itoa(e.off)
}

type jsonParser struct {
	data     []byte
	pos      int
	depth    int
	maxDepth int
	member   string
	inMember bool
	issues   []jsonIssue
}

// parseJSON parses data strictly by RFC 8259. Syntax errors (including
// invalid UTF-8) fail it, and so does nesting deeper than maxDepth (a
// syntaxError with tooDeep set, found as soon as the parser gets there);
// I-JSON violations are collected in the document's issues and parsing goes
// on, so that a syntax error later in the text still wins.
func parseJSON(data []byte, maxDepth int) (*jsonDoc, error) {
	if !utf8.Valid(data) {
		return nil, &syntaxError{off: invalidUTF8Offset(data), msg: "invalid UTF-8"}
	}
	p := &jsonParser{data: data, maxDepth: maxDepth}
	p.skipSpace()
	root, err := p.value()
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos != len(p.data) {
		return nil, p.syntax("unexpected data after the top-level value")
	}
	return &jsonDoc{root: root, issues: p.issues}, nil
}

func invalidUTF8Offset(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(b)
}

func (p *jsonParser) syntax(msg string) error {
	return &syntaxError{off: p.pos, msg: msg}
}

func (p *jsonParser) issue(msg string) {
	if len(p.issues) >= maxIssues {
		return
	}
	if n := len(p.issues); p.inMember && n > 0 {
		last := p.issues[n-1]
		if last.inMember && last.member == p.member {
			return
		}
	}
	p.issues = append(p.issues, jsonIssue{member: p.member, inMember: p.inMember, msg: msg})
}

func (p *jsonParser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *jsonParser) value() (jsonValue, error) {
	if p.pos >= len(p.data) {
		return jsonValue{}, p.syntax("unexpected end of input")
	}
	start := p.pos
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		s, err := p.str()
		if err != nil {
			return jsonValue{}, err
		}
		return jsonValue{kind: kindString, raw: p.data[start:p.pos], text: s}, nil
	case c == 't':
		return p.literal("true", kindBool)
	case c == 'f':
		return p.literal("false", kindBool)
	case c == 'n':
		return p.literal("null", kindNull)
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		return jsonValue{}, p.syntax("unexpected character " + strconv.QuoteRune(rune(c)))
	}
}

func (p *jsonParser) literal(word string, kind jsonKind) (jsonValue, error) {
	if !strings.HasPrefix(string(p.data[p.pos:min(len(p.data), p.pos+len(word))]), word) {
		return jsonValue{}, p.syntax("invalid literal")
	}
	start := p.pos
	p.pos += len(word)
	v := jsonValue{kind: kind, raw: p.data[start:p.pos]}
	if kind == kindBool {
		v.text = word
	}
	return v, nil
}

func (p *jsonParser) enter() error {
	p.depth++
	if p.depth > p.maxDepth {
		return &syntaxError{off: p.pos, msg: "nesting deeper than " + strconv.Itoa(p.maxDepth), tooDeep: true}
	}
	return nil
}

func (p *jsonParser) array() (jsonValue, error) {
	if err := p.enter(); err != nil {
		return jsonValue{}, err
	}
	start := p.pos
	p.pos++ // [
	v := jsonValue{kind: kindArray}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		p.depth--
		v.raw = p.data[start:p.pos]
		return v, nil
	}
	for {
		p.skipSpace()
		elem, err := p.value()
		if err != nil {
			return jsonValue{}, err
		}
		v.elems = appendDoubling(v.elems, elem)
		p.skipSpace()
		if p.pos >= len(p.data) {
			return jsonValue{}, p.syntax("unexpected end of input in array")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			p.depth--
			v.raw = p.data[start:p.pos]
			return v, nil
		default:
			return jsonValue{}, p.syntax("expected ',' or ']' in array")
		}
	}
}

func (p *jsonParser) object() (jsonValue, error) {
	if err := p.enter(); err != nil {
		return jsonValue{}, err
	}
	start := p.pos
	p.pos++ // {
	v := jsonValue{kind: kindObject}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		p.depth--
		v.raw = p.data[start:p.pos]
		return v, nil
	}
	var seen map[string]struct{}
	top := p.depth == 1
	for {
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return jsonValue{}, p.syntax("expected a member name")
		}
		name, err := p.str()
		if err != nil {
			return jsonValue{}, err
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return jsonValue{}, p.syntax("expected ':' after a member name")
		}
		p.pos++
		p.skipSpace()
		if seen == nil {
			seen = make(map[string]struct{})
		}
		if _, dup := seen[name]; dup {
			// Recorded before the value is parsed, so that a repeated
			// top-level name is a root issue, not one inside the member.
			p.issue("duplicate member name " + Excerpt(name))
		}
		seen[name] = struct{}{}
		if top {
			p.member, p.inMember = name, true
		}
		val, err := p.value()
		if err != nil {
			return jsonValue{}, err
		}
		if top {
			p.member, p.inMember = "", false
		}
		v.members = appendDoubling(v.members, jsonMember{name: name, value: val})
		p.skipSpace()
		if p.pos >= len(p.data) {
			return jsonValue{}, p.syntax("unexpected end of input in object")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			p.depth--
			v.raw = p.data[start:p.pos]
			return v, nil
		default:
			return jsonValue{}, p.syntax("expected ',' or '}' in object")
		}
	}
}

// appendDoubling appends x to s, doubling the capacity when it is full.
// append grows large slices by a quarter, which for a long array (a
// 400 kB array of numbers is 200,000 elements) allocates and copies about
// five times the final slice; doubling keeps it to two.
func appendDoubling[T any](s []T, x T) []T {
	if len(s) == cap(s) {
		grown := make([]T, len(s), max(1, 2*cap(s)))
		copy(grown, s)
		s = grown
	}
	return append(s, x)
}

// str parses a string starting at the opening quote and returns it decoded.
// The input is known to be valid UTF-8.
func (p *jsonParser) str() (string, error) {
	p.pos++ // opening quote
	start := p.pos
	// Fast path: no escapes.
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		if c == '"' {
			s := string(p.data[start:p.pos])
			p.pos++
			return s, nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", p.syntax("control character in string")
		}
		p.pos++
	}
	var b strings.Builder
	b.Write(p.data[start:p.pos])
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			return b.String(), nil
		case c < 0x20:
			return "", p.syntax("control character in string")
		case c != '\\':
			b.WriteByte(c)
			p.pos++
			continue
		}
		p.pos++ // backslash
		if p.pos >= len(p.data) {
			break
		}
		e := p.data[p.pos]
		p.pos++
		switch e {
		case '"', '\\', '/':
			b.WriteByte(e)
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r, err := p.hex4()
			if err != nil {
				return "", err
			}
			switch {
			case utf16.IsSurrogate(r) && r < 0xdc00:
				// A high surrogate must be followed by an escaped low one.
				if p.pos+1 < len(p.data) && p.data[p.pos] == '\\' && p.data[p.pos+1] == 'u' {
					save := p.pos
					p.pos += 2
					r2, err := p.hex4()
					if err != nil {
						return "", err
					}
					if r2 >= 0xdc00 && r2 <= 0xdfff {
						b.WriteRune(utf16.DecodeRune(r, r2))
						continue
					}
					p.pos = save // parse the next escape on its own
				}
				p.issue("lone surrogate in string")
				b.WriteRune(utf8.RuneError)
			case utf16.IsSurrogate(r):
				p.issue("lone surrogate in string")
				b.WriteRune(utf8.RuneError)
			default:
				b.WriteRune(r)
			}
		default:
			return "", p.syntax("invalid escape in string")
		}
	}
	return "", p.syntax("unterminated string")
}

func (p *jsonParser) hex4() (rune, error) {
	if p.pos+4 > len(p.data) {
		return 0, p.syntax("short \\u escape")
	}
	var r rune
	for _, c := range p.data[p.pos : p.pos+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, p.syntax("invalid \\u escape")
		}
	}
	p.pos += 4
	return r, nil
}

func (p *jsonParser) number() (jsonValue, error) {
	start := p.pos
	if p.data[p.pos] == '-' {
		p.pos++
	}
	digits := func() int {
		n := 0
		for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	switch {
	case p.pos < len(p.data) && p.data[p.pos] == '0':
		p.pos++
	case digits() == 0:
		return jsonValue{}, p.syntax("invalid number")
	}
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		p.pos++
		if digits() == 0 {
			return jsonValue{}, p.syntax("invalid number: no digits after '.'")
		}
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return jsonValue{}, p.syntax("invalid number: no digits in exponent")
		}
	}
	lit := string(p.data[start:p.pos])
	canon, ok := canonicalNumber(lit)
	if !ok {
		p.issue("number " + Excerpt(lit) + " is beyond the range of a double")
	}
	return jsonValue{kind: kindNumber, raw: p.data[start:p.pos], text: lit, canon: canon}, nil
}

// canonicalNumber returns the canonical form of a valid JSON number literal,
// false when it is beyond the range of a double (an integer literal too:
// found by FuzzCanonicalize). An integer literal (no
// fraction, no exponent) is its own canonical form, "-0" aside: up to ±2^53
// that is exactly what ECMAScript prints for it, and beyond, keeping the
// digits is the extension Canonicalize documents. Any other literal is
// parsed as a double and printed as ECMAScript does.
func canonicalNumber(lit string) (string, bool) {
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		// Beyond the range of a double, integer or not: not I-JSON.
		return "", false
	}
	if isIntegerLiteral(lit) {
		if lit == "-0" {
			return "0", true
		}
		return lit, true
	}
	return formatES6(f), true
}

// isIntegerLiteral reports whether a valid JSON number literal has neither a
// fraction nor an exponent.
func isIntegerLiteral(lit string) bool {
	return !strings.ContainsAny(lit, ".eE")
}

// formatES6 serializes a finite double as ECMAScript's Number.prototype.
// toString does (ECMA-262 Number::toString), which RFC 8785 prescribes. Go's
// shortest formatting yields the same digits (the shortest that round-trip,
// the closest when there is a choice); only the layout differs.
func formatES6(f float64) string {
	if f == 0 {
		return "0" // also for -0
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // -d.ddddde±xx
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	mant, exp, _ := strings.Cut(s, "e")
	e, _ := strconv.Atoi(exp)
	digits := strings.Replace(mant, ".", "", 1)
	k := len(digits)
	n := e + 1 // the decimal point sits after n digits
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	switch {
	case k <= n && n <= 21:
		b.WriteString(digits)
		b.WriteString(strings.Repeat("0", n-k))
	case 0 < n && n <= 21:
		b.WriteString(digits[:n])
		b.WriteByte('.')
		b.WriteString(digits[n:])
	case -6 < n && n <= 0:
		b.WriteString("0.")
		b.WriteString(strings.Repeat("0", -n))
		b.WriteString(digits)
	default:
		b.WriteByte(digits[0])
		if k > 1 {
			b.WriteByte('.')
			b.WriteString(digits[1:])
		}
		b.WriteByte('e')
		if n-1 >= 0 {
			b.WriteByte('+')
		}
		b.WriteString(strconv.Itoa(n - 1))
	}
	return b.String()
}

// appendCanonical appends the RFC 8785 serialization of v to b.
func (v *jsonValue) appendCanonical(b []byte) []byte {
	switch v.kind {
	case kindNull:
		return append(b, "null"...)
	case kindBool:
		return append(b, v.text...)
	case kindNumber:
		return append(b, v.canon...)
	case kindString:
		return appendCanonicalString(b, v.text)
	case kindArray:
		b = append(b, '[')
		for i := range v.elems {
			if i > 0 {
				b = append(b, ',')
			}
			b = v.elems[i].appendCanonical(b)
		}
		return append(b, ']')
	default:
		order := make([]int, len(v.members))
		names := make([]string, len(v.members)) // compact, for the sort's sake
		for i := range order {
			order[i] = i
			names[i] = v.members[i].name
		}
		slices.SortFunc(order, func(i, j int) int {
			return compareUTF16(names[i], names[j])
		})
		b = append(b, '{')
		for n, i := range order {
			if n > 0 {
				b = append(b, ',')
			}
			b = appendCanonicalString(b, v.members[i].name)
			b = append(b, ':')
			b = v.members[i].value.appendCanonical(b)
		}
		return append(b, '}')
	}
}

// compareUTF16 orders strings by their UTF-16 code units, as RFC 8785
// sorts member names. It differs from Go's byte order only where a
// supplementary-plane character meets one in U+E000–U+FFFF.
func compareUTF16(a, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] == b[i] {
			continue
		}
		// a[:i] == b[:i], so the character holding the first difference
		// starts at the same offset in both.
		start := i
		for start > 0 && !utf8.RuneStart(a[start]) {
			start--
		}
		ra, _ := utf8.DecodeRuneInString(a[start:])
		rb, _ := utf8.DecodeRuneInString(b[start:])
		a1, a2 := utf16Units(ra)
		b1, b2 := utf16Units(rb)
		if a1 != b1 {
			return cmp.Compare(a1, b1)
		}
		return cmp.Compare(a2, b2)
	}
	return cmp.Compare(len(a), len(b))
}

// utf16Units returns the UTF-16 code units of r; the second is 0 for a
// character of the Basic Multilingual Plane.
func utf16Units(r rune) (rune, rune) {
	if r < 0x10000 {
		return r, 0
	}
	return utf16.EncodeRune(r)
}

// appendCanonicalString appends s as a JSON string the way RFC 8785 (and
// JSON.stringify) writes it: the two-character escapes for '"', '\\', \b, \f,
// \n, \r and \t, \u00xx (lowercase hex) for the other control characters,
// everything else as is.
func appendCanonicalString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
