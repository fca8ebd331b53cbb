package event

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
)

// verdicts runs one payload through effectively's validator and the
// library's, on the schema both read from codec.
func verdicts(t *testing.T, codec *jsonSchemaCodec, data []byte) (ours, library bool, decided bool) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	require.NoError(t, err)
	_, err = codec.check(data)
	if ReasonOf(err) == ReasonInvalidData || ReasonOf(err) == ReasonUnusableSchema {
		return false, false, false // not I-JSON: never validated
	}
	libErr := codec.validator.root.Validate(v) // the library reads numbers exactly
	return err == nil, libErr == nil, true
}

// Every test of the official suite (drafts 7 and 2020-12) whose schema
// effectively accepts gets the verdict the library gives it, and the
// suite's wherever the library's is.
func TestJSONSchemaValidatorAgreesWithTheSuite(t *testing.T) {
	drafts := map[string]string{"draft7": "http://json-schema.org/draft-07/schema#", "draft2020-12": "https://json-schema.org/draft/2020-12/schema"}
	var cases, agreeSuite, refused, notIJSON int
	for dir, metaURL := range drafts {
		files, err := filepath.Glob(filepath.Join("testdata", "json-schema-test-suite", dir, "*.json"))
		require.NoError(t, err)
		require.NotEmpty(t, files)
		for _, file := range files {
			raw, err := os.ReadFile(file)
			require.NoError(t, err)
			var groups []struct {
				Description string
				Schema      json.RawMessage
				Tests       []struct {
					Description string
					Data        json.RawMessage
					Valid       bool
				}
			}
			require.NoError(t, json.Unmarshal(raw, &groups), file)
			for _, g := range groups {
				schema := string(g.Schema)
				var obj map[string]any
				if json.Unmarshal(g.Schema, &obj) == nil {
					if _, ok := obj["$schema"]; !ok {
						schema = `{"$schema":"` + metaURL + `",` + strings.TrimPrefix(strings.TrimSpace(schema), "{")
						if strings.TrimSpace(string(g.Schema)) == "{}" {
							schema = `{"$schema":"` + metaURL + `"}`
						}
					}
				}
				codec, err := newJSONSchemaCodec(1, schema, nil)
				if err != nil {
					refused++ // remote references, $dynamicRef, a schema applying itself
					continue
				}
				for _, c := range g.Tests {
					name := fmt.Sprintf("%s: %s: %s", filepath.Base(file), g.Description, c.Description)
					ours, library, decided := verdicts(t, codec, c.Data)
					if !decided {
						notIJSON++
						continue
					}
					cases++
					require.Equal(t, library, ours, "%s (%s / %s)", name, schema, c.Data)
					if ours == c.Valid {
						agreeSuite++
					} else {
						t.Logf("the library and effectively both differ from the suite: %s", name)
					}
				}
			}
		}
	}
	t.Logf("%d tests: %d as the suite says, all as the library; %d schemas refused, %d payloads not I-JSON", cases, agreeSuite, refused, notIJSON)
	require.Greater(t, cases, 1500)
	require.GreaterOrEqual(t, agreeSuite, cases-10)
}

// Generated schemas of every keyword, nested and combined, and generated
// payloads: effectively's verdict is the library's.
func TestJSONSchemaValidatorAgreesWithTheLibrary(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 3000
	if testing.Short() {
		n = 500
	}
	var compared, valid int
	for i := range n {
		draft := []string{"http://json-schema.org/draft-04/schema#", "http://json-schema.org/draft-07/schema#", "https://json-schema.org/draft/2019-09/schema", "https://json-schema.org/draft/2020-12/schema"}[rng.IntN(4)]
		g := &schemaGen{rng: rng, draft: draft}
		body := g.schema(3)
		defs := `"definitions":{"a":` + g.schema(2) + `,"b":` + g.schema(2) + `}`
		schema := `{"$schema":"` + draft + `","allOf":[` + body + `],` + defs + `}`
		codec, err := newJSONSchemaCodec(1, schema, nil)
		if err != nil {
			continue // a generated cycle, or a pattern of the draft's dialect
		}
		for range 8 {
			data := g.value(3)
			ours, library, decided := verdicts(t, codec, []byte(data))
			if decided {
				require.Equal(t, library, ours, "schema %d %s\npayload %s", i, schema, data)
				compared++
				if ours {
					valid++
				}
			}
		}
	}
	t.Logf("%d payloads compared, %d valid", compared, valid)
	require.Greater(t, compared, n*4)
	require.Greater(t, valid, compared/10)
	require.Less(t, valid, compared*9/10)
}

// schemaGen writes random schemas and values over a small alphabet, so
// that the values often match and often fail.
type schemaGen struct {
	rng   *rand.Rand
	draft string
}

func (g *schemaGen) pick(xs ...string) string { return xs[g.rng.IntN(len(xs))] }

func (g *schemaGen) value(depth int) string {
	k := g.rng.IntN(10)
	if depth == 0 {
		k %= 6
	}
	switch k {
	case 0:
		return g.pick("null", "true", "false")
	case 1:
		return g.pick("0", "1", "-1", "1.0", "2.5", "3", "1e2", "100", "7", "0.1", "-0")
	case 2, 3:
		return g.pick(`"a"`, `"b"`, `"ab"`, `"abc"`, `""`, `"2020-01-02"`, `"x@y.z"`, `"A1"`, `"[a-"`, `"^a+$"`)
	case 4, 5, 6:
		var items []string
		for range g.rng.IntN(4) {
			items = append(items, g.value(depth-1))
		}
		if g.rng.IntN(4) == 0 && len(items) > 0 {
			items = append(items, items[0])
		}
		return "[" + strings.Join(items, ",") + "]"
	default:
		var members []string
		seen := map[string]bool{}
		for range g.rng.IntN(4) {
			k := g.pick("a", "b", "c", "ab", "x1")
			if !seen[k] {
				seen[k] = true
				members = append(members, `"`+k+`":`+g.value(depth-1))
			}
		}
		return "{" + strings.Join(members, ",") + "}"
	}
}

func (g *schemaGen) schema(depth int) string {
	if depth == 0 || g.rng.IntN(5) == 0 {
		return g.pick(`true`, `false`, `{}`, `{"type":"string"}`, `{"type":"integer"}`, `{"$ref":"#/definitions/a"}`, `{"minimum":1}`, `{"enum":[1,"a",null,[1]]}`)
	}
	var kws []string
	modern := strings.Contains(g.draft, "/draft/")
	for range 1 + g.rng.IntN(3) {
		sub := func() string { return g.schema(depth - 1) }
		switch g.rng.IntN(29) {
		case 0:
			kws = append(kws, `"type":`+g.pick(`"object"`, `"array"`, `"number"`, `["string","null"]`, `"integer"`, `"boolean"`))
		case 1:
			kws = append(kws, `"const":`+g.value(1))
		case 2:
			kws = append(kws, `"enum":[`+g.value(1)+`,`+g.value(1)+`,1.0]`)
		case 3:
			kws = append(kws, `"properties":{"a":`+sub()+`,"ab":`+sub()+`}`)
		case 4:
			kws = append(kws, `"patternProperties":{"^a":`+sub()+`,"1$":`+sub()+`}`)
		case 5:
			kws = append(kws, `"additionalProperties":`+sub())
		case 6:
			kws = append(kws, `"required":["a"]`, `"minProperties":1`, `"maxProperties":2`)
		case 7:
			kws = append(kws, `"items":`+sub())
		case 8:
			if modern && strings.Contains(g.draft, "2020-12") {
				kws = append(kws, `"prefixItems":[`+sub()+`,`+sub()+`]`)
			} else {
				kws = append(kws, `"items":[`+sub()+`,`+sub()+`]`, `"additionalItems":`+sub())
			}
		case 9:
			kws = append(kws, `"contains":`+sub())
			if modern {
				kws = append(kws, `"minContains":`+g.pick("0", "1", "2"), `"maxContains":2`)
			}
		case 10:
			kws = append(kws, `"uniqueItems":true`, `"minItems":1`, `"maxItems":3`)
		case 11:
			kws = append(kws, `"minLength":1`, `"maxLength":2`)
		case 12:
			kws = append(kws, `"pattern":"`+g.pick("^a", "b$", "^[a-z]+$", `\\d`)+`"`)
		case 13:
			kws = append(kws, `"minimum":`+g.pick("0", "1.5", "-1"), `"exclusiveMaximum":`+g.pick("3", "100"))
		case 14:
			kws = append(kws, `"multipleOf":`+g.pick("0.5", "2", "0.1"))
		case 15:
			kws = append(kws, `"allOf":[`+sub()+`,`+sub()+`]`)
		case 16:
			kws = append(kws, `"anyOf":[`+sub()+`,`+sub()+`]`)
		case 17:
			kws = append(kws, `"oneOf":[`+sub()+`,`+sub()+`,`+sub()+`]`)
		case 18:
			kws = append(kws, `"not":`+sub())
		case 19:
			if g.draft != "http://json-schema.org/draft-04/schema#" {
				kws = append(kws, `"if":`+sub(), `"then":`+sub(), `"else":`+sub())
			}
		case 20:
			if modern {
				kws = append(kws, `"unevaluatedProperties":`+sub())
			} else {
				kws = append(kws, `"dependencies":{"a":["b"],"b":`+sub()+`}`)
			}
		case 21:
			if modern {
				kws = append(kws, `"unevaluatedItems":`+sub())
			}
		case 22:
			if modern {
				kws = append(kws, `"dependentSchemas":{"a":`+sub()+`}`, `"dependentRequired":{"b":["c"]}`)
			}
		case 23:
			if g.draft != "http://json-schema.org/draft-04/schema#" {
				kws = append(kws, `"propertyNames":`+sub())
			}
		case 24:
			kws = append(kws, `"$ref":"#/definitions/`+g.pick("a", "b")+`"`)
		case 25:
			kws = append(kws, `"format":"`+g.pick("date", "email", "regex", "ipv4")+`"`)
		case 26: // branches told apart by a const, as event types are
			branch := func() string {
				rest := sub()
				if !strings.HasPrefix(rest, "{") || rest == "{}" {
					rest = `{"type":"object"}`
				}
				return `{"properties":{"` + g.pick("a", "b") + `":{"const":` + g.pick(`"a"`, `"b"`, `"ab"`, `1`) + `}},` + strings.TrimPrefix(rest, "{")
			}
			kws = append(kws, `"`+g.pick("oneOf", "anyOf")+`":[`+branch()+`,`+branch()+`,{"$ref":"#/definitions/a","properties":{"a":{"const":"b"}}}]`)
		case 27:
			kws = append(kws, `"if":{"properties":{"a":{"const":"`+g.pick("a", "b")+`"}}}`, `"then":`+sub(), `"else":`+sub())
		case 28: // items evaluated in place by contains, a prefix and items, then unevaluatedItems
			if strings.Contains(g.draft, "2020-12") {
				kws = append(kws, `"allOf":[{"contains":{"const":"a"}},{"prefixItems":[true,`+sub()+`]},`+g.pick(`{"items":true}`, `{"contains":true}`, `{}`)+`]`, `"unevaluatedItems":`+sub())
			}
		}
	}
	// A keyword twice is the last one's: fine for both validators.
	return "{" + strings.Join(kws, ",") + "}"
}

// Numbers are compared as written, exactly, as the library and the spec
// compare them: not as the doubles they round to (the sixth review).
func TestJSONSchemaNumbersAreExact(t *testing.T) {
	for _, c := range []struct {
		schema, payload string
		valid           bool
	}{
		{`{"type":"integer"}`, `1.0000000000000001`, false},
		{`{"type":"number","maximum":100}`, `100.00000000000000001`, false},
		{`{"exclusiveMaximum":100}`, `99.999999999999999999`, true},
		{`{"exclusiveMinimum":0}`, `1e-400`, true},
		{`{"exclusiveMinimum":0}`, `-1e-400`, false},
		{`{"const":0.3}`, `0.30000000000000001`, false},
		{`{"const":0.3}`, `3e-1`, true},
		{`{"enum":[1]}`, `1.0000000000000001`, false},
		{`{"enum":[1]}`, `1.000`, true},
		{`{"not":{"const":0}}`, `1e-400`, true},
		{`{"const":0}`, `-0.0e7`, true},
		{`{"uniqueItems":true}`, `[1, 1.0000000000000001]`, true},
		{`{"uniqueItems":true}`, `[1, 10e-1]`, false},
		{`{"multipleOf":0.1}`, `0.1000000000000000055511151231257827`, false},
		{`{"multipleOf":0.1}`, `12.3`, true},
		{`{"multipleOf":3}`, `9.0000000000000001`, false},
		{`{"multipleOf":3}`, `9e300`, true},
		{`{"multipleOf":0.5}`, `1e-999999`, false},
		{`{"maximum":9007199254740992}`, `9007199254740993.0`, false},
		{`{"const":9007199254740993}`, `9007199254740993e0`, true},
		{`{"type":"integer","minimum":1}`, `0.99999999999999999`, false},
		{`{"$schema":"http://json-schema.org/draft-04/schema#","type":"integer"}`, `1e2`, true},
	} {
		codec, err := newJSONSchemaCodec(1, c.schema, nil)
		require.NoError(t, err)
		ours, library, decided := verdicts(t, codec, []byte(c.payload))
		require.True(t, decided)
		require.Equal(t, c.valid, ours, "%s ← %s", c.schema, c.payload)
		if c.payload != `1e-999999` { // the library's own fraction would have a million digits
			require.Equal(t, library, ours, "%s ← %s: as the library", c.schema, c.payload)
		}
	}
}

func TestDecimal(t *testing.T) {
	for _, c := range []struct {
		a, b string
		cmp  int
	}{
		{"1", "1.0", 0}, {"10e-1", "1", 0}, {"-0", "0.0e5", 0}, {"1e-400", "0", 1}, {"-1e-400", "0", -1},
		{"0.5", "0.05", 1}, {"-0.5", "-0.05", -1}, {"123.45", "1.2345e2", 0}, {"99.9", "100", -1}, {"1e999999", "9e999998", 1},
	} {
		require.Equal(t, c.cmp, parseDecimal(c.a).cmp(parseDecimal(c.b)), "%s ? %s", c.a, c.b)
		require.Equal(t, -c.cmp, parseDecimal(c.b).cmp(parseDecimal(c.a)), "%s ? %s", c.b, c.a)
	}
	for lit, integer := range map[string]bool{"1": true, "1.0": true, "1.5": false, "1e2": true, "15e-1": false, "0": true, "1e-400": false, "123456789e-3": false, "123000e-3": true} {
		require.Equal(t, integer, parseDecimal(lit).isInteger(), lit)
	}
}

// multipleOf by remainders is the exact quotient's integrality, for
// divisors of 64 bits and longer.
func TestDecimalMultipleOf(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	digits := func(max int) string {
		b := make([]byte, 1+rng.IntN(max))
		for i := range b {
			b[i] = byte('0' + rng.IntN(10))
		}
		b[0] = byte('1' + rng.IntN(9))
		return string(b)
	}
	hits := 0
	for range 5000 {
		md, me := digits(25), rng.IntN(17)-8
		m := fmt.Sprintf("%se%d", md, me)
		n := fmt.Sprintf("%se%d", digits(60), rng.IntN(25)-12)
		if rng.IntN(3) == 0 { // a multiple: M × K × 10^(b+c)
			mi, _ := new(big.Int).SetString(md, 10)
			ki, _ := new(big.Int).SetString(digits(6), 10)
			n = fmt.Sprintf("%se%d", mi.Mul(mi, ki), me+rng.IntN(7)-3)
		}
		nr, _ := new(big.Rat).SetString(n)
		mr, _ := new(big.Rat).SetString(m)
		want := new(big.Rat).Quo(nr, mr).IsInt()
		if want {
			hits++
		}
		require.Equal(t, want, parseDecimal(n).multipleOf(newDivisor(parseDecimal(m))), "%s multipleOf %s", n, m)
	}
	require.Greater(t, hits, 500)
}

// Items evaluated in place by contains, then counted in a longer prefix,
// are counted once: counted twice, the set looked complete, what later
// subschemas evaluated was dropped, and unevaluatedItems refused ["a",
// "x", "y"] (the eighth review).
func TestJSONSchemaEvaluatedItemsAcrossPrefixes(t *testing.T) {
	const d2020 = `"$schema":"https://json-schema.org/draft/2020-12/schema",`
	for _, c := range []struct {
		schema, payload string
		valid           bool
	}{
		{`{` + d2020 + `"allOf":[{"contains":{"const":"a"}},{"prefixItems":[true,true]},{"items":true}],"unevaluatedItems":false}`, `["a","x","y"]`, true},
		{`{` + d2020 + `"contains":{"const":"a"},"allOf":[{"prefixItems":[true,true]},{"items":true}],"unevaluatedItems":false}`, `["a","x","y"]`, true},
		{`{` + d2020 + `"contains":{"const":"a"},"allOf":[{"prefixItems":[true,true]},{"contains":{"const":"y"}}],"unevaluatedItems":false}`, `["a","x","y"]`, true},
		{`{` + d2020 + `"contains":{"const":"a"},"allOf":[{"prefixItems":[true,true]}],"anyOf":[{"items":true}],"unevaluatedItems":false}`, `["a","x","y"]`, true},
		{`{` + d2020 + `"contains":{"const":"a"},"allOf":[{"prefixItems":[true,true]}],"unevaluatedItems":false}`, `["a","x","y"]`, false},
		{`{` + d2020 + `"not":{"contains":{"const":"a"},"allOf":[{"prefixItems":[true,true]},{"items":true}],"unevaluatedItems":false}}`, `["a","x","y"]`, false},
	} {
		codec, err := newJSONSchemaCodec(1, c.schema, nil)
		require.NoError(t, err)
		ours, library, decided := verdicts(t, codec, []byte(c.payload))
		require.True(t, decided)
		require.Equal(t, c.valid, ours, c.schema)
		require.Equal(t, library, ours, "%s: as the library", c.schema)
	}
}
