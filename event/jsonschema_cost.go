package event

import (
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// MaxSchemaApplications bounds how many subschemas JSON Schema validation
// may apply to one value of a payload. The validator follows every $ref,
// allOf, anyOf and oneOf branch of a value, and does not stop when its
// context ends: a schema whose definitions each refer twice to the next
// costs 2^depth per value (22 levels took 6.5 s for a two-field record),
// and a recursive oneOf of two overlapping branches doubles the work at
// every level the payload nests. Real schemas apply a few dozen at most.
const MaxSchemaApplications = 1000

// schemaCost is, for each nesting depth d of a payload, the most subschemas
// validation can apply to one value at any depth up to d (a bound computed
// from the compiled schema alone: every branch counted as taken).
type schemaCost [MaxNesting + 1]uint64

// costCap saturates the sums: beyond the bound, only "too many" matters.
const costCap = MaxSchemaApplications + 1

func satAdd(a, b uint64) uint64 {
	if a+b > costCap {
		return costCap
	}
	return a + b
}

// newSchemaCost computes root's cost. For a schema s and a depth d,
// R(s, d) is the most applications at one value d levels below a value s
// validates: s itself and the schemas it applies in place ($ref, the
// combinators, if/then/else, dependent schemas) at d = 0, and through the
// subschemas of one property or one item (all that may apply to it) below.
// Dynamic and recursive references are counted as reaching every schema
// that declares a dynamic or recursive anchor.
func newSchemaCost(root *jsonschema.Schema) *schemaCost {
	var nodes []*jsonschema.Schema
	var anchored []*jsonschema.Schema
	seen := map[*jsonschema.Schema]bool{}
	var walk func(s *jsonschema.Schema)
	walk = func(s *jsonschema.Schema) {
		if s == nil || seen[s] {
			return
		}
		seen[s] = true
		nodes = append(nodes, s)
		if s.DynamicAnchor != "" || s.RecursiveAnchor {
			anchored = append(anchored, s)
		}
		for _, c := range schemaInPlace(s) {
			walk(c)
		}
		for _, group := range schemaNested(s) {
			for _, c := range group.schemas {
				walk(c)
			}
		}
	}
	walk(root)

	prev := map[*jsonschema.Schema]uint64{} // R(·, d-1)
	var cost schemaCost
	for d := 0; d <= MaxNesting; d++ {
		cur := make(map[*jsonschema.Schema]uint64, len(nodes))
		visiting := map[*jsonschema.Schema]bool{}
		var r func(s *jsonschema.Schema) uint64
		r = func(s *jsonschema.Schema) uint64 {
			if s == nil {
				return 0
			}
			if v, ok := cur[s]; ok {
				return v
			}
			if visiting[s] {
				return costCap // a schema that applies itself in place: no end
			}
			visiting[s] = true
			var v uint64
			if d == 0 {
				v = 1
			} else {
				v = below(s, prev)
			}
			for _, c := range schemaInPlace(s) {
				v = satAdd(v, r(c))
			}
			if s.DynamicRef != nil || s.RecursiveRef != nil {
				for _, a := range anchored {
					if a != s {
						v = satAdd(v, r(a))
					}
				}
			}
			visiting[s] = false
			cur[s] = v
			return v
		}
		for _, s := range nodes {
			r(s)
		}
		cost[d] = cur[root]
		if d > 0 && cost[d-1] > cost[d] {
			cost[d] = cost[d-1]
		}
		prev = cur
	}
	return &cost
}

// at is the bound for a payload nested depth levels deep.
func (c *schemaCost) at(depth int) uint64 {
	return c[min(max(depth, 0), MaxNesting)]
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

// schemaNested groups the subschemas s applies to its properties and items: the
// most that can apply to one property's value is one of the named
// properties plus every pattern, additionalProperties, unevaluated and
// propertyNames; to one item, one positional schema plus the rest.
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

// below is the most applications s's own subschemas make at one value one
// level down, given R(·, d-1) in prev: a property's value or an item,
// whichever costs more.
func below(s *jsonschema.Schema, prev map[*jsonschema.Schema]uint64) uint64 {
	g := schemaNested(s)
	sum := func(cg childGroup) uint64 {
		var v uint64
		for _, c := range cg.schemas {
			if c == nil {
				continue
			}
			if cg.alone {
				v = max(v, prev[c])
			} else {
				v = satAdd(v, prev[c])
			}
		}
		return v
	}
	return max(satAdd(sum(g[0]), sum(g[1])), satAdd(sum(g[2]), sum(g[3])))
}
