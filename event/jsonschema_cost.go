package event

import (
	"encoding/json"
	"fmt"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// JSON Schema validation (santhosh-tekuri/jsonschema) follows every $ref,
// allOf, anyOf and oneOf branch of a value and does not stop when its
// context ends, so its work is bounded before it runs, from the compiled
// schema and the payload's size. Four measures, each for one value at a
// given depth below the root, every branch counted as taken:
//
//   - applications: how many subschemas apply to it. Definitions that each
//     refer twice to the next cost 2^depth (22 levels took 6.5 s for a
//     two-field record), a recursive anyOf whose branches both descend
//     doubles at every level the payload nests.
//   - per-value work: applications, plus the values of each enum and const
//     that is scanned; numbers (compared, and checked against minimum and
//     multipleOf, as exact fractions) weigh more.
//   - per-byte work: work that grows with the value's size — a pattern's
//     program (a regular expression runs in time its program's size times
//     the text's length), a string parsed for format "regex", uniqueItems
//     (the array is hashed), unevaluatedProperties and unevaluatedItems
//     (the members are copied for each subschema applied in place).
//   - uniqueItems: how many apply. An array of up to 20 items is compared
//     pair by pair, so its bytes cost about 19 times over: that work is
//     the payload's pairedBytes times pairWeight, for each.
//
// A payload is validated only if applications ≤ MaxSchemaApplications at
// every depth it reaches, per-value work × its values ≤
// maxSchemaValueWork and per-byte work × its bytes + uniqueItems ×
// pairWeight × its paired bytes ≤ maxSchemaByteWork; else it is
// unusable_schema, before validating.
//
// What cannot be bounded so is refused when the schema is compiled:
// $dynamicRef and $recursiveRef (their targets are chosen while
// validating, from any resource), a regular expression of more than
// maxRegexpInstructions (Go's compiler spends seconds on a megabyte-sized
// program), more than maxSchemaRegexpInstructions in all, and numbers a
// double cannot hold (1e-999999 is an exact fraction of a million digits).

// MaxSchemaApplications bounds how many subschemas JSON Schema validation
// may apply to one value of a payload. Real schemas apply a few dozen.
const MaxSchemaApplications = 1000

// The work bounds: two or three seconds of validation at the very most on
// a small machine, measured with the costliest attacks of each kind
// (TestJSONSchemaWorstCases prints them; go test -v -run WorstCases
// ./event/): about 0.8 µs per subschema or enum value, 4 µs per number
// compared or checked, 17 ns per pattern instruction and byte (a Unicode
// class), 1.2 µs per byte parsed as a regular expression, 140 ns per byte
// hashed for uniqueItems and 3.5 µs per paired byte (the pairs of 20 arrays), 18 ns per member and
// subschema for unevaluated members; the weights below are those costs
// over the subschema's, and over 9 ns. A megabyte (Kafka's default largest
// record) of an order's lines, with a length-limited pattern on each
// line's SKU and uniqueItems on the lines, stays within
// (TestJSONSchemaWorkBoundsLeaveRealPayloadsAlone): a pattern's program is
// counted as if it ran over every byte, which anchored, bounded patterns
// never do.
const (
	maxSchemaValueWork = 2_000_000
	maxSchemaByteWork  = 300_000_000

	numberWeight      = 5
	patternWeight     = 2
	regexFormatWeight = 140
	formatWeight      = 12
	uniqueItemsWeight = 16
	pairWeight        = 550
	unevaluatedWeight = 2

	maxRegexpInstructions       = 10_000
	maxSchemaRegexpInstructions = 100_000
)

// schemaCost holds the measures by depth, each the most at any depth up
// to its index.
type schemaCost struct {
	apps, perValue, perByte, unique [MaxNesting + 1]uint64
}

// costCap saturates the application counts: beyond the bound, only "too
// many" matters. workCap saturates the work measures.
const (
	costCap = MaxSchemaApplications + 1
	workCap = 1 << 50
)

func satAdd(a, b, limit uint64) uint64 {
	if a >= limit || b >= limit || a+b > limit {
		return limit
	}
	return a + b
}

func newSchemaCost(root *jsonschema.Schema) (*schemaCost, error) {
	var nodes []*jsonschema.Schema
	seen := map[*jsonschema.Schema]bool{}
	var walk func(s *jsonschema.Schema) error
	walk = func(s *jsonschema.Schema) error {
		if s == nil || seen[s] {
			return nil
		}
		seen[s] = true
		nodes = append(nodes, s)
		if s.DynamicRef != nil || s.RecursiveRef != nil {
			return fmt.Errorf("%s uses $dynamicRef or $recursiveRef, which effectively does not validate: their targets are chosen while validating, so the work cannot be bounded beforehand (use $ref)", s.Location)
		}
		for _, c := range schemaInPlace(s) {
			if err := walk(c); err != nil {
				return err
			}
		}
		for _, group := range schemaNested(s) {
			for _, c := range group.schemas {
				if err := walk(c); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(root); err != nil {
		return nil, err
	}

	programs := map[string]uint64{}
	byteWeight := func(s *jsonschema.Schema) uint64 {
		var w uint64
		if s.Pattern != nil {
			w += patternWeight * programSize(programs, s.Pattern.String())
		}
		for re := range s.PatternProperties {
			w += patternWeight * programSize(programs, re.String()) // on every member name
		}
		if s.Format != nil {
			if s.Format.Name == "regex" {
				w += regexFormatWeight
			} else {
				w += formatWeight // split and parsed: up to 90 ns a byte (duration)
			}
		}
		if s.MinLength != nil || s.MaxLength != nil {
			w++ // its runes counted
		}
		if s.UniqueItems {
			w += uniqueItemsWeight
		}
		if s.UnevaluatedProperties != nil || s.UnevaluatedItems != nil {
			w += unevaluatedWeight * (1 + uint64(len(schemaInPlace(s))))
		}
		return w
	}
	valueWeight := func(s *jsonschema.Schema) uint64 {
		w := uint64(1)
		if s.Minimum != nil || s.Maximum != nil || s.ExclusiveMinimum != nil || s.ExclusiveMaximum != nil || s.MultipleOf != nil {
			w += numberWeight
		}
		w += uint64(len(s.Required)) // every missing name is listed
		for _, names := range s.DependentRequired {
			w += uint64(len(names))
		}
		for _, dep := range s.Dependencies {
			if names, ok := dep.([]string); ok {
				w += uint64(len(names))
			}
		}
		if s.Enum != nil {
			for _, v := range s.Enum.Values {
				w += compareWeight(v)
			}
		}
		if s.Const != nil {
			w += compareWeight(*s.Const)
		}
		return w
	}
	g := newSchemaGraph(nodes) // nodes[0] is the root
	var c schemaCost
	c.apps = costBy(g, func(*jsonschema.Schema) uint64 { return 1 }, costCap)
	c.perValue = costBy(g, valueWeight, workCap)
	c.perByte = costBy(g, byteWeight, workCap)
	c.unique = costBy(g, func(s *jsonschema.Schema) uint64 {
		if s.UniqueItems {
			return 1
		}
		return 0
	}, workCap)
	return &c, nil
}

// compareWeight is the per-value work of comparing a value with v, an enum
// value or a const: numbers are compared as exact fractions.
func compareWeight(v any) uint64 {
	switch v := v.(type) {
	case json.Number:
		return numberWeight
	case []any:
		w := uint64(1)
		for _, x := range v {
			w = satAdd(w, compareWeight(x), workCap)
		}
		return w
	case map[string]any:
		w := uint64(1)
		for _, x := range v {
			w = satAdd(w, 1+compareWeight(x), workCap)
		}
		return w
	}
	return 1
}

// costBy computes, for each depth d, the most weight(s) summed over the
// subschemas s that apply to one value at any depth up to d below a value
// root validates. R(s, d) is: s and what it applies in place ($ref, the
// combinators, if/then/else, dependent schemas) at d = 0; through the
// subschemas of one property or one item (all that may apply to it)
// below.
func costBy(g *schemaGraph, weight func(*jsonschema.Schema) uint64, limit uint64) [MaxNesting + 1]uint64 {
	var out [MaxNesting + 1]uint64
	n := len(g.nodes)
	w := make([]uint64, n)
	for i, s := range g.nodes {
		w[i] = weight(s)
	}
	prev := make([]uint64, n) // R(·, d-1)
	cur := make([]uint64, n)
	done := make([]bool, n)
	visiting := make([]bool, n)
	for d := 0; d <= MaxNesting; d++ {
		clear(done)
		var r func(i int32) uint64
		r = func(i int32) uint64 {
			if done[i] {
				return cur[i]
			}
			if visiting[i] {
				return limit // a schema that applies itself in place: no end
			}
			visiting[i] = true
			var v uint64
			if d == 0 {
				v = w[i]
			} else {
				v = g.below(i, prev, limit)
			}
			for _, c := range g.inPlace[i] {
				v = satAdd(v, r(c), limit)
			}
			visiting[i] = false
			done[i], cur[i] = true, v
			return v
		}
		for i := range n {
			r(int32(i))
		}
		out[d] = cur[0]
		if d > 0 {
			out[d] = max(out[d], out[d-1])
			if slices.Equal(cur, prev) {
				// A fixed point: every deeper level is the same.
				for e := d + 1; e <= MaxNesting; e++ {
					out[e] = out[d]
				}
				break
			}
		}
		prev, cur = cur, prev
	}
	return out
}

// schemaGraph is the compiled schema's subschemas, the root first, each
// with what it applies in place and its groups of subschemas one level
// down (as schemaNested), by index: built once, walked 129 times per
// measure.
type schemaGraph struct {
	nodes   []*jsonschema.Schema
	inPlace [][]int32
	nested  [][4][]int32
}

func newSchemaGraph(nodes []*jsonschema.Schema) *schemaGraph {
	index := make(map[*jsonschema.Schema]int32, len(nodes))
	for i, s := range nodes {
		index[s] = int32(i)
	}
	ids := func(ss []*jsonschema.Schema) []int32 {
		var out []int32
		for _, c := range ss {
			if c != nil {
				out = append(out, index[c])
			}
		}
		return out
	}
	g := &schemaGraph{nodes: nodes, inPlace: make([][]int32, len(nodes)), nested: make([][4][]int32, len(nodes))}
	for i, s := range nodes {
		g.inPlace[i] = ids(schemaInPlace(s))
		for k, group := range schemaNested(s) {
			g.nested[i][k] = ids(group.schemas)
		}
	}
	return g
}

// programSize is the size of the program regular expression src, which
// the schema's compile accepted, compiles to (regexpSize's estimate).
func programSize(cache map[string]uint64, src string) uint64 {
	if n, ok := cache[src]; ok {
		return n
	}
	n := uint64(len(src)) // if it does not parse here, its length
	if re, err := syntax.Parse(src, syntax.Perl); err == nil {
		n = uint64(regexpSize(re, bigClassWeight*maxRegexpInstructions, bigClassWeight))
	}
	cache[src] = n
	return n
}

// regexpSize estimates, from above, how many instructions re compiles to
// (regexp/syntax's compiler, after Simplify expands counted repetitions),
// each instruction matching a large character class counted classWeight
// times, saturating just past limit so that a huge program is never built
// to be measured. With classWeight 1 it is the program's size; with
// bigClassWeight, its cost per byte of text.
func regexpSize(re *syntax.Regexp, limit, classWeight int) int {
	return min(regexpNodeSize(re, limit, classWeight)+2, limit+1) // and the program's fail and match
}

// bigClassWeight is what an instruction matching a large character class
// (a Unicode category: hundreds of ranges, searched for each character)
// costs, in instructions of the usual kind: 43 to 60 ns a byte against 5
// to 9 (the fourth review).
const bigClassWeight = 8

func regexpNodeSize(re *syntax.Regexp, limit, classWeight int) int {
	n := 1
	switch re.Op {
	case syntax.OpCharClass:
		if len(re.Rune) > 16 { // more than 8 ranges
			n = classWeight
		}
	case syntax.OpLiteral:
		n = max(len(re.Rune), 1)
	case syntax.OpCapture:
		n = 2 + regexpNodeSize(re.Sub[0], limit, classWeight)
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
		n = 1 + regexpNodeSize(re.Sub[0], limit, classWeight)
		if mayMatchEmpty(re.Sub[0]) {
			n++ // a loop of what may match empty is guarded
		}
	case syntax.OpRepeat:
		times := max(re.Min, re.Max, 1)
		if re.Max == -1 {
			times = re.Min + 1
		}
		each := 1 + regexpNodeSize(re.Sub[0], limit, classWeight)
		if mayMatchEmpty(re.Sub[0]) {
			each++
		}
		n = int(min(mulSat(uint64(times), uint64(each)), uint64(limit)+1))
	case syntax.OpConcat, syntax.OpAlternate:
		n = 0
		if re.Op == syntax.OpAlternate {
			n = len(re.Sub) - 1 // its branch instructions
		}
		for _, sub := range re.Sub {
			if n += regexpNodeSize(sub, limit, classWeight); n > limit {
				break
			}
		}
	}
	return min(n, limit+1)
}

// mayMatchEmpty is false only where re surely matches at least one
// character.
func mayMatchEmpty(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpLiteral:
		return len(re.Rune) == 0
	case syntax.OpCharClass, syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return false
	case syntax.OpPlus, syntax.OpCapture:
		return mayMatchEmpty(re.Sub[0])
	case syntax.OpRepeat:
		return re.Min == 0 || mayMatchEmpty(re.Sub[0])
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			if !mayMatchEmpty(sub) {
				return false
			}
		}
	}
	return true
}

// regexpBudget compiles a schema's regular expressions for the validator
// (its RegexpEngine), refusing any whose program would exceed
// maxRegexpInstructions and, together, maxSchemaRegexpInstructions. Once
// the schema is compiled, it also checks the strings of format "regex"
// (asserted by drafts 4 to 7): those are parsed, never compiled.
type regexpBudget struct {
	used     int
	counted  map[string]bool // the schema's, each counted once
	compiled atomic.Bool
}

func (b *regexpBudget) compile(src string) (jsonschema.Regexp, error) {
	re, err := syntax.Parse(src, syntax.Perl)
	if err != nil {
		return nil, err
	}
	if err := b.count(src, re); err != nil {
		return nil, err
	}
	return &lazyRegexp{src: src}, nil
}

// count refuses re, parsed from src, if it is too big, or if it is the
// schema's and the schema's are too big together.
func (b *regexpBudget) count(src string, re *syntax.Regexp) error {
	n := regexpSize(re, maxRegexpInstructions, 1)
	if n > maxRegexpInstructions {
		return fmt.Errorf("the regular expression %s would compile to more than %s instructions", Excerpt(src), english.Sprint(maxRegexpInstructions))
	}
	if b.compiled.Load() || b.counted[src] {
		return nil
	}
	if b.counted == nil {
		b.counted = map[string]bool{}
	}
	b.counted[src] = true
	if b.used += n; b.used > maxSchemaRegexpInstructions {
		return fmt.Errorf("the schema's regular expressions would compile to more than %s instructions in all", english.Sprint(maxSchemaRegexpInstructions))
	}
	return nil
}

// lazyRegexp is compiled when first matched: a format "regex" string is
// only checked, never run.
type lazyRegexp struct {
	src  string
	once sync.Once
	re   *regexp.Regexp
}

func (l *lazyRegexp) String() string { return l.src }

func (l *lazyRegexp) MatchString(s string) bool {
	l.once.Do(func() { l.re = regexp.MustCompile(l.src) }) // it parsed, and is small
	return l.re.MatchString(s)
}

// maxSchemaNumberLength bounds how long a number in a schema may be
// written.
const maxSchemaNumberLength = 100

// schemaDocCheck refuses, before the validator compiles it, a schema
// document holding a number a double cannot hold (beyond its range, or so
// small it is zero) or written in more than maxSchemaNumberLength
// characters — the validator compiles and compares numbers as exact
// fractions, and 1e-999999 has a million digits — or a pattern too big
// for regexps (the validator would compile it first, and report it in an
// error quoting it whole), or more objects or levels than it compiles
// quickly. One schemaDocCheck walks a schema and all its references: its bounds are
// on them together.
type schemaDocCheck struct {
	regexps *regexpBudget
	objects int
	path    []string // where the walk is: joined only to say where it failed
}

// maxSchemaObjects bounds the objects (subschemas, and the objects their
// keywords hold) of a schema and its references: the validator's compile
// takes more than linear time in them (3,000 definitions referring to one
// another, 18,000 objects, took 5 s; 6,000 objects take 0.4 s).
const maxSchemaObjects = 5_000

// maxSchemaDocumentDepth bounds how deep a schema document nests: the
// validator's compile takes time in the square of it (1,000 levels of
// properties, 21 KB, took 5 s).
const maxSchemaDocumentDepth = 64

func (c *schemaDocCheck) where() string {
	return shorten("/" + strings.Join(c.path, "/"))
}

func (c *schemaDocCheck) check(doc any) error {
	if len(c.path) > maxSchemaDocumentDepth {
		return fmt.Errorf("the schema nests deeper than %d levels at %s", maxSchemaDocumentDepth, c.where())
	}
	switch v := doc.(type) {
	case json.Number:
		if !schemaNumber(string(v)) {
			return fmt.Errorf("the number %s at %s is not one a double can hold in at most %d characters; a schema's numbers must be", Excerpt(string(v)), c.where(), maxSchemaNumberLength)
		}
	case map[string]any:
		if c.objects++; c.objects > maxSchemaObjects {
			return fmt.Errorf("the schema and its references hold more than %s objects (subschemas and what their keywords hold); effectively compiles schemas of at most that many", english.Sprint(maxSchemaObjects))
		}
		var patterns []string
		if p, ok := v["pattern"].(string); ok {
			patterns = append(patterns, p)
		}
		if pp, ok := v["patternProperties"].(map[string]any); ok {
			for p := range pp {
				patterns = append(patterns, p)
			}
		}
		for _, p := range patterns {
			// What does not parse is left to the validator: it may not be
			// a pattern at all, but data (a const) named so.
			if re, err := syntax.Parse(p, syntax.Perl); err == nil {
				if err := c.regexps.count(p, re); err != nil {
					return fmt.Errorf("at %s: %w", c.where(), err)
				}
			}
		}
		for k, x := range v {
			if err := c.descend(k, x); err != nil {
				return err
			}
		}
	case []any:
		for i, x := range v {
			if err := c.descend(strconv.Itoa(i), x); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *schemaDocCheck) descend(name string, doc any) error {
	c.path = append(c.path, name)
	err := c.check(doc)
	c.path = c.path[:len(c.path)-1]
	return err
}

func schemaNumber(s string) bool {
	if len(s) > maxSchemaNumberLength {
		return false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return false
	}
	mantissa, _, _ := strings.Cut(strings.ToLower(s), "e")
	return f != 0 || strings.Trim(mantissa, "-0.") == ""
}

// check refuses a payload nested depth deep, of values values, size bytes
// and paired bytes in arrays of 2 to 20 items, whose validation would cost
// more than the bounds.
func (c *schemaCost) check(depth, values, size, paired int) error {
	d := min(max(depth, 0), MaxNesting)
	if n := c.apps[d]; n > MaxSchemaApplications {
		return decodeErr(ReasonUnusableSchema, "validating this payload (nested %d deep) against its JSON Schema would apply %s subschemas to one value (its references and combinators, every branch counted; the bound is %s)",
			depth, atLeast(n), english.Sprint(MaxSchemaApplications))
	}
	if w := mulSat(c.perValue[d], uint64(values)); w > maxSchemaValueWork {
		return decodeErr(ReasonUnusableSchema, "validating this payload (%s values) against its JSON Schema would take up to %s steps of per-value work (subschemas, enum values and numbers, every branch counted; the bound is %s)",
			english.Sprint(values), english.Sprint(w), english.Sprint(maxSchemaValueWork))
	}
	w := satAdd(mulSat(c.perByte[d], uint64(size)), mulSat(mulSat(c.unique[d], pairWeight), uint64(paired)), workCap)
	if w > maxSchemaByteWork {
		return decodeErr(ReasonUnusableSchema, "validating this payload (%s bytes) against its JSON Schema would take up to %s steps of per-byte work (patterns, uniqueItems, unevaluated members, every branch counted; the bound is %s)",
			english.Sprint(size), english.Sprint(w), english.Sprint(maxSchemaByteWork))
	}
	return nil
}

func mulSat(a, b uint64) uint64 {
	if a != 0 && b > workCap/a {
		return workCap
	}
	return a * b
}

// at is the most applications at one value of a payload nested depth
// levels deep.
func (c *schemaCost) at(depth int) uint64 {
	return c.apps[min(max(depth, 0), MaxNesting)]
}

// schemaInPlace are the schemas s applies to the value it validates.
func schemaInPlace(s *jsonschema.Schema) []*jsonschema.Schema {
	out := []*jsonschema.Schema{s.Ref, s.RecursiveRef, s.Not, s.If, s.Then, s.Else}
	if s.DynamicRef != nil {
		out = append(out, s.DynamicRef.Ref)
	}
	out = append(out, s.AllOf...)
	out = append(out, s.AnyOf...)
	out = append(out, s.OneOf...)
	for _, c := range s.DependentSchemas {
		out = append(out, c)
	}
	for _, dep := range s.Dependencies {
		if c, ok := dep.(*jsonschema.Schema); ok {
			out = append(out, c)
		}
	}
	return out
}

// childGroup is a set of s's subschemas for the values one level down:
// with alone, at most one of them applies to one value; without, all may.
type childGroup struct {
	schemas []*jsonschema.Schema
	alone   bool
}

// schemaNested groups the subschemas s applies to its properties and
// items: the most that can apply to one property's value is one of the
// named properties plus every pattern, additionalProperties, unevaluated
// and propertyNames; to one item, one positional schema plus the rest.
func schemaNested(s *jsonschema.Schema) []childGroup {
	var named, positional []*jsonschema.Schema
	for _, c := range s.Properties {
		named = append(named, c)
	}
	positional = append(positional, s.PrefixItems...)
	if items, ok := s.Items.([]*jsonschema.Schema); ok {
		positional = append(positional, items...)
	}
	props := []*jsonschema.Schema{s.PropertyNames, s.UnevaluatedProperties}
	for _, c := range s.PatternProperties {
		props = append(props, c)
	}
	if c, ok := s.AdditionalProperties.(*jsonschema.Schema); ok {
		props = append(props, c)
	}
	items := []*jsonschema.Schema{s.Items2020, s.Contains, s.UnevaluatedItems, s.ContentSchema}
	if c, ok := s.Items.(*jsonschema.Schema); ok {
		items = append(items, c)
	}
	if c, ok := s.AdditionalItems.(*jsonschema.Schema); ok {
		items = append(items, c)
	}
	return []childGroup{{named, true}, {props, false}, {positional, true}, {items, false}}
}

// below is the most weight node i's own subschemas put on one value one
// level down, given R(·, d-1) in prev: a property's value or an item,
// whichever is more. Of schemaNested's groups, the first and third apply
// one of theirs, the others all.
func (g *schemaGraph) below(i int32, prev []uint64, limit uint64) uint64 {
	sum := func(group []int32, alone bool) uint64 {
		var v uint64
		for _, c := range group {
			if alone {
				v = max(v, prev[c])
			} else {
				v = satAdd(v, prev[c], limit)
			}
		}
		return v
	}
	n := &g.nested[i]
	return max(satAdd(sum(n[0], true), sum(n[1], false), limit), satAdd(sum(n[2], true), sum(n[3], false), limit))
}
