package event

import (
	"encoding/json"
	"fmt"
	"hash/maphash"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
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
	stepApply     = 300    // a subschema applied: its frame, its checks
	stepMember    = 150    // a member put in, or compared against, an unevaluated set
	stepNode      = 20     // a value visited: compared, hashed, iterated
	stepNumber    = 100    // a number read as an exact fraction, compared, divided, plus a step per digit of it and of its exponent
	stepFormat    = 20     // per byte of a string checked against a format, but for formatWeights
	stepRegexByte = 20_000 // per byte of a string parsed as a regular expression
	stepFailure   = 100    // a failure, plus a step per level of its location
	stepHash      = 300    // an item hashed and looked up, for uniqueItems
)

// formatWeights are the formats that cost more a byte than stepFormat.
var formatWeights = map[string]uint64{"duration": 100, "period": 100}

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

func newSchemaValidator(root *jsonschema.Schema, nodes []*jsonschema.Schema, regexps *regexpBudget) *schemaValidator {
	sv := &schemaValidator{root: root, info: make(map[*jsonschema.Schema]*schemaInfo, len(nodes)), seed: maphash.MakeSeed()}
	for _, s := range nodes {
		in := &schemaInfo{}
		if s.Types != nil {
			for _, t := range s.Types.ToStrings() {
				in.types |= typeNames[t]
			}
		}
		// The schema's values as the payload's are: doubles, but for
		// integers.
		if s.Const != nil {
			*s.Const = asDoubles(*s.Const)
		}
		if s.Enum != nil {
			for i, v := range s.Enum.Values {
				v = asDoubles(v)
				s.Enum.Values[i] = v
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
		sv.info[s] = in
	}
	return sv
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
	case json.Number:
		if !strings.ContainsAny(string(v), ".eE") {
			return typeNumber | typeInteger
		}
		if r, ok := new(big.Rat).SetString(string(v)); ok && r.IsInt() {
			return typeNumber | typeInteger
		}
		return typeNumber
	case float64:
		if v == math.Trunc(v) {
			return typeNumber | typeInteger
		}
		return typeNumber
	}
	return 0
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// schemaFailure is where and why a payload first failed.
type schemaFailure struct {
	at   []pathStep
	kind jsonschema.ErrorKind
}

func (f *schemaFailure) String() string {
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
// numbers with a fraction or an exponent made doubles (asDoubles). It
// returns the first failure, or an error when the validation would cost
// more than a payload may.
func (sv *schemaValidator) validate(v any) (*schemaFailure, error) {
	fail, _, over := sv.run(v, false)
	if over != "" {
		return nil, decodeErr(ReasonUnusableSchema, "validating this payload against its JSON Schema %s: effectively validates a record only within a fixed budget, so that no schema can stall a partition", over)
	}
	if fail == nil {
		return nil, nil
	}
	// Again, to say where and why: about the same steps (members are
	// visited in another order), so within the budget, or said so.
	if why, _, over := sv.run(v, true); over == "" && why != nil {
		return why, nil
	}
	return &schemaFailure{kind: &kind.Schema{Location: "(where would take more than the budget to say)"}}, nil
}

// run validates v once, explaining its failure or not, in steps. over
// says why it stopped, when it did.
func (sv *schemaValidator) run(v any, explain bool) (fail *schemaFailure, steps int64, over string) {
	r := &schemaRun{sv: sv, work: maxSchemaWork, explain: explain}
	defer func() {
		if p := recover(); p != nil {
			ob, ok := p.(schemaOverBudget)
			if !ok {
				panic(p)
			}
			fail, steps, over = nil, maxSchemaWork, ob.why
		}
	}()
	_, fail = r.validate(sv.root, v, false)
	return fail, maxSchemaWork - r.work, ""
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
	r.charge(stepFailure + uint64(len(r.path)))
	if !r.explain {
		return errSchemaFailed
	}
	return &schemaFailure{at: slices.Clone(r.path), kind: k()}
}

// errSchemaFailed is every failure of a run that does not explain.
var errSchemaFailed = &schemaFailure{}

// uneval is what of an object's members or an array's items no subschema
// applied so far has evaluated, kept only where unevaluatedProperties or
// unevaluatedItems will need it (nil sets: all evaluated, or not kept).
type uneval struct {
	props map[string]struct{}
	items map[int]struct{}
}

func (r *schemaRun) unevalFrom(v any, s *jsonschema.Schema, in *schemaInfo, callerNeeds bool) (uneval, int) {
	var ue uneval
	n := 0
	switch v := v.(type) {
	case map[string]any:
		if !in.allProps && (callerNeeds || s.UnevaluatedProperties != nil) {
			n = len(v)
			r.hold(n)
			ue.props = make(map[string]struct{}, len(v))
			for k := range v {
				ue.props[k] = struct{}{}
			}
		}
	case []any:
		if !in.allItems && (callerNeeds || s.UnevaluatedItems != nil) && in.someItems < len(v) {
			n = len(v) - in.someItems
			r.hold(n)
			ue.items = make(map[int]struct{}, n)
			for i := in.someItems; i < len(v); i++ {
				ue.items[i] = struct{}{}
			}
		}
	}
	return ue, n
}

func (r *schemaRun) hold(n int) {
	r.charge(uint64(n) * stepMember)
	if r.live += n; r.live > maxSchemaLiveMembers {
		panic(schemaOverBudget{fmt.Sprintf("would keep more than %s members in its sets of unevaluated members at once", english.Sprint(maxSchemaLiveMembers))})
	}
}

// merge keeps unevaluated only what other left unevaluated too: other's
// subschema passed, and what it evaluated counts.
func (r *schemaRun) merge(ue *uneval, other uneval) {
	r.charge(uint64(len(ue.props)+len(ue.items)) * stepMember)
	for k := range ue.props {
		if _, ok := other.props[k]; !ok {
			delete(ue.props, k)
		}
	}
	for i := range ue.items {
		if _, ok := other.items[i]; !ok {
			delete(ue.items, i)
		}
	}
}

func (ue uneval) isEmpty() bool { return len(ue.props) == 0 && len(ue.items) == 0 }

// validate applies s to v, the value at r.path. It returns what s left
// unevaluated when v passes, or the first failure.
func (r *schemaRun) validate(s *jsonschema.Schema, v any, callerNeeds bool) (uneval, *schemaFailure) {
	r.charge(stepApply)
	if r.frames++; r.frames > maxSchemaFrames {
		panic(schemaOverBudget{fmt.Sprintf("would apply subschemas more than %s deep (references, combinators and nested values together)", english.Sprint(maxSchemaFrames))})
	}
	in := r.sv.info[s]
	ue, held := r.unevalFrom(v, s, in, callerNeeds)
	ue, f := r.apply(s, in, v, ue)
	r.frames--
	r.live -= held
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
	if s.Const != nil && !r.equals(v, *s.Const) {
		return ue, r.fail(func() jsonschema.ErrorKind { return &kind.Const{Got: v, Want: *s.Const} })
	}
	if s.Enum != nil && !r.inEnum(in, s.Enum.Values, v, t) {
		return ue, r.fail(func() jsonschema.ErrorKind { return &kind.Enum{Got: v, Want: s.Enum.Values} })
	}
	if s.Format != nil {
		if str, ok := v.(string); ok {
			if s.Format.Name == "regex" {
				if len(str) > maxRegexFormatLength {
					panic(schemaOverBudget{fmt.Sprintf("would parse a string of %s bytes as a regular expression (format regex; at most %s)", english.Sprint(len(str)), english.Sprint(maxRegexFormatLength))})
				}
				r.charge(uint64(len(str)+1) * stepRegexByte)
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
	case json.Number, float64:
		f = r.number(s, v)
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
	got, f := r.validate(sub, v, !ue.isEmpty())
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

func (r *schemaRun) inEnum(in *schemaInfo, values []any, v any, t uint8) bool {
	if in.enumTypes&t == 0 {
		return false
	}
	if str, ok := v.(string); ok {
		r.charge(stepNode + uint64(len(str))/8)
		return in.enumString[str]
	}
	for _, x := range values {
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
		r.charge(stepNode + uint64(len(pname))/8)
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
	var additional []string
	for pname, pvalue := range obj {
		r.charge(stepNode + uint64(len(pname))/8)
		evaluated := false
		if sub, ok := s.Properties[pname]; ok {
			evaluated = true
			if f := r.below(sub, pvalue, named(pname)); f != nil {
				return f
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
				if !a {
					additional = append(additional, pname)
				}
			case *jsonschema.Schema:
				if f := r.below(a, pvalue, named(pname)); f != nil {
					return f
				}
			}
		}
		if evaluated {
			delete(ue.props, pname)
		}
	}
	if len(additional) > 0 {
		return r.fail(func() jsonschema.ErrorKind { return &kind.AdditionalProperties{Properties: additional} })
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
		r.charge(stepNode + uint64(len(pname))/8)
		if _, ok := obj[pname]; ok {
			if f := r.inPlace(sub, obj, ue); f != nil {
				return f
			}
		}
	}
	for pname, reqd := range s.DependentRequired {
		r.charge(stepNode + uint64(len(pname))/8)
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
		r.charge(stepNode + uint64(len(name))/8)
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
				delete(ue.items, i)
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
	if s.MinLength != nil || s.MaxLength != nil {
		r.charge(stepNode + uint64(len(str))/4)
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

func (r *schemaRun) number(s *jsonschema.Schema, v any) *schemaFailure {
	if s.Minimum == nil && s.Maximum == nil && s.ExclusiveMinimum == nil && s.ExclusiveMaximum == nil && s.MultipleOf == nil {
		return nil
	}
	n := r.rat(v)
	if s.Minimum != nil && r.cmp(n, s.Minimum) < 0 {
		return r.fail(func() jsonschema.ErrorKind { return &kind.Minimum{Got: n, Want: s.Minimum} })
	}
	if s.Maximum != nil && r.cmp(n, s.Maximum) > 0 {
		return r.fail(func() jsonschema.ErrorKind { return &kind.Maximum{Got: n, Want: s.Maximum} })
	}
	if s.ExclusiveMinimum != nil && r.cmp(n, s.ExclusiveMinimum) <= 0 {
		return r.fail(func() jsonschema.ErrorKind { return &kind.ExclusiveMinimum{Got: n, Want: s.ExclusiveMinimum} })
	}
	if s.ExclusiveMaximum != nil && r.cmp(n, s.ExclusiveMaximum) >= 0 {
		return r.fail(func() jsonschema.ErrorKind { return &kind.ExclusiveMaximum{Got: n, Want: s.ExclusiveMaximum} })
	}
	if s.MultipleOf != nil {
		r.charge(stepNumber + numberDigits(n) + numberDigits(s.MultipleOf))
		if q := new(big.Rat).Quo(n, s.MultipleOf); !q.IsInt() {
			return r.fail(func() jsonschema.ErrorKind { return &kind.MultipleOf{Got: n, Want: s.MultipleOf} })
		}
	}
	return nil
}

func (r *schemaRun) cmp(a, b *big.Rat) int {
	r.charge(stepNumber + numberDigits(a) + numberDigits(b))
	return a.Cmp(b)
}

// numberDigits is about how many decimal digits n's numerator and
// denominator have together.
func numberDigits(n *big.Rat) uint64 {
	return uint64(n.Num().BitLen()+n.Denom().BitLen()) * 3 / 10
}

// rat is the number v exactly, as the library reads it (a double as the
// shortest decimal that reads back as it). A payload's numbers are
// doubles or integers within a double's range (I-JSON): at most 309
// digits.
func (r *schemaRun) rat(v any) *big.Rat {
	var s string
	digits := 0
	switch v := v.(type) {
	case json.Number:
		s = string(v)
		digits = len(s)
	case float64:
		s = strconv.FormatFloat(v, 'g', -1, 64)
		_, exp := math.Frexp(v)
		digits = len(s) + abs(exp)*3/10 // 1e-308 is a fraction of 308 digits
	}
	r.charge(stepNumber + 10*uint64(digits))
	n, ok := new(big.Rat).SetString(s)
	if !ok {
		return new(big.Rat)
	}
	return n
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
			if f := r.inPlace(sub, v, ue); f != nil {
				if first == nil {
					first = f
				}
				continue
			}
			matched = true
			if ue.isEmpty() { // else every branch evaluates members
				break
			}
		}
		if !matched {
			return first
		}
	}
	if len(s.OneOf) > 0 {
		matched := -1
		var first *schemaFailure
		for i, sub := range s.OneOf {
			got, f := r.validate(sub, v, !ue.isEmpty())
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
			return first
		}
	}
	if s.If != nil {
		if r.inPlace(s.If, v, ue) == nil {
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
	if obj, ok := v.(map[string]any); ok && s.UnevaluatedProperties != nil {
		for pname := range ue.props {
			if f := r.below(s.UnevaluatedProperties, obj[pname], named(pname)); f != nil {
				return f
			}
		}
		ue.props = nil
	}
	if arr, ok := v.([]any); ok && s.UnevaluatedItems != nil {
		for i := range ue.items {
			if f := r.below(s.UnevaluatedItems, arr[i], indexed(i)); f != nil {
				return f
			}
		}
		ue.items = nil
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
			r.charge(uint64(len(k)) / 8)
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
	case float64:
		switch b := b.(type) {
		case float64:
			return a == b // equal doubles are the same shortest decimal
		case json.Number:
			return r.sameNumber(b, a)
		}
		return false
	case json.Number: // an integer
		switch b := b.(type) {
		case json.Number:
			// JSON writes an integer one way, but for -0.
			return a == b || strings.TrimPrefix(string(a), "-") == "0" && strings.TrimPrefix(string(b), "-") == "0"
		case float64:
			return r.sameNumber(a, b)
		}
		return false
	}
	return false
}

// sameNumber says whether the integer n is the double f: if it is, it
// reads as f.
func (r *schemaRun) sameNumber(n json.Number, f float64) bool {
	r.charge(stepNumber + uint64(len(n)))
	if g, err := strconv.ParseFloat(string(n), 64); err != nil || g != f {
		return false
	}
	return r.rat(n).Cmp(r.rat(f)) == 0
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
	first := make(map[uint64]int, len(arr)) // the first item of each hash
	var more map[uint64][]int               // the others, of hashes that collide
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
		r.charge(uint64(len(v)) / 8)
		h.WriteByte('s')
		h.WriteString(v)
		h.WriteByte(0)
	case json.Number, float64:
		f, _ := v.(float64)
		if n, ok := v.(json.Number); ok {
			f, _ = strconv.ParseFloat(string(n), 64)
		}
		if f == 0 {
			f = 0 // -0 too
		}
		h.WriteByte('d')
		var b [16]byte
		h.Write(strconv.AppendUint(b[:0], math.Float64bits(f), 16))
	case []any:
		h.WriteByte('[')
		for _, x := range v {
			r.hash(h, x)
		}
		h.WriteByte(']')
	case map[string]any:
		// Members in any order: the sum of each member's own hash.
		var sum uint64
		var m maphash.Hash
		m.SetSeed(r.sv.seed)
		for k, x := range v {
			r.charge(uint64(len(k)) / 8)
			m.Reset()
			m.WriteString(k)
			m.WriteByte(0)
			r.hash(&m, x)
			sum += m.Sum64()
		}
		h.WriteByte('{')
		var b [20]byte
		h.Write(strconv.AppendUint(b[:0], sum, 16))
	}
}
