package event

import (
	"encoding/json"
	"fmt"
	"hash/maphash"
	"math"
	"net/url"
	"reflect"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// What a schema may be is bounded when it is compiled: santhosh-tekuri's
// compiler takes more than linear time in a schema's objects and depth, its
// patterns are parsed and compiled, and its numbers are exact fractions.
// A schema and its references together may hold at most
// maxSchemaBytes, maxSchemaObjects subschemas and objects (booleans
// counted: {"allOf":[true, …]} is a subschema each), nest
// maxSchemaDocumentDepth deep, hold numbers a double can hold, and regular
// expressions of at most maxRegexpInstructions each,
// maxSchemaRegexpInstructions and maxSchemaPatternBytes in all (each
// source parsed and compiled once, however often it is used). $dynamicRef
// and $recursiveRef are refused (their targets are chosen while
// validating), and so is a schema that applies itself to the same value
// ($ref to itself, through allOf…): validating would never end. What a
// payload's validation may cost is bounded as it runs
// (jsonschema_validate.go).

// maxSchemaBytes bounds the text of a schema and its references.
const maxSchemaBytes = 1 << 20

const (
	maxRegexpInstructions       = 10_000
	maxSchemaRegexpInstructions = 100_000
	// Parsing costs up to 10 µs a byte of source (case-folded Unicode
	// classes): 0.3 s for these, once per schema.
	maxSchemaPatternBytes = 32 << 10
)

// stepInstruction is the steps (about nanoseconds) a program's instruction
// costs per byte of text it runs over: 5 to 11 ns measured, a large
// Unicode class 43 to 60 (counted bigClassWeight times).
const stepInstruction = 12

// schemaNodes are the compiled schema's subschemas, the root first. It
// refuses $dynamicRef and $recursiveRef, and a schema that applies itself
// to the same value.
func schemaNodes(root *jsonschema.Schema) ([]*jsonschema.Schema, error) {
	nodes := []*jsonschema.Schema{root}
	seen := map[*jsonschema.Schema]bool{root: true}
	for i := 0; i < len(nodes); i++ {
		s := nodes[i]
		if s.DynamicRef != nil || s.RecursiveRef != nil {
			return nil, fmt.Errorf("%s uses $dynamicRef or $recursiveRef, which effectively does not validate: their targets are chosen while validating (use $ref)", s.Location)
		}
		if s.ContentEncoding != nil || s.ContentMediaType != nil || s.ContentSchema != nil || len(s.Extensions) > 0 {
			return nil, fmt.Errorf("%s: content assertions and vocabulary extensions are not validated", s.Location)
		}
		for _, c := range append(schemaInPlace(s), schemaBelow(s)...) {
			if c != nil && !seen[c] {
				seen[c] = true
				nodes = append(nodes, c)
			}
		}
	}
	// A cycle of schemas applied in place never ends.
	const (
		unseen = iota
		open
		done
	)
	state := make(map[*jsonschema.Schema]int, len(nodes))
	var visit func(s *jsonschema.Schema) error
	visit = func(s *jsonschema.Schema) error {
		switch state[s] {
		case open:
			return fmt.Errorf("%s applies itself to the value it validates (through $ref or a combinator, without descending into a member or an item): validating would never end", s.Location)
		case done:
			return nil
		}
		state[s] = open
		for _, c := range schemaInPlace(s) {
			if c != nil {
				if err := visit(c); err != nil {
					return err
				}
			}
		}
		state[s] = done
		return nil
	}
	for _, s := range nodes {
		if err := visit(s); err != nil {
			return nil, err
		}
	}
	return nodes, nil
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
		if re.Flags&syntax.FoldCase != 0 {
			// Under (?i) a non-ASCII letter that does not match walks its
			// whole fold orbit in Unicode's tables (θ ϑ Θ ϴ), as a large
			// class does: 500 of "θ?" ran at 2.5 ns a step (the
			// thirteenth review).
			for _, r := range re.Rune {
				if r > unicode.MaxASCII {
					n += classWeight - 1
				}
			}
		}
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
// (its RegexpEngine), each source once however often the schema uses it,
// refusing one whose program would exceed maxRegexpInstructions and, all
// the schema's together, more than maxSchemaRegexpInstructions or
// maxSchemaPatternBytes of source. Once the schema is compiled, it checks
// the strings of format "regex" (asserted by drafts 4 to 7): parsed, never
// compiled, never kept.
type regexpBudget struct {
	schema       map[string]*schemaRegexp
	instructions int
	bytes        int
	compiled     atomic.Bool
}

// schemaRegexp is one of a schema's regular expressions: parsed when the
// schema is, compiled when first matched.
type schemaRegexp struct {
	src  string
	err  error  // it does not parse
	cost uint64 // steps per byte of text
	once sync.Once
	re   *regexp.Regexp
}

func (b *regexpBudget) compile(src string) (jsonschema.Regexp, error) {
	if b.compiled.Load() {
		re, err := syntax.Parse(src, syntax.Perl)
		if err != nil {
			return nil, err
		}
		if regexpSize(re, maxRegexpInstructions, 1) > maxRegexpInstructions {
			return nil, fmt.Errorf("the regular expression %s would compile to more than %s instructions", Excerpt(src), english.Sprint(maxRegexpInstructions))
		}
		return &schemaRegexp{src: src}, nil
	}
	r, err := b.admit(src)
	if err != nil {
		return nil, err
	}
	if r.err != nil {
		return nil, r.err
	}
	return r, nil
}

// admit parses src, one of the schema's regular expressions, once, and
// refuses it when it or the schema's together are too big. A source that
// does not parse is the validator's to report.
func (b *regexpBudget) admit(src string) (*schemaRegexp, error) {
	if r, ok := b.schema[src]; ok {
		return r, nil
	}
	if b.bytes += len(src) * int(foldWeight(src)); b.bytes > maxSchemaPatternBytes {
		return nil, fmt.Errorf("the schema's regular expressions hold more than %s bytes in all", english.Sprint(maxSchemaPatternBytes))
	}
	if b.schema == nil {
		b.schema = map[string]*schemaRegexp{}
	}
	r := &schemaRegexp{src: src}
	b.schema[src] = r
	re, err := syntax.Parse(src, syntax.Perl)
	if err != nil {
		r.err = err
		return r, nil
	}
	n := regexpSize(re, maxRegexpInstructions, 1)
	if n > maxRegexpInstructions {
		return nil, fmt.Errorf("the regular expression %s would compile to more than %s instructions", Excerpt(src), english.Sprint(maxRegexpInstructions))
	}
	if b.instructions += n; b.instructions > maxSchemaRegexpInstructions {
		return nil, fmt.Errorf("the schema's regular expressions would compile to more than %s instructions in all", english.Sprint(maxSchemaRegexpInstructions))
	}
	r.re = regexp.MustCompile(src) // it parsed, and is small
	r.once.Do(func() {})
	if onePass(r.re) {
		// One instruction a character, a large class's at most, and the
		// instructions that match nothing between two (captures, empty
		// assertions: ^(?:()()…a)*$ runs hundreds a byte).
		prog, err := syntax.Compile(re.Simplify())
		if err != nil {
			return nil, err
		}
		r.cost = uint64(bigClassWeight+longestEmptyRun(prog)) * stepInstruction
	} else {
		r.cost = uint64(regexpSize(re, bigClassWeight*maxRegexpInstructions, bigClassWeight)) * stepInstruction
	}
	return r, nil
}

// longestEmptyRun is the most instructions that match no character prog
// can run between two that do.
func longestEmptyRun(prog *syntax.Prog) int {
	const visiting = -1
	memo := make([]int, len(prog.Inst)) // 0: not known; visiting; else 1 + the run
	var run func(pc uint32) int
	run = func(pc uint32) int {
		switch memo[pc] {
		case visiting:
			return len(prog.Inst) // a loop that matches nothing: the program's size
		case 0:
		default:
			return memo[pc] - 1
		}
		memo[pc] = visiting
		in := prog.Inst[pc]
		n := 0
		switch in.Op {
		case syntax.InstRune, syntax.InstRune1, syntax.InstRuneAny, syntax.InstRuneAnyNotNL, syntax.InstMatch, syntax.InstFail:
		case syntax.InstAlt, syntax.InstAltMatch:
			n = 1 + max(run(in.Out), run(in.Arg))
		default: // captures, empty-width assertions, no-ops
			n = 1 + run(in.Out)
		}
		n = min(n, len(prog.Inst))
		memo[pc] = n + 1
		return n
	}
	longest := run(uint32(prog.Start))
	for _, in := range prog.Inst {
		switch in.Op {
		case syntax.InstRune, syntax.InstRune1, syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
			longest = max(longest, run(in.Out))
		}
	}
	return longest
}

// onePass says whether Go matches re with its one-pass matcher, one
// instruction a byte whatever the program's size (an anchored pattern
// that never has two ways to go on: ^[\p{L} .-]{1,100}$). The regexp
// package keeps that in a private field; TestOnePassIsSeen fails if it
// ever stops being there, and until then every pattern is costed by its
// program's size.
func onePass(re *regexp.Regexp) bool {
	f := reflect.ValueOf(re).Elem().FieldByName("onepass")
	return f.IsValid() && f.Kind() == reflect.Pointer && !f.IsNil()
}

// foldWeight is how many times over a regular expression's source costs
// to parse: Go folds a class range under (?i) one character at a time,
// unless it spans all that folds ("(?i)[B-\x{10FFFF}]" is 125,000 folds,
// 3 ms for 8 bytes, where "(?i)\p{Lu}" is a table), so a source with an
// i flag anywhere is counted 20 times a byte (plus the 20,000 steps a byte
// a string of format regex pays): 4 KB of it is over a record's budget,
// and a schema's patterns may hold 1.6 KB of it.
func foldWeight(src string) uint64 {
	for rest := src; ; {
		i := strings.Index(rest, "(?")
		if i < 0 {
			return 1
		}
		rest = rest[i+2:]
		flags, _, _ := strings.Cut(rest, ")")
		flags, _, _ = strings.Cut(flags, ":")
		if strings.Contains(flags, "i") {
			return 20
		}
	}
}

// cost is the steps the schema's regular expression src costs per byte of
// text it runs over.
func (b *regexpBudget) cost(src string) uint64 {
	if r, ok := b.schema[src]; ok {
		return r.cost
	}
	return bigClassWeight * maxRegexpInstructions * stepInstruction // not one of the schema's: never so
}

func (r *schemaRegexp) String() string { return r.src }

func (r *schemaRegexp) MatchString(s string) bool {
	r.once.Do(func() { r.re = regexp.MustCompile(r.src) }) // it parsed, and is small
	return r.re.MatchString(s)
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
	// url is the length of the base URL the document is compiled under,
	// and here the length of the location of the value checked: the
	// base, the $ids above it and its JSON pointer, as the validator
	// escapes it. locations is their sum over the objects and booleans.
	url, here, locations int
	// values: the walk is inside a value of an array whose items the
	// meta-schema makes unique (see uniqueItemsKeywords): every value
	// there counts.
	values int
	// refs are the distinct $ref targets, anchors the $anchors,
	// $dynamicAnchors and $ids, anchorBytes their length (see done).
	refs map[refTarget]struct{}
	// base identifies the $ids on the walk's path: a $ref is resolved
	// against the resource it is in.
	base                 uint64
	anchors, anchorBytes int
	// uniqueMembers: the object about to be checked is a dependencies or
	// dependentRequired, whose arrays' items must be unique.
	uniqueMembers bool
	// data: the walk is inside a dataKeywords member, which the validator
	// reads as a value, not a schema, unless a $ref points into one
	// (intoData). dataErr is the first reference found there that a
	// schema may not hold.
	data     int
	intoData bool
	dataErr  error
	// nameMap: the object about to be checked maps names to schemas
	// (properties and the like): its members are not keywords.
	nameMap bool
	// roots are the documents and the objects with an $id (resources):
	// what a $ref's JSON pointer may be read from (see done).
	roots    []any
	pointers map[string]struct{}
}

// maxSchemaRefTargetValues bounds the values under the targets of $refs
// that are not at a subschema's place, summed over the distinct targets:
// the validator checks such a target's whole subtree against the
// meta-schema when it compiles it, again for each target above another
// (58 nested targets above an enum of 94,000 numbers took 14 s and 4.7
// GB). A value costs up to 4 µs (a number of a draft-4 enum, hashed as a
// fraction): at the bound, about a second.
const maxSchemaRefTargetValues = 250_000

// draft4Subschemas are where a subschema is in every draft (the
// library's draft.go, draft 4's list, which every later draft extends):
// under one keyword, under each member of another, or each item of one.
var draft4Subschemas = map[string]uint8{
	"not": subschemaOne, "additionalProperties": subschemaOne, "additionalItems": subschemaOne,
	"items": subschemaOne | subschemaList,
	"allOf": subschemaList, "anyOf": subschemaList, "oneOf": subschemaList,
	"definitions": subschemaMap, "properties": subschemaMap, "patternProperties": subschemaMap, "dependencies": subschemaMap,
}

const (
	subschemaOne uint8 = 1 << iota
	subschemaMap
	subschemaList
)

// uniqueItemsKeywords hold arrays whose items the meta-schemas make
// unique (enum in drafts 4 to 7, type, required; in dependencies and
// dependentRequired, each array). The validator looks for duplicates
// among them before it checks what they are, and it hashes an array or
// an object without lengths, so that [[],[]] and [[[]]] collide: 30,000
// such items took 5 s in an enum, 5.5 s in required, 6 s in type. An item
// that is an array or an object counts among the schema's objects, with
// everything in it; a string, number or boolean item hashes by its value
// and is free.
var uniqueItemsKeywords = map[string]bool{"enum": true, "type": true, "required": true, "dependencies": true, "dependentRequired": true}

// maxSchemaRefWork bounds the distinct $ref targets times the objects,
// anchors and resources of a schema (and their keys, at one per
// refKeyBytes): the validator compiles a target that is not at a
// subschema's place (under an unknown keyword, say) by copying the root's
// maps of them (2,490 such targets above 5,000 objects took 1.4 s; with
// an anchor on each object, 3.1 s; 2,300 beside 140 subschemas under a
// 20 KB name, 1.7 s). A unit is about 80 ns: at the bound, 0.4 s.
const (
	maxSchemaRefWork = 5_000_000
	refKeyBytes      = 800
)

// maxSchemaLocationBytes bounds the locations of a schema's objects and
// booleans, summed: the validator's compile keeps each subschema's
// location and compares it with every other's queued, so it takes time
// in the number of subschemas times that sum (a 100 KB property name
// above 1,000 subschemas took 2.7 s and 1.2 GB; 30 levels of 200-byte
// names above 4,900 took 4.5 s and 2.2 GB). At the bound 4,900
// subschemas compile in about 0.6 s (170 ms a megabyte).
const maxSchemaLocationBytes = 3 << 20

// maxSchemaObjects bounds the objects and booleans (subschemas, and what
// their keywords hold) of a schema and its references: the validator's
// compile takes more than linear time in them (3,000 definitions referring
// to one another, 18,000 objects, took 5 s; 6,000 objects take 0.4 s;
// {"allOf":[true, …]} with 200,000 took 4 minutes).
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
	_, isBool := doc.(bool)
	_, isObject := doc.(map[string]any)
	if isBool || isObject || c.values > 0 {
		if c.objects++; c.objects > maxSchemaObjects {
			return c.tooMany()
		}
	}
	if isBool || isObject {
		if c.locations += c.url + c.here; c.locations > maxSchemaLocationBytes {
			return fmt.Errorf("the locations of the schema's subschemas (their JSON pointers, as at %s) add up to more than %s bytes; effectively compiles schemas of at most that many (shorten the property names, or nest less)", c.where(), english.Sprint(maxSchemaLocationBytes))
		}
	}
	switch v := doc.(type) {
	case json.Number:
		if !schemaNumber(string(v)) {
			return fmt.Errorf("the number %s at %s is not one a double can hold in at most %d characters; a schema's numbers must be", Excerpt(string(v)), c.where(), maxSchemaNumberLength)
		}
	case map[string]any:
		unique, names := c.uniqueMembers, c.nameMap
		c.uniqueMembers, c.nameMap = false, false
		// A resource's locations begin with its $id (draft 4's id; both
		// are counted, whichever the draft reads), percent-escaped.
		id, _ := v["$id"].(string)
		id4, _ := v["id"].(string)
		idBytes := locationBytes(id) + locationBytes(id4)
		c.url += idBytes
		base := c.base
		if id != "" || id4 != "" {
			c.base = maphash.Comparable(schemaIDSeed, struct {
				base    uint64
				id, id4 string
			}{base, id, id4})
		}
		defer func() { c.url, c.base = c.url-idBytes, base }()
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
			if _, err := c.regexps.admit(p); err != nil {
				return fmt.Errorf("at %s: %w", c.where(), err)
			}
		}
		if err := c.references(v); err != nil {
			return err
		}
		for k, x := range v {
			arr, isArray := x.([]any)
			data := !names && dataKeywords[k]
			if data {
				c.data++
			}
			if !names && nameKeywords[k] {
				c.nameMap = true // its members are named schemas, not keywords
			}
			var err error
			switch {
			case c.values > 0:
				err = c.descend(k, x)
			case isArray && (unique || uniqueItemsKeywords[k] && k != "dependencies" && k != "dependentRequired"):
				err = c.uniqueItems(k, arr)
			case k == "dependencies" || k == "dependentRequired":
				c.uniqueMembers = true // its arrays (its schemas are checked as any)
				err = c.descend(k, x)
				c.uniqueMembers = false
			default:
				err = c.descend(k, x)
			}
			c.nameMap = false
			if data {
				c.data--
			}
			if err != nil {
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

// refTarget is a $ref as written in a resource (schemaDocCheck.base):
// one text in many resources names as many targets.
type refTarget struct {
	base uint64
	ref  string
}

var schemaIDSeed = maphash.MakeSeed()

// nameKeywords hold objects whose members are named schemas.
var nameKeywords = map[string]bool{"properties": true, "patternProperties": true, "$defs": true, "definitions": true, "dependentSchemas": true, "dependencies": true}

// dataKeywords hold values, not schemas.
var dataKeywords = map[string]bool{"const": true, "enum": true, "default": true, "examples": true}

// knownMetaSchema says whether $schema names one of the drafts'
// meta-schemas (json-schema.org/schema is the latest), with any fragment,
// as the validator reads them. Another is refused: the validator follows
// a chain of custom meta-schemas for every object that names one (2,490
// objects naming a chain of 2,490 references took 3.7 s; with longer
// names, 9.9 s).
func knownMetaSchema(u string) bool {
	u, _, _ = strings.Cut(u, "#")
	if rest, ok := strings.CutPrefix(u, "http://"); ok {
		u = rest
	} else if u, ok = strings.CutPrefix(u, "https://"); !ok {
		return false
	}
	switch u {
	case "json-schema.org/schema", "json-schema.org/draft-04/schema", "json-schema.org/draft-06/schema", "json-schema.org/draft-07/schema",
		"json-schema.org/draft/2019-09/schema", "json-schema.org/draft/2020-12/schema":
		return true
	}
	return false
}

// references checks a schema object's references: $dynamicRef and
// $recursiveRef are refused (their targets are chosen while validating,
// and the validator compiles everything they might reach first), and a
// $ref whose pointer spells an array index otherwise than as a plain
// number: the validator reads "00", "+0" and "-0" as 0 but keeps each
// spelling as a subschema of its own, compiling the subtree again for
// each (100 spellings of a 400-object subtree took 6 s, 200 of 800, 110 s).
func (c *schemaDocCheck) references(v map[string]any) error {
	// Inside data (a const, enum, default or examples) these are refused
	// only if a $ref points into data, which the validator then compiles
	// as a schema (see done).
	refuse := func(err error) error {
		if c.data == 0 {
			return err
		}
		if c.dataErr == nil {
			c.dataErr = err
		}
		return nil
	}
	if ms, ok := v["$schema"].(string); ok && !knownMetaSchema(ms) {
		if err := refuse(fmt.Errorf("%s names the meta-schema %s, which is not one of the drafts' (draft-04, -06, -07, 2019-09, 2020-12); effectively compiles schemas against those only", c.where(), Excerpt(ms))); err != nil {
			return err
		}
	}
	for _, k := range [...]string{"$dynamicRef", "$recursiveRef"} {
		if _, ok := v[k].(string); ok {
			if err := refuse(fmt.Errorf("%s uses %s, which effectively does not validate: its target is chosen while validating (use $ref)", c.where(), k)); err != nil {
				return err
			}
		}
	}
	for _, k := range [...]string{"$anchor", "$dynamicAnchor", "$id", "id"} {
		if a, ok := v[k].(string); ok {
			c.anchors++
			c.anchorBytes += len(a)
		}
	}
	if _, ok := v["$id"].(string); ok || len(c.path) == 0 {
		c.roots = append(c.roots, v)
	} else if _, ok := v["id"].(string); ok {
		c.roots = append(c.roots, v)
	}
	ref, ok := v["$ref"].(string)
	if !ok {
		return nil
	}
	if c.refs == nil {
		c.refs, c.pointers = map[refTarget]struct{}{}, map[string]struct{}{}
	}
	_, frag, _ := strings.Cut(ref, "#")
	if f, err := url.PathUnescape(frag); err == nil {
		frag = f
	}
	if strings.HasPrefix(frag, "/") {
		// A resource or an anchor is compiled where it is; a pointer's
		// target may be compiled on its own (maxSchemaRefWork).
		c.refs[refTarget{c.base, ref}] = struct{}{}
		c.pointers[frag] = struct{}{}
	}
	for _, tok := range strings.Split(frag, "/")[1:] {
		if dataKeywords[tok] {
			c.intoData = true
		}
		if n, err := strconv.Atoi(tok); err == nil && strconv.Itoa(n) != tok {
			if err := refuse(fmt.Errorf("the $ref %s at %s writes %q where an array index is read: write indexes as plain numbers (%d)", Excerpt(ref), c.where(), tok, n)); err != nil {
				return err
			}
		}
	}
	return nil
}

// refTargetValues is the sum, over the distinct JSON pointers of $refs
// and the roots they may be read from, of the values under the targets
// that are not at a subschema's place; it stops counting past limit.
func (c *schemaDocCheck) refTargetValues(limit int) int {
	n := 0
	for p := range c.pointers {
		tokens := strings.Split(p, "/")[1:]
		for i, t := range tokens {
			tokens[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
		}
		for _, root := range c.roots {
			n += len(tokens) // reading the pointer
			if target, subschema, found := readPointer(root, tokens); found && !subschema {
				n += countValues(target, limit-n)
			}
			if n > limit {
				return n
			}
		}
	}
	return n
}

// readPointer reads tokens from root, a schema, and says whether the
// value it reaches is at a subschema's place (draft4Subschemas).
func readPointer(root any, tokens []string) (target any, subschema, found bool) {
	cur, schema := root, true
	for i := 0; i < len(tokens); i++ {
		tok := tokens[i]
		var next any
		switch v := cur.(type) {
		case map[string]any:
			x, ok := v[tok]
			if !ok {
				return nil, false, false
			}
			next = x
		case []any:
			k, err := strconv.Atoi(tok)
			if err != nil || k < 0 || k >= len(v) {
				return nil, false, false
			}
			next = v[k]
		default:
			return nil, false, false
		}
		kind := uint8(0)
		if schema {
			kind = draft4Subschemas[tok]
		}
		switch _, isList := next.([]any); {
		case kind&subschemaList != 0 && isList && i+1 < len(tokens):
			if k, err := strconv.Atoi(tokens[i+1]); err == nil && k >= 0 && k < len(next.([]any)) {
				cur, schema = next.([]any)[k], true
				i++
				continue
			}
			return nil, false, false
		case kind&subschemaMap != 0 && i+1 < len(tokens):
			m, ok := next.(map[string]any)
			if !ok {
				return nil, false, false
			}
			x, ok := m[tokens[i+1]]
			if !ok {
				return nil, false, false
			}
			cur, schema = x, true
			i++
			continue
		case kind&subschemaOne != 0 && !isList:
			cur, schema = next, true
			continue
		}
		cur, schema = next, false
	}
	switch cur.(type) {
	case map[string]any, bool:
		return cur, schema, true
	}
	return cur, false, true
}

// countValues counts the values in v, itself included, up to limit.
func countValues(v any, limit int) int {
	n := 1
	switch v := v.(type) {
	case map[string]any:
		for _, x := range v {
			if n > limit {
				break
			}
			n += countValues(x, limit-n)
		}
	case []any:
		for _, x := range v {
			if n > limit {
				break
			}
			n += countValues(x, limit-n)
		}
	}
	return n
}

// done checks what is bounded over the schema and its references
// together, once all are checked.
func (c *schemaDocCheck) done() error {
	if c.intoData && c.dataErr != nil {
		return fmt.Errorf("%w, in data a $ref points into", c.dataErr)
	}
	if n := c.refTargetValues(maxSchemaRefTargetValues); n > maxSchemaRefTargetValues {
		return fmt.Errorf("the schema's $refs point at places that are not subschemas (not under properties, definitions, items, allOf and the other keywords that hold one) above more than %s values in all; effectively compiles schemas of at most that many (move what they point at into definitions)", english.Sprint(maxSchemaRefTargetValues))
	}
	if work := len(c.refs) * (c.objects + c.anchors + (c.locations+c.anchorBytes)/refKeyBytes); work > maxSchemaRefWork {
		return fmt.Errorf("the schema and its references refer to %s distinct locations over %s objects and %s anchors and $ids; effectively compiles at most %s of one times the other (refer to fewer locations, or through $defs)",
			english.Sprint(len(c.refs)), english.Sprint(c.objects), english.Sprint(c.anchors), english.Sprint(maxSchemaRefWork))
	}
	return nil
}

func (c *schemaDocCheck) tooMany() error {
	return fmt.Errorf("the schema and its references hold more than %s objects and booleans (subschemas and what their keywords hold); effectively compiles schemas of at most that many", english.Sprint(maxSchemaObjects))
}

func (c *schemaDocCheck) descend(name string, doc any) error {
	defer c.enter(name)()
	return c.check(doc)
}

// enter moves the walk to the member name of the value checked; the
// function it returns moves it back.
func (c *schemaDocCheck) enter(name string) (leave func()) {
	c.path = append(c.path, name)
	w := 1 + locationBytes(name)
	c.here += w
	return func() {
		c.here -= w
		c.path = c.path[:len(c.path)-1]
	}
}

// uniqueItems checks items, the array at member name whose items the
// meta-schema makes unique: an item that is an array or an object counts
// with everything in it.
func (c *schemaDocCheck) uniqueItems(name string, items []any) error {
	defer c.enter(name)()
	for i, x := range items {
		switch x.(type) {
		case []any, map[string]any:
			c.values++
		}
		err := c.descend(strconv.Itoa(i), x)
		switch x.(type) {
		case []any, map[string]any:
			c.values--
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// locationBytes is how long name is in a location: a JSON pointer token
// (~ and / take two bytes), path-escaped (a byte other than a letter, a
// digit, -, . or _ takes up to three).
func locationBytes(name string) int {
	n := 0
	for i := 0; i < len(name); i++ {
		switch b := name[i]; {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9', b == '-', b == '.', b == '_':
			n++
		case b == '~' || b == '/':
			n += 2
		default:
			n += 3
		}
	}
	return n
}

func schemaNumber(s string) bool {
	if len(s) > maxSchemaNumberLength {
		return false
	}
	f, err := parseDouble(s) // never ParseFloat's slow path: 1e-320 ×94,000 took 1.6 s
	if err != nil {
		return false
	}
	mantissa, _, _ := strings.Cut(strings.ToLower(s), "e")
	return f != 0 || strings.Trim(mantissa, "-0.") == ""
}

func mulSat(a, b uint64) uint64 {
	if a != 0 && b > math.MaxUint64/a {
		return math.MaxUint64
	}
	return a * b
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

// schemaBelow are the schemas s applies to its members and items.
func schemaBelow(s *jsonschema.Schema) []*jsonschema.Schema {
	out := []*jsonschema.Schema{s.PropertyNames, s.UnevaluatedProperties, s.Items2020, s.Contains, s.UnevaluatedItems}
	for _, c := range s.Properties {
		out = append(out, c)
	}
	for _, c := range s.PatternProperties {
		out = append(out, c)
	}
	out = append(out, s.PrefixItems...)
	switch items := s.Items.(type) {
	case *jsonschema.Schema:
		out = append(out, items)
	case []*jsonschema.Schema:
		out = append(out, items...)
	}
	for _, a := range []any{s.AdditionalProperties, s.AdditionalItems} {
		if c, ok := a.(*jsonschema.Schema); ok {
			out = append(out, c)
		}
	}
	return out
}
