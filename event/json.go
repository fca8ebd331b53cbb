package event

import (
	"bytes"
	"cmp"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// The decoder reads JSON without building a tree of values. parseJSON checks
// a text once, strictly, and leaves an index of it: where every object with
// members starts and ends, and its members sorted in canonical order (RFC
// 8785: by the UTF-16 code units of their names), as offsets into the text.
// A value is named by the offset of its first byte; strings, numbers and
// arrays are read from the text when they are needed. The canonical form is
// written from the text and the index (canonical.go); the envelope's
// attributes and JSON pointers are read through it.
//
// What it costs: 16 bytes per object with members and 8 per member, at most
// about 3.4 bytes per input byte ([{"":0},{"":0},…]), the index sized up
// front from a count of the text's colons and braces; arrays, scalars and
// the issues found cost nothing per value. A tree of values took 100 bytes
// and more per value (117 MiB for a 1 MiB array of zeros).

// jsonDoc is a JSON text checked by parseJSON, and its index.
type jsonDoc struct {
	data []byte
	// root is the offset of the top-level value.
	root int
	// objects lists every object with members in the order they open (so
	// by offset).
	objects []object
	// members holds the members of every object, each object's in one run
	// sorted canonically: by name, then (equal names) in input order.
	members []member
	// issues lists I-JSON violations in input order: at most one per
	// top-level member, at most maxIssues in all. Syntax errors are not
	// issues: they fail the parse.
	issues []jsonIssue
}

// object is one object of the text that has members.
type object struct {
	// start and end are the offsets of its opening brace and just past its
	// closing one.
	start, end int32
	// first and n locate its members: members[first:first+n].
	first, n int32
}

// member is one object member: the offsets of its name's opening quote and
// of its value.
type member struct {
	name, value int32
}

// jsonIssue is a violation of I-JSON in otherwise well-formed JSON.
type jsonIssue struct {
	// member is the top-level member the issue lies in, when inMember.
	member   string
	inMember bool
	msg      string
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

type issueKind uint8

const (
	issueSurrogate issueKind = iota
	issueRange
	issueDuplicate
)

// rawIssue is an I-JSON violation as the parser finds it. Repeated member
// names are found when their object closes, after what follows them, so the
// issues are put in text order (pos) before they are kept.
type rawIssue struct {
	// pos orders the issue where a one-pass parser would have met it.
	pos int32
	// at is the offset of the offending string, name or number.
	at int32
	// member is the name offset of the top-level member the issue lies
	// in, -1 for none.
	member int32
	kind   issueKind
}

type jsonParser struct {
	data     []byte
	pos      int
	depth    int
	maxDepth int
	// member is the name offset of the top-level member whose value is
	// being parsed, -1 outside one.
	member int32
	doc    *jsonDoc
	// The members of the objects being parsed sit on a stack at the end
	// of doc.members, growing down from sp, while finished objects' runs
	// fill it from the front up to nf: a member is in one or the other,
	// so one slice as long as the number of members holds both.
	sp, nf int
	// raw holds the first maxIssues issues in text order found so far
	// (of the top-level members finished, their first each), pending the
	// first of the top-level member being parsed.
	raw        []rawIssue
	pending    rawIssue
	hasPending bool
}

// parseJSON parses data strictly by RFC 8259 and indexes it. Syntax errors
// (including invalid UTF-8) fail it, and so does nesting deeper than
// maxDepth (a syntaxError with tooDeep set, found as soon as the parser gets
// there); I-JSON violations are collected in the document's issues and
// parsing goes on, so that a syntax error later in the text still wins.
func parseJSON(data []byte, maxDepth int) (*jsonDoc, error) {
	doc := &jsonDoc{}
	if err := doc.parse(data, maxDepth); err != nil {
		return nil, err
	}
	return doc, nil
}

// parse is parseJSON into doc (a Document holds its index inline).
func (doc *jsonDoc) parse(data []byte, maxDepth int) error {
	if !utf8.Valid(data) {
		return &syntaxError{off: invalidUTF8Offset(data), msg: "invalid UTF-8"}
	}
	if len(data) > math.MaxInt32 {
		// Kafka's record values are shorter: their length is an int32.
		return &syntaxError{off: math.MaxInt32, msg: "text longer than 2 GiB"}
	}
	doc.data = data
	// Every member has a colon, every object a brace: counted (fast) they
	// size the index in one allocation each. Text inside strings inflates
	// the counts; the bounds are what the densest JSON needs (`"":0,` is 5
	// bytes, `{"":0},` 7).
	nm := min(bytes.Count(data, []byte{':'}), len(data)/4+1)
	if nm > 0 {
		doc.members = make([]member, nm)
		no := min(bytes.Count(data, []byte{'{'}), len(data)/6+1)
		doc.objects = make([]object, 0, no)
	}
	p := &jsonParser{data: data, maxDepth: maxDepth, member: -1, doc: doc, sp: nm}
	p.skipSpace()
	doc.root = p.pos
	if err := p.value(); err != nil {
		return err
	}
	p.skipSpace()
	if p.pos != len(p.data) {
		return p.syntax("unexpected data after the top-level value")
	}
	doc.members = doc.members[:p.nf:p.nf]
	p.flushIssue()
	p.keepIssues()
	return nil
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

// issue records an issue. A one-pass parser keeps the first maxIssues in
// text order, but of several in a row in the same top-level member only the
// first. The issues of a top-level member are all found while its value is
// parsed (in text order but for repeated names, found when their object
// closes), so the first of them, pending until the value ends, is the only
// one it keeps; and then, the issues of other members and those outside any
// member never being in a row with the same member (a repeated top-level
// name is an issue outside between the two), the first maxIssues of those
// left in text order are what it keeps.
func (p *jsonParser) issue(kind issueKind, pos, at int) {
	r := rawIssue{pos: int32(pos), at: int32(at), member: p.member, kind: kind}
	if r.member < 0 {
		p.keepFirst(r)
		return
	}
	if !p.hasPending || r.pos < p.pending.pos {
		p.pending, p.hasPending = r, true
	}
}

// flushIssue passes on the pending issue of a top-level member whose value
// is parsed.
func (p *jsonParser) flushIssue() {
	if p.hasPending {
		p.keepFirst(p.pending)
		p.hasPending = false
	}
}

// keepFirst adds r to the first maxIssues issues in text order.
func (p *jsonParser) keepFirst(r rawIssue) {
	if len(p.raw) < maxIssues {
		p.raw = append(p.raw, r)
		return
	}
	last := 0
	for i := range p.raw {
		if p.raw[i].pos > p.raw[last].pos {
			last = i
		}
	}
	if r.pos < p.raw[last].pos {
		p.raw[last] = r
	}
}

// keepIssues puts the issues kept in text order, as a one-pass parser would
// have found them.
func (p *jsonParser) keepIssues() {
	if len(p.raw) == 0 {
		return
	}
	slices.SortFunc(p.raw, func(a, b rawIssue) int { return cmp.Compare(a.pos, b.pos) })
	d := p.doc
	last := int32(-1) // the member of the last issue kept, -1 for none
	for _, r := range p.raw {
		if len(d.issues) >= maxIssues {
			break
		}
		if r.member >= 0 && last >= 0 && (last == r.member || compareNames(d.data, int(last), int(r.member)) == 0) {
			continue
		}
		is := jsonIssue{inMember: r.member >= 0, msg: p.issueMsg(r)}
		if is.inMember {
			is.member = d.str(int(r.member))
		}
		d.issues = append(d.issues, is)
		last = r.member
	}
	p.raw = nil
}

func (p *jsonParser) issueMsg(r rawIssue) string {
	switch r.kind {
	case issueSurrogate:
		return "lone surrogate in string"
	case issueRange:
		lit := p.data[r.at:numberEnd(p.data, int(r.at))]
		return "number " + Excerpt(string(lit)) + " is beyond the range of a double"
	default:
		return "duplicate member name " + Excerpt(p.doc.str(int(r.at)))
	}
}

func (p *jsonParser) skipSpace() {
	p.pos = skipSpace(p.data, p.pos)
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

func (p *jsonParser) value() error {
	if p.pos >= len(p.data) {
		return p.syntax("unexpected end of input")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		return p.str()
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		return p.syntax("unexpected character " + strconv.QuoteRune(rune(c)))
	}
}

func (p *jsonParser) literal(word string) error {
	if !bytes.HasPrefix(p.data[p.pos:], []byte(word)) {
		return p.syntax("invalid literal")
	}
	p.pos += len(word)
	return nil
}

func (p *jsonParser) enter() error {
	p.depth++
	if p.depth > p.maxDepth {
		return &syntaxError{off: p.pos, msg: "nesting deeper than " + strconv.Itoa(p.maxDepth), tooDeep: true}
	}
	return nil
}

func (p *jsonParser) array() error {
	if err := p.enter(); err != nil {
		return err
	}
	p.pos++ // [
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		p.depth--
		return nil
	}
	for n := 1; ; n++ {
		p.skipSpace()
		if err := p.value(); err != nil {
			return err
		}
		p.skipSpace()
		if p.pos >= len(p.data) {
			return p.syntax("unexpected end of input in array")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			p.depth--
			return nil
		default:
			return p.syntax("expected ',' or ']' in array")
		}
	}
}

func (p *jsonParser) object() error {
	if err := p.enter(); err != nil {
		return err
	}
	start := p.pos
	p.pos++ // {
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		p.depth--
		return nil
	}
	// Recorded now, so that objects stay in the order they open.
	p.doc.objects = appendDoubling(p.doc.objects, object{start: int32(start)})
	oi := len(p.doc.objects) - 1
	top := p.depth == 1
	mark := p.sp
	for {
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return p.syntax("expected a member name")
		}
		name := p.pos
		if err := p.str(); err != nil {
			return err
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return p.syntax("expected ':' after a member name")
		}
		p.pos++
		p.skipSpace()
		if top {
			p.member = int32(name)
		}
		value := p.pos
		if err := p.value(); err != nil {
			return err
		}
		if top {
			p.member = -1
			p.flushIssue()
		}
		p.push(member{name: int32(name), value: int32(value)})
		p.skipSpace()
		if p.pos >= len(p.data) {
			return p.syntax("unexpected end of input in object")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			p.depth--
			p.closeObject(oi, mark)
			return nil
		default:
			return p.syntax("expected ',' or '}' in object")
		}
	}
}

// push puts a member of the object being parsed on the stack.
func (p *jsonParser) push(m member) {
	if p.sp == p.nf {
		// Not reached: the slice has a slot for every colon. Grow anyway
		// rather than trust the count.
		ms := p.doc.members
		grown := make([]member, max(8, 2*len(ms)))
		copy(grown, ms[:p.nf])
		top := len(grown) - (len(ms) - p.sp)
		copy(grown[top:], ms[p.sp:])
		p.doc.members, p.sp = grown, top
	}
	p.sp--
	p.doc.members[p.sp] = m
}

// closeObject moves the members of the object oi (the stack above mark) to
// the finished runs, sorts them canonically and reports repeated names.
func (p *jsonParser) closeObject(oi, mark int) {
	ms := p.doc.members
	n := mark - p.sp
	run := ms[p.nf : p.nf+n]
	copy(run, ms[p.sp:mark]) // may overlap: copy is a memmove
	p.sp = mark
	obj := &p.doc.objects[oi]
	obj.end, obj.first, obj.n = int32(p.pos), int32(p.nf), int32(n)
	p.nf += n
	data := p.data
	slices.SortFunc(run, func(a, b member) int {
		if o := compareNames(data, int(a.name), int(b.name)); o != 0 {
			return o
		}
		return cmp.Compare(a.value, b.value)
	})
	for i := 1; i < len(run); i++ {
		if compareNames(data, int(run[i-1].name), int(run[i].name)) == 0 {
			// Where a one-pass parser notices it: after the name.
			p.issue(issueDuplicate, stringEnd(data, int(run[i].name)), int(run[i].name))
		}
	}
}

// str checks the string starting at the opening quote at p.pos and moves
// past it. The input is known to be valid UTF-8.
func (p *jsonParser) str() error {
	p.pos++ // opening quote
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			return nil
		case c < 0x20:
			return p.syntax("control character in string")
		case c != '\\':
			p.pos++
			continue
		}
		at := p.pos
		p.pos++ // backslash
		if p.pos >= len(p.data) {
			break
		}
		e := p.data[p.pos]
		p.pos++
		switch e {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		case 'u':
			r, err := p.hex4()
			if err != nil {
				return err
			}
			switch {
			case utf16.IsSurrogate(r) && r < 0xdc00:
				// A high surrogate must be followed by an escaped low one.
				if p.pos+1 < len(p.data) && p.data[p.pos] == '\\' && p.data[p.pos+1] == 'u' {
					save := p.pos
					p.pos += 2
					r2, err := p.hex4()
					if err != nil {
						return err
					}
					if r2 >= 0xdc00 && r2 <= 0xdfff {
						continue
					}
					p.pos = save // parse the next escape on its own
				}
				p.issue(issueSurrogate, at, at)
			case utf16.IsSurrogate(r):
				p.issue(issueSurrogate, at, at)
			}
		default:
			return p.syntax("invalid escape in string")
		}
	}
	return p.syntax("unterminated string")
}

func (p *jsonParser) hex4() (rune, error) {
	r, ok := hex4(p.data, p.pos)
	if !ok {
		if p.pos+4 > len(p.data) {
			return 0, p.syntax("short \\u escape")
		}
		return 0, p.syntax("invalid \\u escape")
	}
	p.pos += 4
	return r, nil
}

// hex4 reads the four hex digits of a \u escape at data[i:].
func hex4(data []byte, i int) (rune, bool) {
	if i+4 > len(data) {
		return 0, false
	}
	var r rune
	for _, c := range data[i : i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}

func (p *jsonParser) number() error {
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
		return p.syntax("invalid number")
	}
	integer := true
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		p.pos++
		integer = false
		if digits() == 0 {
			return p.syntax("invalid number: no digits after '.'")
		}
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		integer = false
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return p.syntax("invalid number: no digits in exponent")
		}
	}
	// An integer of up to 300 digits is below 1e300: in range, without
	// parsing it.
	if (!integer || p.pos-start > 300) && !inDoubleRange(p.data[start:p.pos]) {
		p.issue(issueRange, start, start)
	}
	return nil
}

// appendDoubling appends x to s, doubling the capacity when it is full.
// append grows large slices by a quarter, which for a long slice allocates
// and copies about five times the final slice; doubling keeps it to two.
func appendDoubling[T any](s []T, x T) []T {
	if len(s) == cap(s) {
		grown := make([]T, len(s), max(1, 2*cap(s)))
		copy(grown, s)
		s = grown
	}
	return append(s, x)
}

// Reading the text through the index. A value is the offset of its first
// byte in a text parseJSON accepted.

func (d *jsonDoc) kind(v int) Kind {
	switch d.data[v] {
	case '{':
		return KindObject
	case '[':
		return KindArray
	case '"':
		return KindString
	case 't', 'f':
		return KindBool
	case 'n':
		return KindNull
	default:
		return KindNumber
	}
}

// object returns the object at v; false when it has no members.
func (d *jsonDoc) object(v int) (*object, bool) {
	i, found := slices.BinarySearchFunc(d.objects, int32(v), func(o object, v int32) int { return cmp.Compare(o.start, v) })
	if !found {
		return nil, false
	}
	return &d.objects[i], true
}

// end returns the offset just past the value at v.
func (d *jsonDoc) end(v int) int {
	switch d.data[v] {
	case '{':
		if o, ok := d.object(v); ok {
			return int(o.end)
		}
		return skipSpace(d.data, v+1) + 1 // {}
	case '[':
		return arrayEnd(d.data, v)
	case '"':
		return stringEnd(d.data, v)
	case 't', 'n':
		return v + 4
	case 'f':
		return v + 5
	default:
		return numberEnd(d.data, v)
	}
}

// raw returns the text of the value at v.
func (d *jsonDoc) raw(v int) []byte {
	return d.data[v:d.end(v)]
}

// head returns enough of the value at v for an excerpt.
func (d *jsonDoc) head(v int) string {
	return string(d.headBytes(v))
}

// headBytes is head, a sub-slice of the text.
func (d *jsonDoc) headBytes(v int) []byte {
	b := d.raw(v)
	return b[:min(len(b), excerptBytes+utf8.UTFMax)]
}

// text returns the decoded string, the number literal or "true"/"false" of
// the value at v; "" for null, arrays and objects.
func (d *jsonDoc) text(v int) string {
	switch d.kind(v) {
	case KindString:
		return d.str(v)
	case KindNumber, KindBool:
		return string(d.raw(v))
	default:
		return ""
	}
}

// str returns the string at v (the offset of its opening quote) decoded. A
// lone surrogate decodes to U+FFFD.
func (d *jsonDoc) str(v int) string {
	if b, ok := d.plainString(v); ok {
		return string(b)
	}
	return string(d.decodeString(v))
}

// strBytes is str without a copy where the text holds the string as is.
func (d *jsonDoc) strBytes(v int) []byte {
	if b, ok := d.plainString(v); ok {
		return b
	}
	return d.decodeString(v)
}

// plainString returns the string at v when it has no escapes.
func (d *jsonDoc) plainString(v int) ([]byte, bool) {
	i := v + 1
	j := i
	for d.data[j] != '"' && d.data[j] != '\\' {
		j++
	}
	return d.data[i:j], d.data[j] == '"'
}

func (d *jsonDoc) decodeString(v int) []byte {
	i := v + 1
	b := make([]byte, 0, stringEnd(d.data, v)-i)
	for {
		r, next := nextRune(d.data, i)
		if r < 0 {
			return b
		}
		b = utf8.AppendRune(b, r)
		i = next
	}
}

// integer returns the canonical form of the integer literal at v: its
// digits, "-0" aside.
func (d *jsonDoc) integer(v int) string {
	lit := d.raw(v)
	if string(lit) == "-0" {
		return "0"
	}
	return string(lit)
}

// isInteger reports whether the value at v is a number written without
// fraction or exponent.
func (d *jsonDoc) isInteger(v int) bool {
	return d.kind(v) == KindNumber && isIntegerLiteral(d.raw(v))
}

// isIntegerLiteral reports whether a valid JSON number literal has neither a
// fraction nor an exponent.
func isIntegerLiteral(lit []byte) bool {
	for _, c := range lit {
		if c == '.' || c == 'e' || c == 'E' {
			return false
		}
	}
	return true
}

// objectMembers returns the members of the object at v, in canonical order.
func (d *jsonDoc) objectMembers(v int) []member {
	o, ok := d.object(v)
	if !ok {
		return nil
	}
	return d.members[o.first : o.first+o.n]
}

// eachMember calls fn for every member of the object at v, in input order,
// until fn returns false.
func (d *jsonDoc) eachMember(v int, fn func(name, value int) bool) {
	i := skipSpace(d.data, v+1)
	if d.data[i] == '}' {
		return
	}
	for {
		name := i
		i = skipSpace(d.data, stringEnd(d.data, i))
		value := skipSpace(d.data, i+1) // past the colon
		if !fn(name, value) {
			return
		}
		i = skipSpace(d.data, d.end(value))
		if d.data[i] == '}' {
			return
		}
		i = skipSpace(d.data, i+1) // past the comma
	}
}

// member returns the value of the first member called name of the object at
// v.
func (d *jsonDoc) member(v int, name string) (int, bool) {
	ms := d.objectMembers(v)
	i, found := slices.BinarySearchFunc(ms, name, func(m member, name string) int {
		return compareNameString(d.data, int(m.name), name)
	})
	if !found {
		return 0, false
	}
	return int(ms[i].value), true
}

// elem returns element i of the array at v.
func (d *jsonDoc) elem(v, i int) (int, bool) {
	j := skipSpace(d.data, v+1)
	if d.data[j] == ']' {
		return 0, false
	}
	for k := 0; ; k++ {
		if k == i {
			return j, true
		}
		j = skipSpace(d.data, d.end(j))
		if d.data[j] == ']' {
			return 0, false
		}
		j = skipSpace(d.data, j+1)
	}
}

// resolve returns the value p refers to from v.
func (d *jsonDoc) resolve(p *pointer, v int) (int, bool) {
	return d.lookup(v, p.tokens)
}

// lookup returns the value the reference tokens of a JSON pointer refer to
// from v.
func (d *jsonDoc) lookup(v int, tokens []string) (int, bool) {
	for _, tok := range tokens {
		var ok bool
		switch d.kind(v) {
		case KindObject:
			v, ok = d.member(v, tok)
		case KindArray:
			var i int
			if i, ok = arrayIndex(tok); ok {
				v, ok = d.elem(v, i)
			}
		}
		if !ok {
			return 0, false
		}
	}
	return v, true
}

// stringEnd returns the offset just past the string whose opening quote is
// at data[v].
func stringEnd(data []byte, v int) int {
	for i := v + 1; ; i++ {
		switch data[i] {
		case '"':
			return i + 1
		case '\\':
			i++
		}
	}
}

// arrayEnd returns the offset just past the array whose opening bracket is
// at data[v], found by counting brackets outside strings.
func arrayEnd(data []byte, v int) int {
	depth := 0
	for i := v; ; i++ {
		switch data[i] {
		case '[', '{':
			depth++
		case ']', '}':
			depth--
			if depth == 0 {
				return i + 1
			}
		case '"':
			i = stringEnd(data, i) - 1
		}
	}
}

// numberEnd returns the offset just past the number literal at data[v].
func numberEnd(data []byte, v int) int {
	i := v
	for i < len(data) {
		switch c := data[i]; {
		case c >= '0' && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
			i++
		default:
			return i
		}
	}
	return i
}

// nextRune decodes the character at data[i] inside a checked string: an
// escape or a UTF-8 sequence. It returns -1 at the closing quote. An escaped
// surrogate pair is one character; a lone surrogate is U+FFFD.
func nextRune(data []byte, i int) (rune, int) {
	c := data[i]
	switch {
	case c == '"':
		return -1, i
	case c < utf8.RuneSelf && c != '\\':
		return rune(c), i + 1
	case c != '\\':
		r, n := utf8.DecodeRune(data[i:])
		return r, i + n
	}
	switch e := data[i+1]; e {
	case 'b':
		return '\b', i + 2
	case 'f':
		return '\f', i + 2
	case 'n':
		return '\n', i + 2
	case 'r':
		return '\r', i + 2
	case 't':
		return '\t', i + 2
	case 'u':
	default: // '"', '\\', '/'
		return rune(e), i + 2
	}
	r, _ := hex4(data, i+2)
	if !utf16.IsSurrogate(r) {
		return r, i + 6
	}
	if r < 0xdc00 && i+7 < len(data) && data[i+6] == '\\' && data[i+7] == 'u' {
		if r2, ok := hex4(data, i+8); ok && r2 >= 0xdc00 && r2 <= 0xdfff {
			return utf16.DecodeRune(r, r2), i + 12
		}
	}
	return utf8.RuneError, i + 6
}

// compareNames orders the strings whose opening quotes are at data[a] and
// data[b] by the UTF-16 code units of their decoded text, as RFC 8785 sorts
// member names.
func compareNames(data []byte, a, b int) int {
	if a == b {
		return 0
	}
	i, j := a+1, b+1
	for {
		// Equal bytes are equal characters, escapes aside.
		for data[i] == data[j] && data[i] != '"' && data[i] != '\\' {
			i++
			j++
		}
		ca, cb := data[i], data[j]
		if ca == '"' && cb == '"' {
			return 0
		}
		if ca < utf8.RuneSelf && cb < utf8.RuneSelf && ca != '\\' && cb != '\\' {
			// ASCII or the end of a string (the shorter string first):
			// byte order is code unit order.
			switch {
			case ca == '"':
				return -1
			case cb == '"':
				return 1
			}
			return cmp.Compare(ca, cb)
		}
		// data[a+1:i] == data[b+1:j] holds whole characters up to the
		// last escape decoded: back off to where the differing one starts.
		for !utf8.RuneStart(data[i]) {
			i--
			j--
		}
		ra, ni := nextRune(data, i)
		rb, nj := nextRune(data, j)
		if ra != rb {
			return compareUnits(ra, rb)
		}
		i, j = ni, nj
	}
}

// compareNameString is compareNames of the string at data[a] and s.
func compareNameString(data []byte, a int, s string) int {
	i, k := a+1, 0
	for {
		ra, ni := nextRune(data, i)
		rb, n := rune(-1), 0
		if k < len(s) {
			rb, n = utf8.DecodeRuneInString(s[k:])
		}
		if ra != rb || ra < 0 {
			return compareUnits(ra, rb)
		}
		i, k = ni, k+n
	}
}

// compareUnits orders two characters (-1: the end of the string) by their
// UTF-16 code units. It differs from code point order only where a
// supplementary-plane character meets one in U+E000–U+FFFF.
func compareUnits(a, b rune) int {
	if a < 0 || b < 0 {
		return cmp.Compare(a, b)
	}
	a1, a2 := utf16Units(a)
	b1, b2 := utf16Units(b)
	if a1 != b1 {
		return cmp.Compare(a1, b1)
	}
	return cmp.Compare(a2, b2)
}

// utf16Units returns the UTF-16 code units of r; the second is 0 for a
// character of the Basic Multilingual Plane.
func utf16Units(r rune) (rune, rune) {
	if r < 0x10000 {
		return r, 0
	}
	return utf16.EncodeRune(r)
}
