package event

import (
	"fmt"
	"strings"
	"testing"

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
