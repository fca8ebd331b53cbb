package event

import (
	"fmt"
	"hash/maphash"
	"math/big"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/message"
)

// effectively validates a payload against the schema santhosh-tekuri's
// compiler built (drafts 4 to 2020-12: references resolved, the schema
// checked against its meta-schema, formats and patterns compiled), with a
// validator of its own: the library's follows every branch to the end,
// records every failure with a copy of where it is, hashes a subtree again
// for every array above it, and never stops, so five rounds of weighing
// its work beforehand from the schema and the payload's size each left an
// attack of seconds or gigabytes, and refused real records besides.
//
// This one stops at the first failure, and it pays for its work as it
// does it: each step is charged, before it runs, in proportion to what it
// will touch (a pattern: its program's size times the text's length; a
// comparison: the values' sizes; a number: its digits), against
// maxSchemaWork per payload. A payload whose validation would go past the
// budget, apply subschemas more than maxSchemaFrames deep, or hold more than
// maxSchemaLiveMembers members in its unevaluated sets at once is
// unusable_schema: the schema is too costly for that payload. So a
// schema's cost is never guessed: a record pays for what its validation
// does, whatever the schema.
//
// It keeps the library's semantics, keyword by keyword and in its order
// (TestJSONSchemaValidatorAgreesWithTheLibrary compares the two over the
// official test suite's schemas and generated payloads).

// maxSchemaWork is the work one payload's validation may do, in steps of
// about a nanosecond on a small machine (TestJSONSchemaWorstCases prints
// what the costliest payloads of each kind take per step). Real records
// use a fraction: a megabyte of order lines with patterns, enums and
// uniqueItems takes tens of millions.
const maxSchemaWork = 1_000_000_000

// maxSchemaFrames bounds how deep subschemas apply, each $ref, combinator
// and nested value one level: the stack, which GOMEMLIMIT does not count,
// stays within a few megabytes. A payload nests at most MaxNesting deep.
const maxSchemaFrames = 1_000

// maxSchemaLiveMembers bounds the members held at once in the sets of
// properties and items not yet evaluated (kept for unevaluatedProperties
// and unevaluatedItems, one set per subschema applied in place): about
// 60 MB.
const maxSchemaLiveMembers = 1_000_000

// The steps charged for each kind of work: about its cost in nanoseconds.
const (
	stepApply         = 200    // a subschema applied: its frame, its checks
	stepMember        = 80     // a member put in, or compared against, an unevaluated set
	stepNode          = 20     // a value visited: compared, hashed, iterated
	stepNumber        = 100    // a number compared (plus a step per 8 digits), or 18 of its digits divided
	stepFormat        = 20     // per byte of a string checked against a format, but for formatWeights
	stepRegexByte     = 20_000 // per byte of a string parsed as a regular expression
	stepFailure       = 100    // a failure, plus a step per level of its location
	stepMultipleOf    = 60     // 18 digits divided by a divisor of 64 bits
	stepMultipleOfBig = 400    // by a longer one
	stepLookup        = 50     // a payload object's member visited or looked up (a large map is cache-cold)
	stepHash          = 300    // an item hashed and looked up, for uniqueItems
)

// formatWeights are the formats that cost more a byte than stepFormat.
// (json-pointer and relative-json-pointer split the string into a
// substring per slash, semver per dot.)
var formatWeights = map[string]uint64{"duration": 100, "period": 100, "json-pointer": 200, "relative-json-pointer": 200, "semver": 100}

// maxRegexFormatLength bounds the strings format "regex" parses: parsing
// case-folded Unicode classes takes microseconds a byte.
const maxRegexFormatLength = 4096

// schemaValidator validates payloads against one compiled schema.
type schemaValidator struct {
	root *jsonschema.Schema
	info map[*jsonschema.Schema]*schemaInfo
	seed maphash.Seed
}

// schemaInfo is what a subschema's checks need that the compiled schema
// holds only privately or at a cost per use.
type schemaInfo struct {
	types      uint8 // typeBits; 0 when the schema has no type
	enumTypes  uint8
	enumString map[string]bool // the enum's strings, looked up instead of scanned
	pattern    uint64          // the pattern's cost per byte of text
	patterns   map[jsonschema.Regexp]uint64
	// The numeric bounds, as decimals.
	minimum, maximum, exclusiveMinimum, exclusiveMaximum *decimal
	multipleOf                                           *divisor
	enumNumber                                           map[decimal]bool
	constValue                                           any
	enumValues                                           []any
	// discriminators are the properties whose schemas hold a const or an
	// enum: checked first, they fail the wrong branch of a oneOf of event
	// types before its other properties are checked.
	discriminators []string
	// consts are the string consts of properties a value must meet to
	// pass the schema (its own properties, and its $ref's): a oneOf,
	// anyOf or if skips a branch whose const the value's property is
	// not, without applying it.
	consts []propertyConst
	// Which members the schema itself evaluates (as the library counts
	// them for unevaluatedProperties and unevaluatedItems).
	allProps  bool
	allItems  bool
	someItems int
}

const (
	typeNull uint8 = 1 << iota
	typeBoolean
	typeNumber
	typeInteger
	typeString
	typeArray
	typeObject
)

var typeNames = map[string]uint8{"null": typeNull, "boolean": typeBoolean, "number": typeNumber, "integer": typeInteger, "string": typeString, "array": typeArray, "object": typeObject}

func newSchemaValidator(root *jsonschema.Schema, nodes []*jsonschema.Schema, regexps *regexpBudget) (*schemaValidator, error) {
	sv := &schemaValidator{root: root, info: make(map[*jsonschema.Schema]*schemaInfo, len(nodes)), seed: maphash.MakeSeed()}
	for _, s := range nodes {
		in := &schemaInfo{}
		if s.Types != nil {
			for _, t := range s.Types.ToStrings() {
				in.types |= typeNames[t]
			}
		}
		// The schema's values as the payload's are: numbers as decimals
		// (copies: the compiled schema is the library's).
		if s.Const != nil {
			in.constValue = asDecimals(deepCopyJSON(*s.Const))
		}
		if s.Enum != nil {
			for _, v := range s.Enum.Values {
				v = asDecimals(deepCopyJSON(v))
				in.enumValues = append(in.enumValues, v)
				if d, ok := v.(decimal); ok {
					if in.enumNumber == nil {
						in.enumNumber = map[decimal]bool{}
					}
					in.enumNumber[d] = true
				}
				in.enumTypes |= jsonTypeOf(v)
				if str, ok := v.(string); ok {
					if in.enumString == nil {
						in.enumString = map[string]bool{}
					}
					in.enumString[str] = true
				}
			}
		}
		if s.Pattern != nil {
			in.pattern = regexps.cost(s.Pattern.String())
		}
		for name, sub := range s.Properties {
			if sub.Const != nil || sub.Enum != nil {
				in.discriminators = append(in.discriminators, name)
			}
		}
		for re := range s.PatternProperties {
			if in.patterns == nil {
				in.patterns = map[jsonschema.Regexp]uint64{}
			}
			in.patterns[re] = regexps.cost(re.String())
		}
		in.allProps = s.AdditionalProperties != nil
		if s.DraftVersion < 2020 {
			in.allItems = s.AdditionalItems != nil
			switch items := s.Items.(type) {
			case *jsonschema.Schema:
				in.allItems = true
			case []*jsonschema.Schema:
				in.someItems = len(items)
			}
		} else {
			in.allItems = s.Items2020 != nil
			in.someItems = len(s.PrefixItems)
		}
		for _, b := range []struct {
			r  *big.Rat
			to **decimal
		}{{s.Minimum, &in.minimum}, {s.Maximum, &in.maximum}, {s.ExclusiveMinimum, &in.exclusiveMinimum}, {s.ExclusiveMaximum, &in.exclusiveMaximum}} {
			if b.r != nil {
				d, err := ratDecimal(b.r)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", s.Location, err)
				}
				*b.to = &d
			}
		}
		if s.MultipleOf != nil {
			m, err := ratDecimal(s.MultipleOf)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.Location, err)
			}
			in.multipleOf = newDivisor(m)
		}
		sv.info[s] = in
	}
	for _, s := range nodes {
		sv.info[s].consts = propertyConsts(s)
	}
	return sv, nil
}

// propertyConst is a property that must hold a string.
type propertyConst struct{ name, value string }

// propertyConsts are the string consts of the properties s requires of
// a value that has them, where its properties apply (beside a $ref only
// from draft 2019-09). What its $ref requires is its $ref's: walked, not
// copied (a const list copied into each of 2,900 references held 200 MB).
func propertyConsts(s *jsonschema.Schema) []propertyConst {
	var out []propertyConst
	if s.Ref == nil || s.DraftVersion >= 2019 {
		for name, sub := range s.Properties {
			if sub.Const != nil {
				if v, ok := (*sub.Const).(string); ok {
					out = append(out, propertyConst{name, v})
				}
			}
		}
	}
	return out
}

// cannotPass says, cheaply, that v fails s: v has a property whose
// value is not the string s requires of it.
func (r *schemaRun) cannotPass(s *jsonschema.Schema, v any) bool {
	obj, ok := v.(map[string]any)
	if !ok || r.explain { // explaining, the branch's own failure is said
		return false
	}
	for hops := 0; s != nil && hops < 8; s, hops = s.Ref, hops+1 {
		r.charge(stepNode)
		for _, c := range r.sv.info[s].consts {
			r.charge(stepLookup + uint64(len(c.name)+len(c.value))/8)
			if x, ok := obj[c.name]; ok {
				if str, ok := x.(string); !ok || str != c.value {
					return true
				}
			}
		}
	}
	return false
}

// deepCopyJSON copies a value jsonschema.UnmarshalJSON read.
func deepCopyJSON(v any) any {
	switch v := v.(type) {
	case map[string]any:
		c := make(map[string]any, len(v))
		for k, x := range v {
			c[k] = deepCopyJSON(x)
		}
		return c
	case []any:
		c := make([]any, len(v))
		for i, x := range v {
			c[i] = deepCopyJSON(x)
		}
		return c
	}
	return v
}

// jsonTypeOf is v's type, a number an integer too when it is one.
func jsonTypeOf(v any) uint8 {
	switch v := v.(type) {
	case nil:
		return typeNull
	case bool:
		return typeBoolean
	case string:
		return typeString
	case []any:
		return typeArray
	case map[string]any:
		return typeObject
	case decimal:
		if v.isInteger() {
			return typeNumber | typeInteger
		}
		return typeNumber
	}
	return 0
}

// schemaFailure is where and why a payload first failed.
type schemaFailure struct {
	at   []pathStep
	kind jsonschema.ErrorKind
}

func (f *schemaFailure) String() string {
	if f.kind == nil { // a run that does not explain
		return "it fails"
	}
	var b strings.Builder
	for _, p := range f.at {
		b.WriteByte('/')
		if p.index >= 0 {
			b.WriteString(strconv.Itoa(p.index))
		} else {
			b.WriteString(p.name)
		}
		if b.Len() > 1000 {
			break
		}
	}
	return fmt.Sprintf("at /%s: %s", shorten(strings.TrimPrefix(b.String(), "/")), describeFailure(f.kind))
}

// pathStep is one step of a value's location: a member's name, or an
// item's index (when index ≥ 0).
type pathStep struct {
	name  string
	index int
}

// schemaOverBudget ends a validation that would do more than a payload may.
type schemaOverBudget struct{ why string }

// schemaRun is one payload's validation.
type schemaRun struct {
	sv      *schemaValidator
	explain bool // build each failure, to say where and why
	work    int64
	frames  int
	live    int
	path    []pathStep
}

// validate validates v, a value jsonschema.UnmarshalJSON read, its
// numbers made decimals (asDecimals). It
// returns the first failure, or an error when the validation would cost
// more than a payload may.
func (sv *schemaValidator) validate(v any) (*schemaFailure, error) {
	fail, used, over := sv.run(v, false, maxSchemaWork)
	if over != "" {
		return nil, decodeErr(ReasonUnusableSchema, "validating this payload against its JSON Schema %s: effectively validates a record only within a fixed budget, so that no schema can stall a partition", over)
	}
	if fail == nil {
		return nil, nil
	}
	// Again, to say where and why, within what the budget has left: about
	// the same steps (members are visited in another order), or it is
	// said that where is too costly to say.
	if why, _, over := sv.run(v, true, maxSchemaWork-used); over == "" && why != nil {
		return why, nil
	}
	return &schemaFailure{kind: unexplained{}}, nil
}

// run validates v once, explaining its failure or not, in steps. over
// says why it stopped, when it did.
func (sv *schemaValidator) run(v any, explain bool, budget int64) (fail *schemaFailure, steps int64, over string) {
	r := &schemaRun{sv: sv, work: budget, explain: explain}
	defer func() {
		if p := recover(); p != nil {
			ob, ok := p.(schemaOverBudget)
			if !ok {
				panic(p)
			}
			fail, steps, over = nil, budget, ob.why
		}
	}()
	_, fail = r.validate(sv.root, v, false)
	return fail, budget - r.work, ""
}

func (r *schemaRun) charge(steps uint64) {
	if steps > uint64(r.work) {
		r.work = -1
		panic(schemaOverBudget{fmt.Sprintf("would take more than %s steps of work", english.Sprint(maxSchemaWork))})
	}
	r.work -= int64(steps)
}

// fail is a failure where the run is. Only a run that explains builds
// it: the first run of a payload only finds whether it passes (a valid
// payload fails in all but one branch of each oneOf, and those failures
// are dropped).
func (r *schemaRun) fail(k func() jsonschema.ErrorKind) *schemaFailure {
	if !r.explain {
		r.charge(stepFailure)
		return errSchemaFailed
	}
	r.charge(stepFailure + stepNode*uint64(len(r.path))) // the location copied
	return &schemaFailure{at: slices.Clone(r.path), kind: k()}
}

// errSchemaFailed is every failure of a run that does not explain.
var errSchemaFailed = &schemaFailure{}

// uneval keeps, where unevaluatedProperties or unevaluatedItems will
// need it, what of an object's members or an array's items the
// subschemas applied so far have evaluated: the library keeps what is
// left instead, a copy of every member for every subschema applied in
// place, which cost a batch of small events under 100 if/then branches
// more than the budget. It grows only by what is evaluated.
type uneval struct {
	tracking bool
	all      bool                // every member or item
	props    map[string]struct{} // members evaluated
	items    map[int]struct{}    // items at prefix and beyond evaluated
	prefix   int                 // items before it evaluated
	size     int                 // the value's members or items
	held     int                 // entries added, counted in r.live
}

func (r *schemaRun) unevalFrom(v any, s *jsonschema.Schema, in *schemaInfo, callerNeeds bool) uneval {
	switch v := v.(type) {
	case map[string]any:
		if callerNeeds || s.UnevaluatedProperties != nil {
			return uneval{tracking: true, all: in.allProps, size: len(v)}
		}
	case []any:
		if callerNeeds || s.UnevaluatedItems != nil {
			return uneval{tracking: true, all: in.allItems, prefix: min(in.someItems, len(v)), size: len(v)}
		}
	}
	return uneval{}
}

// done says whether nothing is left to evaluate, or nothing is kept.
func (ue *uneval) done() bool {
	return !ue.tracking || ue.all || len(ue.props)+ue.prefix+len(ue.items) >= ue.size
}

func (r *schemaRun) hold(ue *uneval) {
	r.charge(stepMember)
	ue.held++
	if r.live++; r.live > maxSchemaLiveMembers {
		panic(schemaOverBudget{fmt.Sprintf("would keep more than %s members in its sets of evaluated members at once", english.Sprint(maxSchemaLiveMembers))})
	}
}

func (r *schemaRun) evaluatedProp(ue *uneval, name string) {
	if !ue.tracking || ue.all {
		return
	}
	r.charge(uint64(len(name)) / 8) // hashed
	addEvaluated(r, ue, &ue.props, name)
}

func (r *schemaRun) evaluatedItem(ue *uneval, i int) {
	if !ue.tracking || ue.all || i < ue.prefix {
		return
	}
	addEvaluated(r, ue, &ue.items, i)
}

// addEvaluated adds k to one of ue's sets, held in r.live when it is new.
func addEvaluated[K comparable](r *schemaRun, ue *uneval, set *map[K]struct{}, k K) {
	if _, ok := (*set)[k]; ok {
		return
	}
	if *set == nil {
		*set = map[K]struct{}{}
	}
	r.hold(ue)
	(*set)[k] = struct{}{}
}

// merge adds to ue what other, a subschema applied in place that passed,
// evaluated.
func (r *schemaRun) merge(ue *uneval, other uneval) {
	if !ue.tracking || !other.tracking {
		return
	}
	if other.all {
		ue.all = true
		return
	}
	if other.prefix > ue.prefix {
		// Items below the new prefix are counted in it, not in items.
		r.charge(2 * stepNode * uint64(len(ue.items)))
		ue.prefix = other.prefix
		for i := range ue.items {
			if i < ue.prefix {
				delete(ue.items, i)
				ue.held--
				r.live--
			}
		}
	}
	for k := range other.props {
		r.evaluatedProp(ue, k)
	}
	for i := range other.items {
		r.evaluatedItem(ue, i)
	}
}

// validate applies s to v, the value at r.path. It returns what s left
// unevaluated when v passes, or the first failure.
func (r *schemaRun) validate(s *jsonschema.Schema, v any, callerNeeds bool) (uneval, *schemaFailure) {
	r.charge(stepApply)
	if r.frames++; r.frames > maxSchemaFrames {
		panic(schemaOverBudget{fmt.Sprintf("would apply subschemas more than %s deep (references, combinators and nested values together)", english.Sprint(maxSchemaFrames))})
	}
	in := r.sv.info[s]
	ue, f := r.apply(s, in, v, r.unevalFrom(v, s, in, callerNeeds))
	r.frames--
	r.live -= ue.held // merged into the caller's, or dropped
	return ue, f
}

func (r *schemaRun) apply(s *jsonschema.Schema, in *schemaInfo, v any, ue uneval) (uneval, *schemaFailure) {
	if s.Bool != nil {
		if *s.Bool {
			return ue, nil
		}
		return ue, r.fail(func() jsonschema.ErrorKind { return &kind.FalseSchema{} })
	}
	t := jsonTypeOf(v)
	if in.types != 0 && in.types&t == 0 {
		return ue, r.fail(func() jsonschema.ErrorKind { return &kind.Type{Got: jsonTypeName(t), Want: s.Types.ToStrings()} })
	}
	if s.Const != nil && !r.equals(v, in.constValue) {
		return ue, r.fail(func() jsonschema.ErrorKind { return &kind.Const{Got: v, Want: *s.Const} })
	}
	if s.Enum != nil && !r.inEnum(in, v, t) {
		return ue, r.fail(func() jsonschema.ErrorKind { return &kind.Enum{Got: v, Want: s.Enum.Values} })
	}
	if s.Format != nil {
		if str, ok := v.(string); ok {
			if s.Format.Name == "regex" {
				if len(str) > maxRegexFormatLength {
					panic(schemaOverBudget{fmt.Sprintf("would parse a string of %s bytes as a regular expression (format regex; at most %s)", english.Sprint(len(str)), english.Sprint(maxRegexFormatLength))})
				}
				r.charge(uint64(len(str)+1) * stepRegexByte * foldWeight(str))
			} else {
				r.charge(uint64(len(str)+1) * max(stepFormat, formatWeights[s.Format.Name]))
			}
		} else {
			r.charge(stepNode)
		}
		if err := s.Format.Validate(v); err != nil {
			return ue, r.fail(func() jsonschema.ErrorKind { return &kind.Format{Got: v, Want: s.Format.Name, Err: err} })
		}
	}
	if s.Ref != nil {
		if f := r.inPlace(s.Ref, v, &ue); f != nil {
			return ue, f
		}
		if s.DraftVersion < 2019 {
			return ue, nil
		}
	}
	var f *schemaFailure
	switch v := v.(type) {
	case map[string]any:
		f = r.object(s, in, v, &ue)
	case []any:
		f = r.array(s, v, &ue)
	case string:
		f = r.string(s, in, v)
	case decimal:
		f = r.number(in, v)
	}
	if f != nil {
		return ue, f
	}
	if f := r.conditions(s, v, &ue); f != nil {
		return ue, f
	}
	if s.DraftVersion >= 2019 {
		if f := r.unevaluated(s, v, &ue); f != nil {
			return ue, f
		}
	}
	return ue, nil
}

// inPlace applies sub to the value s applies to, merging what it
// evaluated into ue when it passes.
func (r *schemaRun) inPlace(sub *jsonschema.Schema, v any, ue *uneval) *schemaFailure {
	got, f := r.validate(sub, v, !ue.done())
	if f == nil {
		r.merge(ue, got)
	}
	return f
}

// below applies sub to v, a member or an item of the value at r.path.
func (r *schemaRun) below(sub *jsonschema.Schema, v any, step pathStep) *schemaFailure {
	r.path = append(r.path, step)
	_, f := r.validate(sub, v, false)
	r.path = r.path[:len(r.path)-1]
	return f
}

func named(name string) pathStep { return pathStep{name: name, index: -1} }
func indexed(i int) pathStep     { return pathStep{index: i} }

// jsonTypeName is the name of a value's type, as jsonTypeOf has it.
func jsonTypeName(t uint8) string {
	if t&typeNumber != 0 {
		return "number"
	}
	for name, bit := range typeNames {
		if t == bit {
			return name
		}
	}
	return "unknown"
}

func (r *schemaRun) inEnum(in *schemaInfo, v any, t uint8) bool {
	if in.enumTypes&t == 0 {
		return false
	}
	switch v := v.(type) {
	case string:
		r.charge(stepNode + uint64(len(v))/8)
		return in.enumString[v]
	case decimal:
		r.charge(stepNode + uint64(len(v.digits))/8)
		return in.enumNumber[v]
	}
	for _, x := range in.enumValues {
		if r.equals(v, x) {
			return true
		}
	}
	return false
}

func (r *schemaRun) object(s *jsonschema.Schema, in *schemaInfo, obj map[string]any, ue *uneval) *schemaFailure {
	if s.MinProperties != nil && len(obj) < *s.MinProperties {
		return r.fail(func() jsonschema.ErrorKind { return &kind.MinProperties{Got: len(obj), Want: *s.MinProperties} })
	}
	if s.MaxProperties != nil && len(obj) > *s.MaxProperties {
		return r.fail(func() jsonschema.ErrorKind { return &kind.MaxProperties{Got: len(obj), Want: *s.MaxProperties} })
	}
	if missing := r.missing(obj, s.Required); missing != nil {
		return r.fail(func() jsonschema.ErrorKind { return &kind.Required{Missing: missing} })
	}
	for pname, dep := range s.Dependencies {
		r.charge(stepLookup + uint64(len(pname))/8)
		if _, ok := obj[pname]; !ok {
			continue
		}
		switch dep := dep.(type) {
		case []string:
			if missing := r.missing(obj, dep); missing != nil {
				return r.fail(func() jsonschema.ErrorKind { return &kind.Dependency{Prop: pname, Missing: missing} })
			}
		case *jsonschema.Schema:
			if f := r.inPlace(dep, obj, ue); f != nil {
				return f
			}
		}
	}
	// Which properties are checked first changes no verdict, only how
	// soon a failing one is found.
	for _, pname := range in.discriminators {
		r.charge(stepLookup + uint64(len(pname))/8)
		if pvalue, ok := obj[pname]; ok {
			if f := r.below(s.Properties[pname], pvalue, named(pname)); f != nil {
				return f
			}
		}
	}
	members := obj
	if len(s.Properties) == 0 && len(s.PatternProperties) == 0 && s.AdditionalProperties == nil {
		members = nil // no keyword here reads them
	}
	for pname, pvalue := range members {
		r.charge(stepLookup + uint64(len(pname))/8)
		evaluated := false
		if sub, ok := s.Properties[pname]; ok {
			evaluated = true
			if sub.Const == nil && sub.Enum == nil { // else a discriminator, checked first, above
				if f := r.below(sub, pvalue, named(pname)); f != nil {
					return f
				}
			}
		}
		for re, sub := range s.PatternProperties {
			r.charge(mulSat(uint64(len(pname)+1), in.patterns[re]))
			if re.MatchString(pname) {
				evaluated = true
				if f := r.below(sub, pvalue, named(pname)); f != nil {
					return f
				}
			}
		}
		if !evaluated && s.AdditionalProperties != nil {
			evaluated = true
			switch a := s.AdditionalProperties.(type) {
			case bool:
				if !a { // the first is failure enough
					return r.fail(func() jsonschema.ErrorKind { return &kind.AdditionalProperties{Properties: []string{pname}} })
				}
			case *jsonschema.Schema:
				if f := r.below(a, pvalue, named(pname)); f != nil {
					return f
				}
			}
		}
		if evaluated {
			r.evaluatedProp(ue, pname)
		}
	}
	if s.DraftVersion == 4 {
		return nil
	}
	if s.PropertyNames != nil {
		for pname := range obj {
			// A failure is at the name, for the name's reason.
			if f := r.below(s.PropertyNames, pname, named(pname)); f != nil {
				return f
			}
		}
	}
	if s.DraftVersion == 6 {
		return nil
	}
	for pname, sub := range s.DependentSchemas {
		r.charge(stepLookup + uint64(len(pname))/8)
		if _, ok := obj[pname]; ok {
			if f := r.inPlace(sub, obj, ue); f != nil {
				return f
			}
		}
	}
	for pname, reqd := range s.DependentRequired {
		r.charge(stepLookup + uint64(len(pname))/8)
		if _, ok := obj[pname]; ok {
			if missing := r.missing(obj, reqd); missing != nil {
				return r.fail(func() jsonschema.ErrorKind { return &kind.DependentRequired{Prop: pname, Missing: missing} })
			}
		}
	}
	return nil
}

func (r *schemaRun) missing(obj map[string]any, names []string) []string {
	var missing []string
	for _, name := range names {
		r.charge(stepLookup + uint64(len(name))/8)
		if _, ok := obj[name]; !ok {
			missing = append(missing, name)
		}
	}
	return missing
}

func (r *schemaRun) array(s *jsonschema.Schema, arr []any, ue *uneval) *schemaFailure {
	if s.MinItems != nil && len(arr) < *s.MinItems {
		return r.fail(func() jsonschema.ErrorKind { return &kind.MinItems{Got: len(arr), Want: *s.MinItems} })
	}
	if s.MaxItems != nil && len(arr) > *s.MaxItems {
		return r.fail(func() jsonschema.ErrorKind { return &kind.MaxItems{Got: len(arr), Want: *s.MaxItems} })
	}
	if s.UniqueItems && len(arr) > 1 {
		if i, j := r.duplicates(arr); i >= 0 {
			return r.fail(func() jsonschema.ErrorKind { return &kind.UniqueItems{Duplicates: [2]int{i, j}} })
		}
	}
	if s.DraftVersion < 2020 {
		evaluated := 0
		switch items := s.Items.(type) {
		case *jsonschema.Schema:
			for i, item := range arr {
				if f := r.below(items, item, indexed(i)); f != nil {
					return f
				}
			}
			evaluated = len(arr)
		case []*jsonschema.Schema:
			evaluated = min(len(arr), len(items))
			for i, item := range arr[:evaluated] {
				if f := r.below(items[i], item, indexed(i)); f != nil {
					return f
				}
			}
		}
		switch a := s.AdditionalItems.(type) {
		case bool:
			if !a && evaluated != len(arr) {
				return r.fail(func() jsonschema.ErrorKind { return &kind.AdditionalItems{Count: len(arr) - evaluated} })
			}
		case *jsonschema.Schema:
			for i, item := range arr[evaluated:] {
				if f := r.below(a, item, indexed(evaluated+i)); f != nil {
					return f
				}
			}
		}
	} else {
		evaluated := min(len(s.PrefixItems), len(arr))
		for i, item := range arr[:evaluated] {
			if f := r.below(s.PrefixItems[i], item, indexed(i)); f != nil {
				return f
			}
		}
		if s.Items2020 != nil {
			for i, item := range arr[evaluated:] {
				if f := r.below(s.Items2020, item, indexed(evaluated+i)); f != nil {
					return f
				}
			}
		}
	}
	if s.Contains != nil {
		var matched []int
		var first *schemaFailure
		for i, item := range arr {
			if f := r.below(s.Contains, item, indexed(i)); f != nil {
				if first == nil {
					first = f
				}
				continue
			}
			matched = append(matched, i)
			if s.DraftVersion >= 2020 {
				r.evaluatedItem(ue, i)
			}
		}
		if s.MinContains != nil {
			if len(matched) < *s.MinContains {
				return r.fail(func() jsonschema.ErrorKind { return &kind.MinContains{Got: matched, Want: *s.MinContains} })
			}
		} else if len(matched) == 0 {
			if first != nil {
				return first
			}
			return r.fail(func() jsonschema.ErrorKind { return &kind.Contains{} })
		}
		if s.MaxContains != nil && len(matched) > *s.MaxContains {
			return r.fail(func() jsonschema.ErrorKind { return &kind.MaxContains{Got: matched, Want: *s.MaxContains} })
		}
	}
	return nil
}

func (r *schemaRun) string(s *jsonschema.Schema, in *schemaInfo, str string) *schemaFailure {
	// A string has between a quarter of its bytes and its bytes in
	// characters: counted (2 steps a byte) only when that does not decide.
	minDecided := s.MinLength == nil || (len(str)+3)/4 >= *s.MinLength
	maxDecided := s.MaxLength == nil || len(str) <= *s.MaxLength
	if !minDecided || !maxDecided {
		r.charge(stepNode + 2*uint64(len(str)))
		n := utf8.RuneCountInString(str)
		if s.MinLength != nil && n < *s.MinLength {
			return r.fail(func() jsonschema.ErrorKind { return &kind.MinLength{Got: n, Want: *s.MinLength} })
		}
		if s.MaxLength != nil && n > *s.MaxLength {
			return r.fail(func() jsonschema.ErrorKind { return &kind.MaxLength{Got: n, Want: *s.MaxLength} })
		}
	}
	if s.Pattern != nil {
		r.charge(mulSat(uint64(len(str)+1), in.pattern))
		if !s.Pattern.MatchString(str) {
			return r.fail(func() jsonschema.ErrorKind { return &kind.Pattern{Got: str, Want: s.Pattern.String()} })
		}
	}
	return nil
}

func (r *schemaRun) number(in *schemaInfo, n decimal) *schemaFailure {
	for _, b := range []struct {
		bound *decimal
		fails func(c int) bool
		name  string
	}{
		{in.minimum, func(c int) bool { return c < 0 }, "minimum"},
		{in.maximum, func(c int) bool { return c > 0 }, "maximum"},
		{in.exclusiveMinimum, func(c int) bool { return c <= 0 }, "exclusiveMinimum"},
		{in.exclusiveMaximum, func(c int) bool { return c >= 0 }, "exclusiveMaximum"},
	} {
		if b.bound == nil {
			continue
		}
		r.charge(stepNumber + uint64(min(len(n.digits), len(b.bound.digits)))/8)
		if b.fails(n.cmp(*b.bound)) {
			return r.fail(func() jsonschema.ErrorKind { return numberFailure{n, b.name, *b.bound} })
		}
	}
	if dv := in.multipleOf; dv != nil {
		// Chunks of 18 digits, each a multiplication and a remainder, in
		// 64 bits or (a divisor of more than 19 digits) in big integers.
		perChunk := uint64(stepMultipleOf)
		if dv.small == 0 {
			perChunk = stepMultipleOfBig
		}
		// And 10^(a−b) mod M by squaring, a multiplication a bit of a−b.
		gap := max(n.exp-int64(len(n.digits))-dv.b, 0)
		r.charge(stepNumber + perChunk*uint64(1+n.chunks()+bits.Len64(uint64(gap))))
		if !n.multipleOf(dv) {
			return r.fail(func() jsonschema.ErrorKind { return numberFailure{n, "multipleOf", dv.m} })
		}
	}
	return nil
}

// unexplained is a failure whose place finding again would take more than
// the budget had left.
type unexplained struct{}

func (unexplained) KeywordPath() []string { return nil }

func (unexplained) LocalizedString(*message.Printer) string {
	return "it fails (where is not said: finding it again would take more than the validation budget has left)"
}

// numberFailure is a number out of a bound: the library's kinds hold
// fractions, and a payload's number can be 1e-999999.
type numberFailure struct {
	got     decimal
	keyword string
	want    decimal
}

func (f numberFailure) KeywordPath() []string { return []string{f.keyword} }

func (f numberFailure) LocalizedString(*message.Printer) string {
	return fmt.Sprintf("%s: %s fails %s %s", f.keyword, Excerpt(f.got.String()), f.keyword, f.want.String())
}

func (r *schemaRun) conditions(s *jsonschema.Schema, v any, ue *uneval) *schemaFailure {
	if s.Not != nil {
		if _, f := r.validate(s.Not, v, false); f == nil {
			return r.fail(func() jsonschema.ErrorKind { return &kind.Not{} })
		}
	}
	for _, sub := range s.AllOf {
		if f := r.inPlace(sub, v, ue); f != nil {
			return f
		}
	}
	if len(s.AnyOf) > 0 {
		matched := false
		var first *schemaFailure
		for _, sub := range s.AnyOf {
			if r.cannotPass(sub, v) {
				continue
			}
			if f := r.inPlace(sub, v, ue); f != nil {
				if first == nil {
					first = f
				}
				continue
			}
			matched = true
			if ue.done() { // else every branch evaluates members
				break
			}
		}
		if !matched {
			if first == nil { // every branch skipped
				return r.fail(func() jsonschema.ErrorKind { return &kind.AnyOf{} })
			}
			return first
		}
	}
	if len(s.OneOf) > 0 {
		matched := -1
		var first *schemaFailure
		for i, sub := range s.OneOf {
			if r.cannotPass(sub, v) {
				continue
			}
			got, f := r.validate(sub, v, !ue.done())
			if f != nil {
				if first == nil {
					first = f
				}
				continue
			}
			if matched != -1 {
				return r.fail(func() jsonschema.ErrorKind { return &kind.OneOf{Subschemas: []int{matched, i}} })
			}
			matched = i
			r.merge(ue, got)
		}
		if matched == -1 {
			if first == nil { // every branch skipped
				return r.fail(func() jsonschema.ErrorKind { return &kind.OneOf{} })
			}
			return first
		}
	}
	if s.If != nil {
		if !r.cannotPass(s.If, v) && r.inPlace(s.If, v, ue) == nil {
			if s.Then != nil {
				return r.inPlace(s.Then, v, ue)
			}
		} else if s.Else != nil {
			return r.inPlace(s.Else, v, ue)
		}
	}
	return nil
}

func (r *schemaRun) unevaluated(s *jsonschema.Schema, v any, ue *uneval) *schemaFailure {
	if obj, ok := v.(map[string]any); ok && s.UnevaluatedProperties != nil && !ue.all {
		for pname, pvalue := range obj {
			r.charge(stepLookup + uint64(len(pname))/8)
			if _, ok := ue.props[pname]; ok {
				continue
			}
			if f := r.below(s.UnevaluatedProperties, pvalue, named(pname)); f != nil {
				return f
			}
		}
		ue.all = true
	}
	if arr, ok := v.([]any); ok && s.UnevaluatedItems != nil && !ue.all {
		for i := ue.prefix; i < len(arr); i++ {
			r.charge(stepNode)
			if _, ok := ue.items[i]; ok {
				continue
			}
			if f := r.below(s.UnevaluatedItems, arr[i], indexed(i)); f != nil {
				return f
			}
		}
		ue.all = true
	}
	return nil
}

// equals compares two JSON values as JSON Schema does: numbers by value,
// objects regardless of their members' order.
func (r *schemaRun) equals(a, b any) bool {
	r.charge(stepNode)
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, x := range a {
			r.charge(stepLookup + uint64(len(k))/8)
			y, ok := b[k]
			if !ok || !r.equals(x, y) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !r.equals(a[i], b[i]) {
				return false
			}
		}
		return true
	case nil:
		return b == nil
	case bool:
		b, ok := b.(bool)
		return ok && a == b
	case string:
		b, ok := b.(string)
		if ok {
			r.charge(uint64(min(len(a), len(b))) / 8)
		}
		return ok && a == b
	case decimal:
		b, ok := b.(decimal)
		if ok {
			r.charge(uint64(min(len(a.digits), len(b.digits))) / 8)
		}
		return ok && a == b
	}
	return false
}

// duplicates finds two equal items of arr: pair by pair in a short array,
// else by hash, comparing only items whose hashes collide.
func (r *schemaRun) duplicates(arr []any) (int, int) {
	if len(arr) <= 20 {
		for i := 1; i < len(arr); i++ {
			for j := range i {
				if r.equals(arr[i], arr[j]) {
					return j, i
				}
			}
		}
		return -1, -1
	}
	var h maphash.Hash
	h.SetSeed(r.sv.seed)
	// Not sized to the array: a duplicate at the start would return after
	// two items, and the tables for 500,000 (19 MB) were not paid for. It
	// grows as items are hashed, each paying stepHash.
	first := map[uint64]int{} // the first item of each hash
	var more map[uint64][]int // the others, of hashes that collide
	for i, item := range arr {
		r.charge(stepHash)
		h.Reset()
		r.hash(&h, item)
		sum := h.Sum64()
		j, ok := first[sum]
		if !ok {
			first[sum] = i
			continue
		}
		for _, j := range append([]int{j}, more[sum]...) {
			if r.equals(arr[j], item) {
				return j, i
			}
		}
		if more == nil {
			more = map[uint64][]int{}
		}
		more[sum] = append(more[sum], i)
	}
	return -1, -1
}

// writeLength writes n, ended, so that what follows it is read as n long.
func writeLength(h *maphash.Hash, n int) {
	var b [24]byte
	h.Write(strconv.AppendUint(b[:0], uint64(n), 10))
	h.WriteByte(':')
}

// hash writes v so that equal values (as equals has them) hash equally:
// a number as its double (equal numbers are equal doubles; the rare
// unequal ones that round alike are told apart by equals).
func (r *schemaRun) hash(h *maphash.Hash, v any) {
	r.charge(stepNode)
	switch v := v.(type) {
	case nil:
		h.WriteByte('n')
	case bool:
		if v {
			h.WriteByte('t')
		} else {
			h.WriteByte('f')
		}
	case string:
		// Each part written with its length, so that no two values write
		// alike: ["x\u0000sx"] and ["x","x"] did, and a crafted array of
		// them made uniqueItems compare every item with every other.
		r.charge(uint64(len(v)) / 8)
		h.WriteByte('s')
		writeLength(h, len(v))
		h.WriteString(v)
	case decimal: // equal numbers are equal decimals
		r.charge(uint64(len(v.digits)) / 8)
		h.WriteByte('d')
		if v.neg {
			h.WriteByte('-')
		}
		writeLength(h, len(v.digits))
		h.WriteString(v.digits)
		var b [24]byte
		h.Write(strconv.AppendInt(b[:0], v.exp, 10))
		h.WriteByte('e')
	case []any:
		h.WriteByte('[')
		writeLength(h, len(v))
		for _, x := range v {
			r.hash(h, x)
		}
	case map[string]any:
		// Members in any order: the sum of each member's own hash.
		var sum uint64
		var m maphash.Hash
		m.SetSeed(r.sv.seed)
		for k, x := range v {
			r.charge(stepMember + uint64(len(k))/8)
			m.Reset()
			writeLength(&m, len(k))
			m.WriteString(k)
			r.hash(&m, x)
			sum += m.Sum64()
		}
		h.WriteByte('{')
		var b [20]byte
		h.Write(strconv.AppendUint(b[:0], sum, 16))
	}
}
