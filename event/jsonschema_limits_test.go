package event

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"regexp"
	"regexp/syntax"
	"runtime"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"
)

// validateJSON validates payload against schema as the jsonschema format
// does, without the envelope's mapping.
func validateJSON(t *testing.T, schema, payload string) error {
	t.Helper()
	codec, err := newJSONSchemaCodec(1, schema, nil)
	if err != nil {
		return decodeErr(ReasonUnusableSchema, "%v", err) // as a decoder has it
	}
	_, err = codec.check([]byte(payload))
	return err
}

func jsonSchemaDecoder(t *testing.T, schema string) *Decoder {
	t.Helper()
	reg := newMemRegistry()
	reg.add(1, "s", 1, sr.Schema{Type: sr.TypeJSON, Schema: schema})
	return hostileDecoder(t, reg, FormatJSONSchema)
}

// A schema whose definitions each refer twice to the next costs 2^depth
// subschemas per value: at 22 levels the library's validator took 6.5 s
// for one two-field record. Effectively's stops at its budget: the record
// is unusable_schema, the partition moves on; at 7 and 8 levels (511 and
// 1,023 subschemas) it is validated.
func TestJSONSchemaExponentialReferencesStopAtTheBudget(t *testing.T) {
	for _, depth := range []int{7, 8, 22, 60} {
		defs := ""
		for i := range depth {
			defs += fmt.Sprintf(`"d%d":{"allOf":[{"$ref":"#/definitions/d%d"},{"$ref":"#/definitions/d%d"}]},`, i, i+1, i+1)
		}
		defs += fmt.Sprintf(`"d%d":{"type":"object"}`, depth)
		d := jsonSchemaDecoder(t, `{"$schema":"http://json-schema.org/draft-07/schema#","allOf":[{"$ref":"#/definitions/d0"}],"definitions":{`+defs+`}}`)
		_, err := d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, []byte(`{"sku":"a","type":"t"}`))})
		if depth <= 8 {
			require.NoError(t, err, "depth %d", depth)
			continue
		}
		require.Equal(t, ReasonUnusableSchema, ReasonOf(err), "depth %d: %v", depth, err)
		require.Contains(t, err.Error(), "more than 1,000,000,000 steps of work")
	}
}

// A recursive schema whose two anyOf branches both descend doubles the
// work at every level where both fail: a payload that fails at its
// bottom, 40 levels down, would take 2^40 steps, and stops at the budget;
// one that passes takes the first branch at every level.
func TestJSONSchemaRecursiveBranchingStopsAtTheBudget(t *testing.T) {
	d := jsonSchemaDecoder(t, `{"anyOf":[{"type":"object"},{"type":"array","items":{"$ref":"#/$defs/n"}},{"type":"array","items":{"$ref":"#/$defs/n"}}],
		"$defs":{"n":{"anyOf":[{"type":"string"},{"type":"array","items":{"$ref":"#/$defs/n"}},{"type":"array","items":{"$ref":"#/$defs/n"}}]}}}`)
	deep := func(bottom string) []byte {
		return []byte(strings.Repeat("[", 40) + bottom + strings.Repeat("]", 40))
	}
	_, err := d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, []byte(`{"sku":"a","type":"t"}`))})
	require.NoError(t, err)
	_, err = d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, []byte(`[[[1]]]`))})
	require.Equal(t, ReasonSchemaMismatch, ReasonOf(err), "%v", err) // shallow: decided
	_, err = d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, deep(`"x"`))})
	require.NotEqual(t, ReasonUnusableSchema, ReasonOf(err), "%v", err) // it matches: validated
	require.NotEqual(t, ReasonSchemaMismatch, ReasonOf(err), "%v", err)
	_, err = d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, deep(`1`))})
	require.Equal(t, ReasonUnusableSchema, ReasonOf(err), "%v", err)
	require.Contains(t, err.Error(), "steps of work")
}

// Recursive schemas of the usual kind (a tree, a linked list, an
// expression) apply a few subschemas per value at any depth.
func TestJSONSchemaUsualRecursionIsCheap(t *testing.T) {
	schema := `{"type":"object","properties":{"sku":{"type":"string"},"type":{"type":"string"},
		"tree":{"$ref":"#/$defs/node"}},
		"$defs":{"node":{"oneOf":[{"type":"number"},{"type":"object","required":["op"],"properties":{"op":{"enum":["+","*"]},
			"left":{"$ref":"#/$defs/node"},"right":{"$ref":"#/$defs/node"}}}]}}}`
	d := jsonSchemaDecoder(t, schema)
	tree := `1`
	for range 100 {
		tree = `{"op":"+","left":` + tree + `,"right":2}`
	}
	_, err := d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, []byte(`{"sku":"a","type":"t","tree":`+tree+`}`))})
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

// Every attack of the five reviews of the earlier, weighed-beforehand
// bound (each seconds to minutes, or gigabytes, in the library's
// validator) is decided or stopped at the budget, allocating little.
// Run with -v to see what each takes.
func TestJSONSchemaAttacksAreDecidedOrStopped(t *testing.T) {
	nestedUnique := func(levels, per int) string { // arrays in arrays, each of more than 20 items
		inner := "1"
		for range levels {
			inner = "[" + inner + "," + strings.Repeat("1e300,", per) + "2]"
		}
		return inner
	}
	deepStrings := func(levels, per int) string {
		inner := `"y"`
		for range levels {
			inner = "[" + strings.Repeat(`"y",`, per) + inner + "]"
		}
		return inner
	}
	attacks := []struct{ name, schema, payload string }{
		{"one big pattern", `{"properties":{"s":{"pattern":"` + strings.ReplaceAll(list(20, func(i int) string { return fmt.Sprintf("[a-z]{%d}y", 450-i) }), ",", "|") + `"}}}`,
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
		{"uniqueItems 9 times at each of 120 nested levels", `{"$ref":"#/$defs/u","$defs":{"u":{"allOf":[` + list(9, func(int) string { return `{"uniqueItems":true}` }) + `],"items":{"$ref":"#/$defs/u"}}}}`,
			nestedUnique(120, 1000)},
		{"three failures per string, 127 levels of anyOf", `{"$ref":"#/$defs/n","$defs":{"n":{"anyOf":[{"type":"array","items":{"$ref":"#/$defs/n"}},{"type":"string","minLength":5,"pattern":"^x"},{"type":"string","maxLength":0}]}}}`,
			deepStrings(126, 100)},
		{"format regex on a megabyte of folded classes", `{"$schema":"http://json-schema.org/draft-07/schema#","properties":{"s":{"allOf":[{"format":"regex"},{"format":"regex"}]}}}`,
			`{"sku":"a","type":"t","s":"` + strings.Repeat(`(?i)\\p{Lu}`, 100000) + `"}`},
		{"format regex on many 4 KB strings", `{"$schema":"http://json-schema.org/draft-07/schema#","items":{"format":"regex"}}`,
			`[` + list(250, func(int) string { return `"` + strings.Repeat(`(?i)\\p{Lu}`, 370) + `"` }) + `]`},
		{"type integer on 170,000 big integers", `{"items":{"type":"integer","minimum":0}}`,
			`[` + list(3300, func(int) string { return "1" + strings.Repeat("0", 300) }) + `]`},
		{"dependentSchemas at every level", `{"$ref":"#/$defs/d","$defs":{"d":{"dependentSchemas":{"a":{"$ref":"#/$defs/e"}},"additionalProperties":{"$ref":"#/$defs/d"}},"e":{"dependentSchemas":{"a":{"properties":{"a":{"$ref":"#/$defs/d"}}}}}}}`,
			strings.Repeat(`{"a":`, 127) + "1" + strings.Repeat("}", 127)},
		{"600 failing branches of additionalProperties false on 90,000 members", `{"$defs":{"s":{"properties":{"zz":{}},"additionalProperties":false}},"anyOf":[` + list(600, func(int) string { return `{"$ref":"#/$defs/s"}` }) + `,{}]}`,
			"{" + list(90_000, func(i int) string { return fmt.Sprintf(`"p%d":0`, i) }) + "}"},
		{"not uniqueItems 4,000 times on 499,000 zeros", `{"$defs":{"l":{"not":{"uniqueItems":true}},"m":{"allOf":[` + list(100, func(int) string { return `{"$ref":"#/$defs/l"}` }) + `]}},"allOf":[` +
			list(40, func(int) string { return `{"$ref":"#/$defs/m"}` }) + `]}`, "[" + strings.Repeat("0,", 499_000) + "0]"},
		{"a chain of 1,500 references", `{"$ref":"#/$defs/d0","$defs":{` + list(1500, func(i int) string { return fmt.Sprintf(`"d%d":{"$ref":"#/$defs/d%d"}`, i, i+1) }) + `,"d1500":{}}}`, `{}`},
	}
	for _, a := range attacks {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		start := time.Now()
		err := validateJSON(t, a.schema, a.payload)
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		if !raceEnabled {
			t.Logf("%-50s %8d bytes: %-16s in %v, %d MB allocated", a.name, len(a.payload), ReasonOf(err), took.Round(time.Millisecond), alloc>>20)
		}
		// Decided, or stopped; never an error of another kind.
		require.Contains(t, []Reason{"", ReasonSchemaMismatch, ReasonUnusableSchema}, ReasonOf(err), "%s: %v", a.name, err)
		require.Less(t, alloc, uint64(400<<20), "%s: bytes allocated", a.name)
		require.Less(t, after.HeapInuse, uint64(300<<20), "%s: heap in use after", a.name)
	}
}

// Records of the usual kind, to a megabyte (Kafka's default largest
// record), pass: the budget is far above what they cost. (The fourth
// and fifth reviews' records that the weighed-beforehand bound refused
// are among them.)
func TestJSONSchemaBudgetLeavesRealPayloadsAlone(t *testing.T) {
	zones := list(598, func(i int) string { return fmt.Sprintf(`"Zone/City_%03d"`, i) })
	events := list(30, func(i int) string {
		return fmt.Sprintf(`{"type":"object","required":["kind","id"],"properties":{"kind":{"const":"event-%d"},"id":{"type":"string","format":"uuid"},"at":{"type":"string","format":"date-time"},"n":{"type":"integer","minimum":0}}}`, i)
	})
	d2020 := `"$schema":"https://json-schema.org/draft/2020-12/schema",`
	small := func(i int) string {
		return fmt.Sprintf(`{"type":"event-%d","id":"%d","at":"2026-12-07T10:00:00Z","n":%d}`, i%100, i, i)
	}
	smallType := func(i int) string {
		return fmt.Sprintf(`{"type":"object","required":["type","id"],"properties":{"type":{"const":"event-%d"},"id":{"type":"string"},"at":{"type":"string","format":"date-time"},"n":{"type":"integer"}}}`, i)
	}
	smallBatch := "[" + list(1<<20/71, small) + "]"
	for _, c := range []struct{ name, schema, payload string }{
		{"14,768 small events, oneOf 100 types by $ref", `{` + d2020 + `"type":"array","items":{"oneOf":[` + list(100, func(i int) string { return fmt.Sprintf(`{"$ref":"#/$defs/e%d"}`, i) }) + `],"unevaluatedProperties":false},"$defs":{` + list(100, func(i int) string { return fmt.Sprintf(`"e%d":%s`, i, smallType(i)) }) + `}}`,
			smallBatch},
		{"the same, allOf of 100 if type then (unevaluatedProperties)", `{` + d2020 + `"type":"array","items":{"allOf":[` + list(100, func(i int) string {
			return fmt.Sprintf(`{"if":{"properties":{"type":{"const":"event-%d"}}},"then":%s}`, i, smallType(i))
		}) + `],"unevaluatedProperties":false}}`, smallBatch},
		{"order lines: patterns, an enum, uniqueItems", `{"type":"object","required":["sku","type"],"properties":{"sku":{"type":"string","pattern":"^[a-z0-9-]{1,64}$"},"type":{"type":"string"},
		"lines":{"type":"array","uniqueItems":true,"items":{"type":"object","required":["sku","qty"],"additionalProperties":false,"properties":{
			"sku":{"type":"string","pattern":"^[a-z0-9-]{1,64}$"},"qty":{"type":"integer","minimum":1},"status":{"enum":["new","packed","shipped","returned"]},
			"note":{"type":"string","maxLength":200}}}}}}`,
			`{"sku":"order-1","type":"t","lines":[` + list(11000, func(i int) string {
				return fmt.Sprintf(`{"sku":"sku-%06d","qty":%d,"status":"packed","note":"a line of an order, kept for the record"}`, i, 1+i%7)
			}) + `]}`},
		{"readings in one of 598 time zones", `{"properties":{"readings":{"items":{"properties":{"zone":{"enum":[` + zones + `]},"value":{"type":"number"}}}}}}`,
			`{"readings":[` + list(20000, func(i int) string { return fmt.Sprintf(`{"zone":"Zone/City_%03d","value":%d.5}`, i%598, i) }) + `]}`},
		{"orders with currency, country and email", `{"properties":{"orders":{"items":{"required":["email"],"properties":{"email":{"type":"string","format":"email","pattern":"^[^@\\s]+@[^@\\s]+\\.[a-z]{2,}$"},
			"currency":{"enum":["EUR","USD","GBP","JPY","CHF","SEK","NOK","DKK","PLN","CZK"]},"country":{"type":"string","pattern":"^[A-Z]{2}$"},"total":{"type":"number","minimum":0,"multipleOf":0.01}}}}}}`,
			`{"orders":[` + list(8000, func(i int) string {
				return fmt.Sprintf(`{"email":"customer%d@example.com","currency":"EUR","country":"DE","total":%d.25}`, i, i)
			}) + `]}`},
		{"names in any script", `{"items":{"properties":{"name":{"type":"string","pattern":"^[\\p{L}\\p{M}' .-]{1,100}$"}}}}`,
			`[` + list(12000, func(i int) string { return `{"name":"Zoë Ångström-Łukasiewicz"}` }) + `]`},
		{"one of 30 event types", `{"items":{"oneOf":[` + events + `]}}`,
			`[` + list(5000, func(i int) string {
				return fmt.Sprintf(`{"kind":"event-%d","id":"0b7e9c1a-3f2d-4c5b-8a9e-%012d","at":"2026-12-07T10:00:00Z","n":%d}`, i%30, i, i)
			}) + `]`},
	} {
		start := time.Now()
		err := validateJSON(t, c.schema, c.payload)
		require.NoError(t, err, "%s: %v", c.name, err)
		took := time.Since(start)
		codec, err := newJSONSchemaCodec(1, c.schema, nil)
		require.NoError(t, err)
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(c.payload))
		require.NoError(t, err)
		fail, steps, over := codec.validator.run(asDecimals(v), false, maxSchemaWork)
		require.Nil(t, fail)
		require.Empty(t, over)
		require.Less(t, steps, int64(maxSchemaWork/2), "%s: half the budget at most", c.name)
		if !raceEnabled {
			t.Logf("%-45s %5d KiB validated in %v, %s steps", c.name, len(c.payload)>>10, took.Round(time.Millisecond), english.Sprint(steps))
		}
	}
}

// What the budget costs at worst, kind by kind: each payload would take
// more than the budget, so each is stopped, and how long that took is the
// most a record of that kind can cost (printed; run with -v).
func TestJSONSchemaWorstCases(t *testing.T) {
	tiny := "2.2250738585072014e-308" // its exact fraction is the costliest a double has
	for _, a := range []struct{ name, schema, payload string }{
		{"uniqueItems on a long array of numbers, 50 times", `{"allOf":[` + list(50, func(int) string { return `{"uniqueItems":true}` }) + `]}`,
			"[" + list(200_000, func(i int) string { return fmt.Sprint(i) }) + "]"},
		{"uniqueItems on 20 arrays that differ at their end", `{"allOf":[` + list(100, func(int) string { return `{"uniqueItems":true}` }) + `]}`,
			"[" + list(20, func(i int) string { return "[" + strings.Repeat("1,", 25_000) + fmt.Sprint(i) + "]" }) + "]"},
		{"format uri on a megabyte, 990 times", `{"$schema":"http://json-schema.org/draft-07/schema#","allOf":[` + list(990, func(int) string { return `{"format":"uri"}` }) + `]}`,
			`"http://a/` + strings.Repeat("b/", 1<<19) + `"`},
		{"minimum 300 times on tiny numbers", `{"items":{"allOf":[` + list(300, func(int) string { return `{"minimum":` + tiny + `}` }) + `]}}`,
			"[" + list(40_000, func(int) string { return tiny }) + "]"},
		{"a pattern of 1,000 Unicode classes, matched at the end", `{"items":{"pattern":"` + strings.Repeat(`\\pL`, 999) + `1"}}`,
			"[" + list(100, func(int) string { return `"` + strings.Repeat("a", 9_999) + `1"` }) + "]"},
		{"a pattern of 6,000 small classes, matched at the end", `{"items":{"pattern":"` + strings.Repeat(`[a-z]`, 5_999) + `1"}}`,
			"[" + list(100, func(int) string { return `"` + strings.Repeat("a", 9_999) + `1"` }) + "]"},
		{"format regex on 4 KB of folded classes", `{"$schema":"http://json-schema.org/draft-07/schema#","items":{"format":"regex"}}`,
			"[" + list(200, func(int) string { return `"` + strings.Repeat(`(?i)\\p{Lu}`, 370) + `"` }) + "]"},
		{"multipleOf 990 times on 1e300s", `{"items":{"allOf":[` + list(990, func(int) string { return `{"multipleOf":1.2345678901234567e-300}` }) + `]}}`,
			"[" + list(45_000, func(int) string { return "1.2345678901234567e300" }) + "]"},
		{"multipleOf 300 times by 40 digits on 600-digit multiples", `{"items":{"allOf":[` + list(300, func(int) string { return `{"multipleOf":1234567890123456789012345678901234567891}` }) + `]}}`,
			"[" + list(3_000, func(int) string { // M × (10^260 + 1): 300 digits, a multiple
				return "1234567890123456789012345678901234567891" + strings.Repeat("0", 220) + "1234567890123456789012345678901234567891"
			}) + "]"},
		{"not multipleOf a 93-digit subnormal 8 times on 1e308s", `{"items":{"allOf":[` + list(8, func(int) string {
			return `{"not":{"multipleOf":4.9406564584124654417656879286822137236505980261432476442558568250067550727020875186529983636e-324}}`
		}) + `]}}`, "[" + list(166_000, func(int) string { return "1e308" }) + "]"},
		{"format duration on a megabyte, 990 times", `{"$schema":"http://json-schema.org/draft-07/schema#","allOf":[` + list(990, func(int) string { return `{"format":"duration"}` }) + `]}`,
			`"P` + strings.Repeat("1", 1<<20) + `D"`},
		{"unevaluatedProperties after 900 allOf of patternProperties", `{"$schema":"https://json-schema.org/draft/2020-12/schema","unevaluatedProperties":{"type":"string"},"allOf":[` + list(900, func(int) string { return `{"patternProperties":{"":true}}` }) + `]}`,
			"{" + list(30_000, func(i int) string { return fmt.Sprintf(`"%d":"x"`, i) }) + "}"},
		{"prefixes raised 90 times at 8 levels over 450,000 items contains evaluated", `{"$schema":"https://json-schema.org/draft/2020-12/schema","$defs":{` + list(90, func(k int) string {
			return fmt.Sprintf(`"p%d":{"prefixItems":[%s]}`, k+1, list(k+1, func(int) string { return "true" }))
		}) + `},"allOf":[` + list(8, func(int) string {
			return `{"unevaluatedItems":true,"contains":{"const":0},"allOf":[` + list(90, func(k int) string { return fmt.Sprintf(`{"$ref":"#/$defs/p%d"}`, k+1) }) + `]}`
		}) + `]}`, "[" + strings.Repeat("0,", 450_000) + "1]"},
		{"minLength 4,400 times on 900 KB of two-byte characters", `{"$defs":{"s":{"minLength":400000}},"allOf":[` + list(4400, func(int) string { return `{"$ref":"#/$defs/s"}` }) + `]}`,
			`"` + strings.Repeat("é", 450_000) + `"`},
		{"uniqueItems 600 times on 30 objects of 3,000 members", `{"allOf":[` + list(600, func(int) string { return `{"uniqueItems":true}` }) + `]}`,
			"[" + list(30, func(i int) string {
				return "{" + list(3000, func(j int) string { return fmt.Sprintf(`"m%d":%d`, j, i) }) + "}"
			}) + "]"},
		{"properties 800 times over 90,000 members", `{"allOf":[` + list(800, func(int) string { return `{"properties":{"zz":{}}}` }) + `]}`,
			"{" + list(90_000, func(i int) string { return fmt.Sprintf(`"p%d":0`, i) }) + "}"},
		{"an enum of 2,400 objects on 100,000 items", `{"items":{"enum":[` + list(2400, func(i int) string { return fmt.Sprintf(`{"a":%d}`, i) }) + `]}}`,
			"[" + list(100_000, func(int) string { return `{"a":2399}` }) + "]"},
		{"references that double 30 times", `{"$ref":"#/$defs/d0","$defs":{` + list(30, func(i int) string {
			return fmt.Sprintf(`"d%d":{"allOf":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]}`, i, i+1, i+1)
		}) + `,"d30":{"type":"object"}}}`, `{}`},
	} {
		_, err := newJSONSchemaCodec(1, a.schema, nil)
		require.NoError(t, err, "%s: the schema compiles; the payload is what is stopped", a.name)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		err = validateJSON(t, a.schema, a.payload)
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		require.Equal(t, ReasonUnusableSchema, ReasonOf(err), "%s: %v", a.name, err)
		if !raceEnabled { // the race detector's times say nothing of the product's
			t.Logf("%-50s %8d bytes: stopped in %v, %d MB allocated", a.name, len(a.payload), took.Round(time.Millisecond), (after.TotalAlloc-before.TotalAlloc)>>20)
		}
	}
}

// What a schema may be is bounded when it is compiled, at once (the
// reviews' attacks: 96 s through $recursiveRef, 11.7 s through $dynamicRef
// to an anchor nothing refers to, 20 ms for each comparison with
// 1e-999999, 11.4 s compiling 20 patterns of a million instructions, 4
// minutes compiling {"allOf":[true, …]}, 23 s compiling one folded-class
// pattern used by 160 objects).
func TestJSONSchemaUnboundableSchemasAreRefusedWhenCompiled(t *testing.T) {
	huge := strings.Repeat(`[a-z]{1000}`, 30)
	nine := strings.Repeat(`[a-z]{1000}`, 4) // 8,000 instructions
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
		{"40 patterns of 1,000 bytes", `{"properties":{` + list(40, func(i int) string { return fmt.Sprintf(`"s%d":{"pattern":"%s%d"}`, i, strings.Repeat("a", 1000), i) }) + `}}`, "more than 32,768 bytes in all"},
		{"200,000 true subschemas", `{"allOf":[` + list(200_000, func(int) string { return "true" }) + `]}`, "more than 5,000 objects and booleans"},
		{"a schema of more than a megabyte", `{"description":"` + strings.Repeat("a", 1<<20) + `"}`, "effectively compiles at most 1,048,576"},
		{"6,000 true subschemas", `{"allOf":[` + list(6_000, func(int) string { return "true" }) + `]}`, "more than 5,000 objects and booleans"},
		{"a schema that refers to itself", `{"$ref":"#"}`, "applies itself"},
		{"definitions that apply each other", `{"$ref":"#/$defs/a","$defs":{"a":{"anyOf":[{"type":"string"},{"$ref":"#/$defs/b"}]},"b":{"allOf":[{"$ref":"#/$defs/a"}]}}}`, "applies itself"},
		{"a pattern that does not parse, of 20,000 bytes", `{"properties":{"s":{"pattern":"(` + strings.Repeat("a", 20_000) + `"}}}`, "missing closing )"},
		{"thirteen patterns of 8,000", `{"properties":{` + list(13, func(i int) string { return fmt.Sprintf(`"s%d":{"pattern":"%s%d"}`, i, nine, i) }) + `}}`, "more than 100,000 instructions in all"},
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
	_, err = codec.check([]byte(`{"p1":"x","tree":{"a":{"a":{}},"c":[{}]}}`))
	require.NoError(t, err)
}

// A const that 2,900 references reach is kept once, with the schema that
// holds it: copied into each, 2,000 consts held 200 MB (the ninth review).
func TestJSONSchemaConstsAreKeptOnce(t *testing.T) {
	schema := `{"$defs":{"base":{"properties":{` + list(2000, func(i int) string { return fmt.Sprintf(`"p%d":{"const":"x"}`, i) }) + `}}},"anyOf":[` +
		list(2900, func(int) string { return `{"$ref":"#/$defs/base"}` }) + `]}`
	codec, err := newJSONSchemaCodec(1, schema, nil)
	require.NoError(t, err)
	held := 0
	for _, in := range codec.validator.info {
		held += len(in.consts)
	}
	require.Equal(t, 2000, held)
	payload := "{" + list(2000, func(i int) string { return fmt.Sprintf(`"p%d":"x"`, i) }) + "}"
	require.NoError(t, validateJSON(t, schema, payload))
	require.Equal(t, ReasonSchemaMismatch, ReasonOf(validateJSON(t, schema, `{"p7":"y"}`)))
}

// Where a schema check fails is joined only when it fails: a megabyte
// member name above 4,000 objects would otherwise be copied into the
// location of each (4 GB).
func TestSchemaDocumentCheckCopiesNoPaths(t *testing.T) {
	schema := `{"properties":{"` + strings.Repeat("n", 1<<19) + `":{"properties":{` + list(4000, func(i int) string { return fmt.Sprintf(`"a%d":{}`, i) }) + `}}}}`
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	require.NoError(t, err)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err = (&schemaDocCheck{regexps: &regexpBudget{}}).check(doc)
	runtime.ReadMemStats(&after)
	require.ErrorContains(t, err, "the locations of the schema's subschemas")
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(4<<20), "bytes allocated")
}

// The library's compile takes time in the number of subschemas times the
// length of their locations, and, for draft 4 to 7, in the square of an
// enum's items whose hashes collide (it hashes an array without its
// length). Review 14's schemas, each within 1 MiB and 5,000 objects, took
// minutes and gigabytes; they are refused at once, and what is admitted
// near the bounds compiles quickly (the times are printed).
func TestJSONSchemaCompileCostIsBounded(t *testing.T) {
	d7 := `"$schema":"http://json-schema.org/draft-07/schema#",`
	nested := func(depth, nameLen, subs int) string {
		open, close := "", ""
		for d := range depth {
			open += `{"properties":{"` + fmt.Sprintf("%0*d", nameLen, d) + `":`
			close += "}}"
		}
		return `{` + d7 + `"properties":{"x":` + open + `{"properties":{` + list(subs, func(i int) string { return fmt.Sprintf(`"%05d":{}`, i) }) + `}}` + close + `}}`
	}
	// Every nested array of 13 arrays: distinct, all hashed alike.
	var trees func(n int) []string
	forests := map[int][]string{0: {""}}
	var forest func(n int) []string
	trees = func(n int) []string {
		if n == 1 {
			return []string{"[]"}
		}
		var out []string
		for _, f := range forest(n - 1) {
			out = append(out, "["+f+"]")
		}
		return out
	}
	forest = func(n int) []string {
		if v, ok := forests[n]; ok {
			return v
		}
		var out []string
		for first := 1; first <= n; first++ {
			for _, t := range trees(first) {
				for _, rest := range forest(n - first) {
					out = append(out, strings.TrimSuffix(t+","+rest, ","))
				}
			}
		}
		forests[n] = out
		return out
	}
	longNamedRefs := func(n int) string {
		return `{"properties":{"` + strings.Repeat("n", 20_000) + `":{"properties":{` + list(140, func(i int) string { return fmt.Sprintf(`"%d":{"minimum":%d}`, i, i) }) + `}}},"x":{` + list(n, func(i int) string { return fmt.Sprintf(`"%d":{"minimum":%d}`, i, i) }) + `},"anyOf":[` + list(n, func(i int) string { return fmt.Sprintf(`{"$ref":"#/x/%d"}`, i) }) + `]}`
	}
	// A $ref at each level of a chain of not under host, deepest first,
	// above bottom.
	chain := func(draft, host string, depth int, bottom string) string {
		refs := list(depth+1, func(i int) string { return `{"$ref":"#/` + host + strings.Repeat("/not", depth-i) + `"}` })
		return `{"$schema":"` + draft + `","anyOf":[` + refs + `],"` + host + `":` + strings.Repeat(`{"not":`, depth) + bottom + strings.Repeat(`}`, depth) + `}`
	}
	numbers := `{"enum":[` + list(94_000, func(i int) string { return fmt.Sprintf("%de-300", i+1) }) + `]}`
	colliding := trees(13)
	for len(strings.Join(colliding, ",")) > 1000<<10 {
		colliding = colliding[:len(colliding)*9/10]
	}
	for _, c := range []struct {
		name, schema, refused string
	}{
		{"a 100 KB name above 1,000 subschemas (2.7 s, 1.2 GB)", `{"properties":{"` + strings.Repeat("n", 100<<10) + `":{"properties":{` + list(1000, func(i int) string { return fmt.Sprintf(`"%d":{}`, i) }) + `}}}}`, "the locations"},
		{"30 levels of 200-byte names above 4,900 subschemas (4.5 s, 2.2 GB)", nested(30, 200, 4900), "the locations"},
		{"a 300-byte name above 4,900 subschemas (admitted)", `{"properties":{"` + strings.Repeat("n", 300) + `":{"properties":{` + list(4900, func(i int) string { return fmt.Sprintf(`"%d":{}`, i) }) + `}}}}`, ""},
		{"8 levels of 50-byte names above 4,900 subschemas (admitted)", nested(8, 50, 4900), ""},
		{"a 100 KB $id above 1,000 subschemas", `{"$id":"https://example.com/` + strings.Repeat("i", 100<<10) + `","properties":{` + list(1000, func(i int) string { return fmt.Sprintf(`"%d":{}`, i) }) + `}}`, "the locations"},
		{fmt.Sprintf("a draft-07 enum of %d colliding arrays (5.2 s)", len(colliding)), `{` + d7 + `"enum":[` + strings.Join(colliding, ",") + `]}`, "more than 5,000 objects"},
		{"a draft-07 enum of 370 colliding arrays of 13 (admitted)", `{` + d7 + `"enum":[` + strings.Join(colliding[:370], ",") + `]}`, ""},
		{"a const of 94,000 subnormals (1.6 s)", `{"const":[` + list(94_000, func(i int) string { return fmt.Sprintf("%de-320", i+1) }) + `]}`, ""},
		{"a draft-07 enum of 4,900 subnormals", `{` + d7 + `"enum":[` + list(4900, func(i int) string { return fmt.Sprintf("%de-320", i+1) }) + `]}`, ""},
		// Review 15.
		{"100 spellings of one index above 400 objects (6 s; 200 of 800: 110 s)", `{"$defs":{"t":{"allOf":[{"allOf":[{"properties":{` + list(400, func(i int) string { return fmt.Sprintf(`"p%d":{"minLength":%d}`, i, i) }) + `}}]}]}},"anyOf":[` +
			list(100, func(i int) string {
				return `{"$ref":"#/$defs/t/allOf/` + strings.Repeat("0", i%10+1) + `/allOf/` + strings.Repeat("0", i/10+1) + `"}`
			}) + `]}`, "write indexes as plain numbers"},
		{"$dynamicRef, refused before it is compiled", `{"$defs":{"t":{"$dynamicAnchor":"t"}},"anyOf":[{"$dynamicRef":"#t"}]}`, "uses $dynamicRef"},
		{"2,490 refs to locations under an unknown keyword (1.4 s)", `{"x":{` + list(2490, func(i int) string { return fmt.Sprintf(`"%d":{"minimum":%d}`, i, i) }) + `},"anyOf":[` + list(2490, func(i int) string { return fmt.Sprintf(`{"$ref":"#/x/%d"}`, i) }) + `]}`, "distinct locations"},
		{"the same with an anchor on each (3.1 s)", `{"x":{` + list(2490, func(i int) string { return fmt.Sprintf(`"%d":{"minimum":%d,"$anchor":"t%d"}`, i, i, i) }) + `},"anyOf":[` + list(2490, func(i int) string { return fmt.Sprintf(`{"$ref":"#/x/%d","$anchor":"r%d"}`, i, i) }) + `]}`, "distinct locations"},
		{"1,100 refs to locations under an unknown keyword (admitted)", `{"x":{` + list(1100, func(i int) string { return fmt.Sprintf(`"%d":{"minimum":%d}`, i, i) }) + `},"anyOf":[` + list(1100, func(i int) string { return fmt.Sprintf(`{"$ref":"#/x/%d"}`, i) }) + `]}`, ""},
		{"2,300 refs beside 140 subschemas under a 20 KB name (1.7 s)", longNamedRefs(2300), "distinct locations"},
		{"800 refs beside 140 subschemas under a 20 KB name (admitted)", longNamedRefs(800), ""},
		{fmt.Sprintf("%d colliding arrays in required (5.5 s)", len(colliding)), `{"required":[` + strings.Join(colliding, ",") + `]}`, "more than 5,000 objects"},
		{fmt.Sprintf("%d colliding arrays in type (6 s)", len(colliding)), `{"type":[` + strings.Join(colliding, ",") + `]}`, "more than 5,000 objects"},
		{fmt.Sprintf("%d colliding arrays in dependentRequired (5.2 s)", len(colliding)), `{"dependentRequired":{"a":[` + strings.Join(colliding, ",") + `]}}`, "more than 5,000 objects"},
		{fmt.Sprintf("%d colliding arrays in draft-04 dependencies (5.1 s)", len(colliding)), `{"$schema":"http://json-schema.org/draft-04/schema#","dependencies":{"a":[` + strings.Join(colliding, ",") + `]}}`, "more than 5,000 objects"},
		// Review 16.
		{"58 nested $ref targets under an unknown keyword above 94,000 enum numbers (14 s, 4.7 GB)", chain(`http://json-schema.org/draft-06/schema#`, "x", 58, numbers), "not subschemas"},
		{"the same in const", chain(`http://json-schema.org/draft-06/schema#`, "const", 58, numbers), "not subschemas"},
		{"the same above 100,000 required names (2020-12: 4.6 s)", chain(`https://json-schema.org/draft/2020-12/schema`, "x", 58, `{"required":[`+list(100_000, func(i int) string { return fmt.Sprintf(`"%07d"`, i) })+`]}`), "not subschemas"},
		{"2 nested targets above 94,000 enum numbers (admitted)", chain(`http://json-schema.org/draft-06/schema#`, "x", 1, numbers), ""},
		{"300 definitions under components, each referred to (admitted)", `{"anyOf":[` + list(300, func(i int) string { return fmt.Sprintf(`{"$ref":"#/components/schemas/s%d"}`, i) }) + `],"components":{"schemas":{` +
			list(300, func(i int) string {
				return fmt.Sprintf(`"s%d":{"type":"object","properties":{"a":{"type":"string"},"b":{"$ref":"#/$defs/d%d"}}}`, i, i)
			}) + `}},"$defs":{` +
			list(300, func(i int) string { return fmt.Sprintf(`"d%d":{"type":"integer","minimum":%d}`, i, i) }) + `}}`, ""},
		// Review 17.
		{"one $ref text in 2,490 resources (4.3 s, 2.2 GB)", `{"allOf":[` + list(2490, func(i int) string { return fmt.Sprintf(`{"$id":"r%d","x":{},"$ref":"#/x"}`, i) }) + `]}`, "distinct locations"},
		{"a meta-schema of its own", `{"$schema":"https://example.com/meta","type":"object"}`, "not one of the drafts'"},
		{"each draft's meta-schema (admitted)", `{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"a":{"$schema":"http://json-schema.org/draft-07/schema"}}}`, ""},
		// Review 18.
		{"a draft-4 id of 5,000 bytes beside a decoy $id above 4,990 resources (5.9 s)", `{"$schema":"http://json-schema.org/draft-04/schema#","$id":"x","id":"https://h.invalid/` + strings.Repeat("a", 5000) + `/","allOf":[` + list(4990, func(i int) string { return fmt.Sprintf(`{"id":"c%05d"}`, i) }) + `]}`, "the locations"},
		{"a $id of 500 spaces above 4,990 resources (2.8 s)", `{"$defs":{"a":{"$id":"https://h.invalid/` + strings.Repeat(" ", 500) + `/","allOf":[` + list(4990, func(i int) string { return fmt.Sprintf(`{"$id":"c%05d"}`, i) }) + `]}}}`, "the locations"},
		{"1,660 draft-4 resources with a decoy $id, each referring to #/x (2 s)", `{"$schema":"http://json-schema.org/draft-04/schema#","allOf":[` + list(1660, func(i int) string { return fmt.Sprintf(`{"$id":"same","id":"r%d","not":{"$ref":"#/x"},"x":{}}`, i) }) + `]}`, "distinct locations"},
		{"the latest meta-schema, and a fragment (admitted)", `{"$schema":"http://json-schema.org/schema#","allOf":[{"$schema":"https://json-schema.org/draft-07/schema#/"}]}`, ""},
		{"$schema, $dynamicRef and 00 in examples, default and const (admitted)", `{"examples":[{"$schema":"https://example.com/config.schema.json"}],"default":{"$schema":"./config.schema.json","$dynamicRef":"#a"},"const":{"$ref":"#/allOf/00"},"properties":{"default":{"type":"string"}}}`, ""},
		{"$dynamicRef in a default a $ref points into", `{"default":{"$dynamicRef":"#a"},"allOf":[{"$ref":"#/default"}]}`, "uses $dynamicRef"},
		{"$dynamicRef in a property named default", `{"properties":{"default":{"$dynamicRef":"#a"}}}`, "uses $dynamicRef"},
		{"a bundle of 400 resources, each referring to 5 others (admitted)", `{"$defs":{` + list(400, func(i int) string {
			return fmt.Sprintf(`"t%d":{"$id":"t%d.json","allOf":[%s]}`, i, i, list(5, func(j int) string { return fmt.Sprintf(`{"$ref":"t%d.json"}`, (i+j+1)%400) }))
		}) + `}}`, ""},
		{"required lists of 20,000 names in all (admitted)", `{"properties":{` + list(1000, func(i int) string {
			return fmt.Sprintf(`"p%d":{"required":[%s]}`, i, list(20, func(j int) string { return fmt.Sprintf(`"f%d"`, j) }))
		}) + `}}`, ""},
	} {
		start := time.Now()
		_, err := newJSONSchemaCodec(1, c.schema, nil)
		took := time.Since(start)
		if c.refused != "" {
			require.ErrorContains(t, err, c.refused, c.name)
		} else {
			require.NoError(t, err, c.name)
		}
		if !raceEnabled {
			t.Logf("%-70s %7d bytes: %v in %v", c.name, len(c.schema), err != nil, took.Round(time.Millisecond))
		}
	}
}

// The one-pass matcher is seen where Go uses it; without it, anchored
// patterns of large classes are costed by their program's size.
func TestOnePassIsSeen(t *testing.T) {
	require.True(t, onePass(regexp.MustCompile(`^[\p{L}\p{M}' .-]{1,100}$`)))
	require.False(t, onePass(regexp.MustCompile(`[\p{L}]{1,100}`)))
}

// A one-pass pattern runs its captures and empty assertions between two
// characters: ^(?:()()…a)*$ runs hundreds of instructions a byte (23 s for
// ten on a megabyte, charged as one a byte in the sixth review). It is
// charged the longest such run.
func TestOnePassPatternsPayTheirEmptyRuns(t *testing.T) {
	caps := `^(?:` + strings.Repeat("()", 300) + `a)*$`
	require.True(t, onePass(regexp.MustCompile(caps)))
	b := &regexpBudget{}
	r, err := b.admit(caps)
	require.NoError(t, err)
	plain, err := b.admit(`^a*$`)
	require.NoError(t, err)
	require.GreaterOrEqual(t, r.cost, uint64(600*stepInstruction))
	require.Less(t, plain.cost, uint64(20*stepInstruction))
	err = validateJSON(t, `{"allOf":[`+list(10, func(int) string { return `{"pattern":"` + caps + `"}` })+`]}`, `"`+strings.Repeat("a", 1<<20-10)+`"`)
	require.Equal(t, ReasonUnusableSchema, ReasonOf(err), "%v", err)
}

// Member names were hashed into a copy of the set of unevaluated members
// for every subschema applied in place: a megabyte name under 2^10
// applications of 2,000 true subschemas took 24.5 s (the sixth review).
// The sets now hold only what is evaluated, and a name is charged by its
// length wherever it is hashed.
func TestJSONSchemaLongNamesArePaidFor(t *testing.T) {
	trues := `{"allOf":[` + list(2000, func(int) string { return "true" }) + `]}`
	schema := `{"unevaluatedProperties":true,"$ref":"#/$defs/d0","$defs":{` + list(10, func(i int) string {
		return fmt.Sprintf(`"d%d":{"allOf":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]}`, i, i+1, i+1)
	}) + `,"d10":` + trues + `}}`
	codec, err := newJSONSchemaCodec(1, schema, nil)
	require.NoError(t, err)
	var steps [2]int64
	for i, name := range []string{"k", strings.Repeat("k", 1<<20-100)} {
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(`{"` + name + `":1}`))
		require.NoError(t, err)
		var over string
		start := time.Now()
		_, steps[i], over = codec.validator.run(asDecimals(v), false, maxSchemaWork)
		require.Empty(t, over)
		if !raceEnabled {
			t.Logf("a name of %d bytes: %s steps in %v", len(name), english.Sprint(steps[i]), time.Since(start).Round(time.Millisecond))
		}
	}
	require.GreaterOrEqual(t, steps[1], steps[0]+(1<<20-100)/8, "the long name's hashing is charged")
	// Read by 900 properties, it is hashed 900 times, and paid 900 times.
	name := strings.Repeat("k", 1<<20-100)
	schema = `{"allOf":[` + list(900, func(int) string { return `{"properties":{"` + name[:10] + `":true}}` }) + `]}`
	codec, err = newJSONSchemaCodec(1, schema, nil)
	require.NoError(t, err)
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(`{"` + name + `":1}`))
	require.NoError(t, err)
	_, many, _ := codec.validator.run(asDecimals(v), false, maxSchemaWork)
	require.Greater(t, many, int64(900*(1<<20-100)/8))
}

// A failing payload is run again to say where it fails, with what the
// first run left of the budget: never two budgets.
func TestJSONSchemaExplainingHasWhatIsLeft(t *testing.T) {
	// Each item fails deep in a branch that is dropped, the last one for good.
	schema := `{"items":{"anyOf":[{"$ref":"#/$defs/deep"},true]},"contains":{"const":"never"},"$defs":{"deep":{"items":{"$ref":"#/$defs/deep"},"type":"array","minItems":1}}}`
	item := strings.Repeat("[", 100) + strings.Repeat("]", 100)
	for _, n := range []int{10, 10000} {
		payload := "[" + list(n, func(int) string { return item }) + "]"
		codec, err := newJSONSchemaCodec(1, schema, nil)
		require.NoError(t, err)
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(payload))
		require.NoError(t, err)
		fail, first, over := codec.validator.run(asDecimals(v), false, maxSchemaWork)
		require.Empty(t, over)
		require.NotNil(t, fail)
		why, err := codec.validator.validate(asDecimals(v))
		require.NoError(t, err)
		_, unsaid := why.kind.(unexplained)
		require.Equal(t, first > maxSchemaWork/2, unsaid, "%d items: unexplained when, and only when, the first run took more than half the budget", n)
		t.Logf("%d items: the first run took %s steps; %s", n, english.Sprint(first), why)
	}
}

// Go parses a class range under (?i) one fold at a time: 4 KB of
// "(?i)[B-\U0010FFFF]" took 1.7 s to parse as format regex, 22 s for a
// 49 KB record (the twelfth review). Such a source is charged 20 times a
// byte, in a payload and in a schema's patterns.
func TestJSONSchemaFoldedRangesArePaidFor(t *testing.T) {
	folded := "(?i)" + strings.Repeat(`[B-\\x{10FFFF}]`, 270)
	err := validateJSON(t, `{"$schema":"http://json-schema.org/draft-07/schema#","items":{"format":"regex"}}`, `["`+folded+`"]`)
	require.Equal(t, ReasonUnusableSchema, ReasonOf(err), "%v", err)
	require.NoError(t, validateJSON(t, `{"$schema":"http://json-schema.org/draft-07/schema#","items":{"format":"regex"}}`, `["(?i)^[a-z0-9._%+-]+@[a-z0-9.-]+$"]`))
	_, err = newJSONSchemaCodec(1, `{"properties":{"s":{"pattern":"`+folded+`"}}}`, nil)
	require.ErrorContains(t, err, "more than 32,768 bytes in all")
}

// uniqueItems hashes each part with its length: ["x\u0000sx"] and
// ["x","x"] hashed alike, and 9,000 such arrays were refused as over the
// budget (the twelfth review).
func TestJSONSchemaUniqueItemsHashesDoNotCollideByConstruction(t *testing.T) {
	items := make([]string, 0, 9000)
	for i := range 9000 {
		var parts []string
		for b := 0; b < 14; b++ {
			if i&(1<<b) != 0 {
				parts = append(parts, `"x"`)
			} else {
				parts = append(parts, `"x\u0000sx"`)
			}
		}
		items = append(items, "["+strings.Join(parts, ",")+"]")
	}
	codec, err := newJSONSchemaCodec(1, `{"uniqueItems":true}`, nil)
	require.NoError(t, err)
	v, err := jsonschema.UnmarshalJSON(strings.NewReader("[" + strings.Join(items, ",") + "]"))
	require.NoError(t, err)
	fail, steps, over := codec.validator.run(asDecimals(v), false, maxSchemaWork)
	require.Nil(t, fail)
	require.Empty(t, over)
	require.Less(t, steps, int64(maxSchemaWork/50))
}

// Case-insensitive non-ASCII letters cost what large classes do: 500 of
// "θ?" on 82 KB took 2.4 s within the budget (the thirteenth review).
func TestFoldedNonASCIILiteralsArePaidFor(t *testing.T) {
	b := &regexpBudget{}
	folded, err := b.admit("(?i)" + strings.Repeat("θ?", 500) + "q")
	require.NoError(t, err)
	plain, err := b.admit(strings.Repeat("θ?", 500) + "q")
	require.NoError(t, err)
	require.GreaterOrEqual(t, folded.cost, 4*plain.cost)
	err = validateJSON(t, `{"items":{"pattern":"(?i)`+strings.Repeat("θ?", 500)+`q"}}`, `["`+strings.Repeat("a", 82_000)+`"]`)
	require.Equal(t, ReasonUnusableSchema, ReasonOf(err), "%v", err)
}
