package event

import (
	"regexp/syntax"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// JSON Schema validation (santhosh-tekuri/jsonschema) follows every $ref,
// allOf, anyOf and oneOf branch of a value and does not stop when its
// context ends, so its work is bounded before it runs, from the compiled
// schema and the payload's size. Three measures, each for one value at a
// given depth below the root, every branch counted as taken:
//
//   - applications: how many subschemas apply to it. Definitions that each
//     refer twice to the next cost 2^depth (22 levels took 6.5 s for a
//     two-field record), a recursive anyOf whose branches both descend
//     doubles at every level the payload nests.
//   - per-value work: applications, plus the values of each enum that is
//     scanned (a number compared as an exact fraction takes about half a
//     microsecond).
//   - per-byte work: work that grows with the value's size — a pattern's
//     compiled program (a regular expression runs in time its program's
//     size times the text's length), uniqueItems (the array is hashed),
//     unevaluatedProperties and unevaluatedItems (the members are copied
//     for each subschema applied in place).
//
// A payload is validated only if applications ≤ MaxSchemaApplications at
// every depth it reaches, per-value work × its values ≤
// maxSchemaValueWork and per-byte work × its bytes ≤ maxSchemaByteWork;
// else it is unusable_schema, before validating.

// MaxSchemaApplications bounds how many subschemas JSON Schema validation
// may apply to one value of a payload. Real schemas apply a few dozen.
const MaxSchemaApplications = 1000

// The work bounds: a few seconds of validation at the very most on a small
// machine, measured with the attacks of jsonschema_cost_test.go (about
// 0.8 µs per enum value compared, 9 ns per pattern instruction and byte,
// 140 ns per byte hashed for uniqueItems, 18 ns per member and subschema
// for unevaluated members; the weights below are those costs over the
// pattern's). 1.9 MB of an order's lines, with a length-limited pattern
// (131 instructions) on each line's SKU, uses half the per-byte bound and
// a tenth of the per-value one (TestJSONSchemaWorkBoundsLeaveRealPayloadsAlone):
// a pattern's program is counted as if it ran over every byte, which
// anchored, bounded patterns never do.
const (
	maxSchemaValueWork = 5_000_000
	maxSchemaByteWork  = 500_000_000

	uniqueItemsWeight = 16
	unevaluatedWeight = 2
)

// schemaCost holds the three measures by depth, each the most at any
// depth up to its index.
type schemaCost struct {
	apps, perValue, perByte [MaxNesting + 1]uint64
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

func newSchemaCost(root *jsonschema.Schema) *schemaCost {
	var nodes, anchored []*jsonschema.Schema
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

	programs := map[string]uint64{}
	byteWeight := func(s *jsonschema.Schema) uint64 {
		var w uint64
		if s.Pattern != nil {
			w += programSize(programs, s.Pattern.String())
		}
		for re := range s.PatternProperties {
			w += programSize(programs, re.String()) // on every member name
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
		if s.Enum != nil {
			w += uint64(len(s.Enum.Values))
		}
		return w
	}
	var c schemaCost
	c.apps = costBy(root, nodes, anchored, func(*jsonschema.Schema) uint64 { return 1 }, costCap)
	c.perValue = costBy(root, nodes, anchored, valueWeight, workCap)
	c.perByte = costBy(root, nodes, anchored, byteWeight, workCap)
	return &c
}

// costBy computes, for each depth d, the most weight(s) summed over the
// subschemas s that apply to one value at any depth up to d below a value
// root validates. R(s, d) is: s and what it applies in place ($ref, the
// combinators, if/then/else, dependent schemas) at d = 0; through the
// subschemas of one property or one item (all that may apply to it)
// below. Dynamic and recursive references count as reaching every schema
// that declares a dynamic or recursive anchor.
func costBy(root *jsonschema.Schema, nodes, anchored []*jsonschema.Schema, weight func(*jsonschema.Schema) uint64, limit uint64) [MaxNesting + 1]uint64 {
	var out [MaxNesting + 1]uint64
	prev := map[*jsonschema.Schema]uint64{} // R(·, d-1)
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
				return limit // a schema that applies itself in place: no end
			}
			visiting[s] = true
			var v uint64
			if d == 0 {
				v = weight(s)
			} else {
				v = below(s, prev, limit)
			}
			for _, c := range schemaInPlace(s) {
				v = satAdd(v, r(c), limit)
			}
			if s.DynamicRef != nil || s.RecursiveRef != nil {
				for _, a := range anchored {
					if a != s {
						v = satAdd(v, r(a), limit)
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
		out[d] = cur[root]
		if d > 0 {
			out[d] = max(out[d], out[d-1])
		}
		prev = cur
	}
	return out
}

// programSize is the size of the compiled program of regular expression
// src, as RE2 (Go's regexp) runs it: its time on a text is at most about
// that size times the text's length.
func programSize(cache map[string]uint64, src string) uint64 {
	if n, ok := cache[src]; ok {
		return n
	}
	n := uint64(len(src)) // if it does not parse here, its length
	if re, err := syntax.Parse(src, syntax.Perl); err == nil {
		if prog, err := syntax.Compile(re.Simplify()); err == nil {
			n = uint64(len(prog.Inst))
		}
	}
	cache[src] = n
	return n
}

// check refuses a payload nested depth deep, of values values and size
// bytes, whose validation would cost more than the bounds.
func (c *schemaCost) check(depth, values, size int) error {
	d := min(max(depth, 0), MaxNesting)
	if n := c.apps[d]; n > MaxSchemaApplications {
		return decodeErr(ReasonUnusableSchema, "validating this payload (nested %d deep) against its JSON Schema would apply %s subschemas to one value (its references and combinators, every branch counted; the bound is %s)",
			depth, atLeast(n), english.Sprint(MaxSchemaApplications))
	}
	if w := mulSat(c.perValue[d], uint64(values)); w > maxSchemaValueWork {
		return decodeErr(ReasonUnusableSchema, "validating this payload (%s values) against its JSON Schema would take up to %s steps of per-value work (subschemas and enum values, every branch counted; the bound is %s)",
			english.Sprint(values), english.Sprint(w), english.Sprint(maxSchemaValueWork))
	}
	if w := mulSat(c.perByte[d], uint64(size)); w > maxSchemaByteWork {
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

// below is the most weight s's own subschemas put on one value one level
// down, given R(·, d-1) in prev: a property's value or an item, whichever
// is more.
func below(s *jsonschema.Schema, prev map[*jsonschema.Schema]uint64, limit uint64) uint64 {
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
				v = satAdd(v, prev[c], limit)
			}
		}
		return v
	}
	return max(satAdd(sum(g[0]), sum(g[1]), limit), satAdd(sum(g[2]), sum(g[3]), limit))
}
