package event

import (
	"fmt"
	"strings"
	"testing"
	"time"

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
		{"a small pattern 990 times", `{"allOf":[` + list(990, func(int) string { return `{"properties":{"s":{"pattern":"^[a-z]*$"}}}` }) + `]}`,
			`{"sku":"a","type":"t","s":"` + strings.Repeat("abcdefghij", 90000) + `"}`},
	}
	for _, a := range attacks {
		d := jsonSchemaDecoder(t, a.schema)
		_, err := d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, []byte(a.payload))})
		require.Equal(t, ReasonUnusableSchema, ReasonOf(err), "%s: %v", a.name, err)
		require.Contains(t, err.Error(), "work", a.name)
	}
}

// A schema of the usual kind on a megabyte of data passes: the bounds are
// far above what real schemas and records cost.
func TestJSONSchemaWorkBoundsLeaveRealPayloadsAlone(t *testing.T) {
	schema := `{"type":"object","required":["sku","type"],"properties":{"sku":{"type":"string","pattern":"^[a-z0-9-]{1,64}$"},"type":{"type":"string"},
		"lines":{"type":"array","uniqueItems":true,"items":{"type":"object","required":["sku","qty"],"additionalProperties":false,"properties":{
			"sku":{"type":"string","pattern":"^[a-z0-9-]{1,64}$"},"qty":{"type":"integer","minimum":1},"status":{"enum":["new","packed","shipped","returned"]},
			"note":{"type":"string","maxLength":200}}}}}}`
	lines := list(20000, func(i int) string {
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
