package event

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"regexp/syntax"
	"runtime"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"
)

func jsonSchemaDecoder(t *testing.T, schema string) *Decoder {
	t.Helper()
	reg := newMemRegistry()
	reg.add(1, "s", 1, sr.Schema{Type: sr.TypeJSON, Schema: schema})
	return hostileDecoder(t, reg, FormatJSONSchema)
}

// A schema whose definitions each refer twice to the next costs 2^depth
// subschemas per value, and the validator never stops (nor looks at its
// context): at 22 levels one two-field record took 6.5 s. It is refused as
// unusable before any record is validated against it, at once.
func TestJSONSchemaExponentialReferencesAreRefused(t *testing.T) {
	// Each level applies the allOf's two wrappers and their targets:
	// 8 levels are 1,023 applications, 7 are 511.
	for _, depth := range []int{8, 22, 60} {
		defs := ""
		for i := range depth {
			defs += fmt.Sprintf(`"d%d":{"allOf":[{"$ref":"#/definitions/d%d"},{"$ref":"#/definitions/d%d"}]},`, i, i+1, i+1)
		}
		defs += fmt.Sprintf(`"d%d":{"type":"object"}`, depth)
		d := jsonSchemaDecoder(t, `{"$schema":"http://json-schema.org/draft-07/schema#","allOf":[{"$ref":"#/definitions/d0"}],"definitions":{`+defs+`}}`)
		_, err := d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, []byte(`{"sku":"a","type":"t"}`))})
		if depth == 8 { // just over the bound
			require.Equal(t, ReasonUnusableSchema, ReasonOf(err), "%v", err)
			require.Contains(t, err.Error(), "would apply more than 1,000 subschemas")
			continue
		}
		require.Equal(t, ReasonUnusableSchema, ReasonOf(err), "depth %d: %v", depth, err)
		require.Contains(t, err.Error(), "more than 1,000 subschemas")
	}
	// 511: a heavy schema, but within the bound.
	defs := ""
	for i := range 7 {
		defs += fmt.Sprintf(`"d%d":{"allOf":[{"$ref":"#/definitions/d%d"},{"$ref":"#/definitions/d%d"}]},`, i, i+1, i+1)
	}
	d := jsonSchemaDecoder(t, `{"allOf":[{"$ref":"#/definitions/d0"}],"definitions":{`+defs+`"d7":{"type":"object"}}}`)
	_, err := d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, []byte(`{"sku":"a","type":"t"}`))})
	require.NoError(t, err)
}

// A recursive schema whose two anyOf branches both descend doubles the
// work at every level the payload nests: the payload's nesting decides,
// so a shallow record passes and a deep one is dead-lettered (the
// schema's fault at that depth), without validating it.
func TestJSONSchemaRecursiveBranchingIsBoundedByThePayloadsNesting(t *testing.T) {
	d := jsonSchemaDecoder(t, `{"anyOf":[{"type":"object"},{"type":"array","items":{"$ref":"#/$defs/n"}},{"type":"array","items":{"$ref":"#/$defs/n"}}],
		"$defs":{"n":{"anyOf":[{"type":"string"},{"type":"array","items":{"$ref":"#/$defs/n"}},{"type":"array","items":{"$ref":"#/$defs/n"}}]}}}`)
	_, err := d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, []byte(`{"sku":"a","type":"t"}`))})
	require.NoError(t, err)
	_, err = d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, []byte(`[[["x"]]]`))})
	require.NotEqual(t, ReasonUnusableSchema, ReasonOf(err), "%v", err) // shallow: validated (it fails for want of a type)
	_, err = d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, []byte(strings.Repeat("[", 40)+`"x"`+strings.Repeat("]", 40)))})
	require.Equal(t, ReasonUnusableSchema, ReasonOf(err), "%v", err)
	require.Contains(t, err.Error(), "nested 40 deep")
}

// Recursive schemas of the usual kind (a tree, a linked list, an
// expression) apply a few subschemas per value at any depth.
func TestJSONSchemaUsualRecursionIsCheap(t *testing.T) {
	schema := `{"type":"object","properties":{"sku":{"type":"string"},"type":{"type":"string"},
		"tree":{"$ref":"#/$defs/node"}},
		"$defs":{"node":{"oneOf":[{"type":"number"},{"type":"object","required":["op"],"properties":{"op":{"enum":["+","*"]},
			"left":{"$ref":"#/$defs/node"},"right":{"$ref":"#/$defs/node"}}}]}}}`
	codec, err := newJSONSchemaCodec(1, schema, nil)
	require.NoError(t, err)
	require.LessOrEqual(t, codec.cost.at(MaxNesting), uint64(8), "applications per value at any depth")
	d := jsonSchemaDecoder(t, schema)
	tree := `1`
	for range 100 {
		tree = `{"op":"+","left":` + tree + `,"right":2}`
	}
	_, err = d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, []byte(`{"sku":"a","type":"t","tree":`+tree+`}`))})
	require.NoError(t, err)
}

func list(n int, f func(i int) string) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(f(i))
	}
	return b.String()
}

// Applications do not all cost alike: a pattern runs in time its program
// times the text, an enum is scanned value by value, uniqueItems hashes
// the array, unevaluated members are copied for each subschema applied in
// place. Each attack of the second review (every one under the bound on
// applications; 5 s to 4 minutes each) is refused before validating.
func TestJSONSchemaWorkIsBoundedByWhatEachSubschemaCosts(t *testing.T) {
	attacks := []struct{ name, schema, payload string }{
		{"one big pattern", `{"properties":{"s":{"pattern":"` + strings.ReplaceAll(list(20, func(i int) string { return fmt.Sprintf("[a-z]{%d}y", 1000-i) }), ",", "|") + `"}}}`,
			`{"sku":"a","type":"t","s":"` + strings.Repeat("abcdefghij", 3000) + `"}`},
		{"an enum of 10,000 numbers on every item", `{"type":"object","properties":{"xs":{"type":"array","items":{"enum":[` + list(10000, func(i int) string { return fmt.Sprint(i) }) + `]}}}}`,
			`{"sku":"a","type":"t","xs":[` + list(1000, func(int) string { return "9999" }) + `]}`},
		{"uniqueItems 990 times", `{"allOf":[` + list(990, func(int) string { return `{"properties":{"xs":{"uniqueItems":true}}}` }) + `]}`,
			`{"sku":"a","type":"t","xs":[` + list(100000, func(i int) string { return fmt.Sprint(i) }) + `]}`},
		{"unevaluated members copied 990 times", `{"$schema":"https://json-schema.org/draft/2020-12/schema","unevaluatedProperties":{"type":"string"},"allOf":[` + list(990, func(int) string { return `{"type":"object"}` }) + `]}`,
			`{"sku":"a","type":"t",` + list(50000, func(i int) string { return fmt.Sprintf(`"%d":"x"`, i) }) + `}`},
		{"format email 990 times on a megabyte", `{"$schema":"http://json-schema.org/draft-07/schema#","properties":{"s":{"allOf":[` + list(990, func(int) string { return `{"format":"email"}` }) + `]}}}`,
			`{"sku":"a","type":"t","s":"` + strings.Repeat("a", 1<<20) + `"}`},
		{"10,000 required names on 10,000 objects", `{"properties":{"xs":{"items":{"required":[` + list(10000, func(i int) string { return fmt.Sprintf(`"n%d"`, i) }) + `]}}}}`,
			`{"sku":"a","type":"t","xs":[` + list(10000, func(int) string { return "{}" }) + `]}`},
		{"an enum of arrays of tiny numbers", `{"properties":{"xs":{"items":{"enum":[` + list(100, func(i int) string { return "[" + strings.Repeat("2.2250738585072014e-308,", 199) + fmt.Sprint(i) + "]" }) + `]}}}}`,
			`{"sku":"a","type":"t","xs":[` + list(98, func(int) string { return "[" + strings.Repeat("2.2250738585072014e-308,", 199) + "7]" }) + `]}`},
		{"a small pattern 990 times", `{"allOf":[` + list(990, func(int) string { return `{"properties":{"s":{"pattern":"^[a-z]*$"}}}` }) + `]}`,
			`{"sku":"a","type":"t","s":"` + strings.Repeat("abcdefghij", 90000) + `"}`},
	}
	for _, a := range attacks {
		d := jsonSchemaDecoder(t, a.schema)
		_, err := d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, []byte(a.payload))})
		require.Equal(t, ReasonUnusableSchema, ReasonOf(err), "%s: %v", a.name, err)
		require.Regexp(t, `steps of per-(value|byte) work|would compile to more than 10,000 instructions`, err.Error(), a.name)
	}
}

// A schema of the usual kind on a megabyte of data (Kafka's default
// largest record) passes: the bounds are
// far above what real schemas and records cost.
func TestJSONSchemaWorkBoundsLeaveRealPayloadsAlone(t *testing.T) {
	schema := `{"type":"object","required":["sku","type"],"properties":{"sku":{"type":"string","pattern":"^[a-z0-9-]{1,64}$"},"type":{"type":"string"},
		"lines":{"type":"array","uniqueItems":true,"items":{"type":"object","required":["sku","qty"],"additionalProperties":false,"properties":{
			"sku":{"type":"string","pattern":"^[a-z0-9-]{1,64}$"},"qty":{"type":"integer","minimum":1},"status":{"enum":["new","packed","shipped","returned"]},
			"note":{"type":"string","maxLength":200}}}}}}`
	lines := list(11000, func(i int) string {
		return fmt.Sprintf(`{"sku":"sku-%06d","qty":%d,"status":"packed","note":"a line of an order, kept for the record"}`, i, 1+i%7)
	})
	payload := `{"sku":"order-1","type":"t","lines":[` + lines + `]}`
	require.Greater(t, len(payload), 1<<20)
	d := jsonSchemaDecoder(t, schema)
	start := time.Now()
	_, err := d.Decode(Record{Key: []byte("order-1"), Value: wire(1, nil, []byte(payload))})
	require.NoError(t, err)
	t.Logf("%d KiB validated in %v", len(payload)>>10, time.Since(start))
}

// Each costliest attack of its kind, sized at the bound, is validated (and
// its time printed: the bounds' worst cases, a few seconds at most); twice
// its size is refused. Run with -v to see the times.
func TestJSONSchemaWorstCases(t *testing.T) {
	payload := func(field, value string) []byte {
		return []byte(`{"sku":"a","type":"t","` + field + `":` + value + `}`)
	}
	tiny := "2.2250738585072014e-308" // its exact fraction is the costliest a double has
	attacks := []struct {
		name, schema string
		payload      func(n int) []byte
		n            int
	}{
		{"uniqueItems on 20 arrays that differ at their end", `{"properties":{"xs":{"uniqueItems":true}}}`,
			func(n int) []byte {
				return payload("xs", "["+list(20, func(i int) string { return "[" + strings.Repeat("1,", n) + fmt.Sprint(i) + "]" })+"]")
			}, 13_000},
		{"uniqueItems on a long array of numbers", `{"properties":{"xs":{"uniqueItems":true}}}`,
			func(n int) []byte { return payload("xs", "["+list(n, func(i int) string { return fmt.Sprint(i) })+"]") }, 1_100_000},
		{"format regex on a long expression", `{"$schema":"http://json-schema.org/draft-07/schema#","properties":{"s":{"format":"regex"}}}`,
			func(n int) []byte { return payload("s", `"`+strings.Repeat(`\\pL`, n)+`"`) }, 530_000},
		{"an enum of tiny numbers", `{"properties":{"xs":{"items":{"enum":[` + list(100, func(i int) string { return fmt.Sprintf("%d%s", i+3, tiny[1:]) }) + `]}}}}`,
			func(n int) []byte { return payload("xs", "["+list(n, func(int) string { return tiny })+"]") }, 3_900},
		{"minimum 300 times on tiny numbers", `{"properties":{"xs":{"items":{"allOf":[` + list(300, func(int) string { return `{"minimum":` + tiny + `}` }) + `]}}}}`,
			func(n int) []byte { return payload("xs", "["+list(n, func(int) string { return tiny })+"]") }, 1_000},
		{"a pattern of 10,000 Unicode classes that fails at its end", `{"properties":{"s":{"pattern":"` + strings.Repeat(`\\pL`, 9_990) + `1"}}}`,
			func(n int) []byte { return payload("s", `"`+strings.Repeat("a", n)+`"`) }, 1_840},
		{"a pattern of 10,000 small classes that fails at its end", `{"properties":{"s":{"pattern":"` + strings.Repeat(`[a-z]`, 9_990) + `1"}}}`,
			func(n int) []byte { return payload("s", `"`+strings.Repeat("a", n)+`"`) }, 14_900},
	}
	for _, a := range attacks {
		d := jsonSchemaDecoder(t, a.schema)
		p := a.payload(a.n)
		if raceEnabled { // validating at the bound takes a minute under the race detector
			p = a.payload(a.n / 20)
		}
		start := time.Now()
		_, err := d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, p)})
		took := time.Since(start)
		require.NotEqual(t, ReasonUnusableSchema, ReasonOf(err), "%s: %v", a.name, err)
		if !raceEnabled { // the race detector's times say nothing of the product's
			t.Logf("%-52s %8d bytes validated in %v", a.name, len(p), took)
		}
		_, err = d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, a.payload(2*a.n))})
		require.Equal(t, ReasonUnusableSchema, ReasonOf(err), "%s, twice the size: %v", a.name, err)
	}
}

// What the work bound cannot weigh is refused when the schema is compiled,
// at once (the third review's attacks: 96 s through $recursiveRef, 11.7 s
// through $dynamicRef to an anchor nothing refers to, 20 ms for each
// comparison with 1e-999999, 11.4 s compiling 20 patterns of a million
// instructions).
func TestJSONSchemaUnboundableSchemasAreRefusedWhenCompiled(t *testing.T) {
	huge := strings.Repeat(`[a-z]`, 30_000)
	nine := strings.Repeat(`[a-z]`, 9_000)
	for _, c := range []struct{ name, schema, says string }{
		{"3,000 definitions referring to one another", `{"$ref":"#/$defs/d0","$defs":{` + list(3000, func(i int) string {
			return fmt.Sprintf(`"d%d":{"type":"object","properties":{"a":{"$ref":"#/$defs/d%d"},"c":{"items":{"$ref":"#/$defs/d%d"}}}}`, i, (i+1)%3000, (i+7)%3000)
		}) + `}}`, "more than 5,000 objects"},
		{"a schema nested 100 levels", strings.Repeat(`{"properties":{"a":`, 50) + `{}` + strings.Repeat(`}}`, 50), "nests deeper than 64 levels"},
		{"$recursiveRef", `{"$schema":"https://json-schema.org/draft/2019-09/schema","$recursiveAnchor":true,"anyOf":[{"type":"string"},{"type":"array","items":{"$recursiveRef":"#"}}]}`, "$recursiveRef"},
		{"$dynamicRef", `{"$schema":"https://json-schema.org/draft/2020-12/schema","$dynamicAnchor":"n","anyOf":[{"type":"string"},{"type":"array","items":{"$dynamicRef":"#n"}}]}`, "$dynamicRef"},
		{"the 2020-12 meta-schema by $ref", `{"$ref":"https://json-schema.org/draft/2020-12/schema"}`, "$dynamicRef"},
		{"an enum number of a million digits", `{"properties":{"n":{"enum":[1e-999999, 2]}}}`, "1e-999999"},
		{"a const beyond a double", `{"properties":{"n":{"const":1e400}}}`, "not one a double can hold"},
		{"multipleOf so small it is zero", `{"properties":{"n":{"multipleOf":1e-400}}}`, "not one a double can hold"},
		{"a minimum of 101 characters", `{"properties":{"n":{"minimum":1.` + strings.Repeat("1", 99) + `}}}`, "in at most 100 characters"},
		{"a pattern of 30,000 instructions", `{"properties":{"s":{"pattern":"` + huge + `"}}}`, "more than 10,000 instructions"},
		{"pattern properties of 30,000", `{"patternProperties":{"` + huge + `":{}}}`, "more than 10,000 instructions"},
		{"a pattern that does not parse, of 200,000 bytes", `{"properties":{"s":{"pattern":"(` + strings.Repeat("a", 200_000) + `"}}}`, "missing closing )"},
		{"twelve patterns of 9,000", `{"properties":{` + list(12, func(i int) string { return fmt.Sprintf(`"s%d":{"pattern":"%s%d"}`, i, nine, i) }) + `}}`, "more than 100,000 instructions in all"},
	} {
		start := time.Now()
		_, err := newJSONSchemaCodec(1, c.schema, nil)
		require.Error(t, err, c.name)
		require.Contains(t, err.Error(), c.says, c.name)
		require.Less(t, len(err.Error()), 1000, "%s: the reason quotes no pattern whole", c.name)
		if !raceEnabled {
			t.Logf("%-40s refused in %v", c.name, time.Since(start))
		}
		d := jsonSchemaDecoder(t, c.schema)
		_, err = d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, []byte(`{"sku":"a","type":"t"}`))})
		require.Equal(t, ReasonUnusableSchema, ReasonOf(err), "%s: %v", c.name, err)
	}
	// Numbers a double holds, however written, are a schema's to use.
	_, err := newJSONSchemaCodec(1, `{"properties":{"n":{"enum":[0, -0.0, 0e5, 1e308, 5e-324, -2.2250738585072014e-308],"multipleOf":0.01,"maximum":1.7976931348623157e308}}}`, nil)
	require.NoError(t, err)
}

// The size estimate that refuses a pattern before it is compiled is never
// below the program Go's compiler builds.
func TestRegexpSizeIsNotBelowTheProgram(t *testing.T) {
	for _, src := range []string{`a`, `^[a-z0-9-]{1,64}$`, `(a|b|c)*d+`, `\pL{3,7}x?`, `(?i)hello|world`, `((ab){2,5}c){0,3}`,
		`[^a]{10}`, `(?:x|y|z){100}`, `a{2,}`, `\bword\B`, `(a*)*`, `.+?`, `\d{4}-\d{2}-\d{2}T\d{2}:\d{2}`, `(((a)))`, `a|b|c|d|e|f`, `(a?)+`, `(a|)*`, `(a{0,3}){2}`, `(?:ab|)+c`} {
		re, err := syntax.Parse(src, syntax.Perl)
		require.NoError(t, err)
		prog, err := syntax.Compile(re.Simplify())
		require.NoError(t, err)
		require.GreaterOrEqual(t, regexpSize(re, maxRegexpInstructions, 1), len(prog.Inst), src)
	}
}

// A failure's reason is its first cause, short: the validator's whole
// error tree, rendered, quotes every cause's location (990 causes at each
// of 120 levels of 200-byte names took 18.8 s and 1.4 GB).
func TestJSONSchemaFailureReasonsStayShort(t *testing.T) {
	d := jsonSchemaDecoder(t, `{"$ref":"#/definitions/n","definitions":{"n":{"allOf":[`+list(990, func(int) string { return `{"maxProperties":0}` })+`],"additionalProperties":{"$ref":"#/definitions/n"}}}}`)
	name := strings.Repeat("m", 200)
	payload := `{"sku":"a","type":"t","x":` + strings.Repeat(`{"`+name+`":`, 30) + "{}" + strings.Repeat("}", 30) + "}"
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, []byte(payload))})
	runtime.ReadMemStats(&after)
	require.Equal(t, ReasonSchemaMismatch, ReasonOf(err), "%v", err)
	require.Less(t, len(err.Error()), 1500)
	// Validating allocates 200 MB (the tree of 990 causes at 30 levels);
	// rendering it, 1.2 GB more.
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(500<<20), "bytes allocated")
}

// A wide schema of the usual kind compiles, and its work bound with it, in
// well under a second: 1,500 properties, 300 definitions referring to one
// another.
func TestJSONSchemaWideSchemasCompile(t *testing.T) {
	schema := `{"type":"object","properties":{` + list(1500, func(i int) string { return fmt.Sprintf(`"p%d":{"type":"string","maxLength":10}`, i) }) +
		`,"tree":{"$ref":"#/$defs/d0"}},"$defs":{` + list(300, func(i int) string {
		return fmt.Sprintf(`"d%d":{"type":"object","properties":{"a":{"$ref":"#/$defs/d%d"},"c":{"items":{"$ref":"#/$defs/d%d"}}}}`, i, (i+1)%300, (i+7)%300)
	}) + `}}`
	start := time.Now()
	codec, err := newJSONSchemaCodec(1, schema, nil)
	require.NoError(t, err)
	if !raceEnabled {
		t.Logf("%d bytes compiled in %v", len(schema), time.Since(start))
	}
	require.NoError(t, codec.cost.check(3, 10, 100, 0))
}

// Where a schema check fails is joined only when it fails: a megabyte
// member name above 4,000 objects would otherwise be copied into the
// location of each (4 GB).
func TestSchemaDocumentCheckCopiesNoPaths(t *testing.T) {
	schema := `{"properties":{"` + strings.Repeat("n", 1<<20) + `":{"properties":{` + list(4000, func(i int) string { return fmt.Sprintf(`"a%d":{}`, i) }) + `}}}}`
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	require.NoError(t, err)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	require.NoError(t, (&schemaDocCheck{regexps: &regexpBudget{}}).check(doc))
	runtime.ReadMemStats(&after)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(16<<20), "bytes allocated")
}
