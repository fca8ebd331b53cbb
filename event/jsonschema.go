package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp/syntax"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// jsonSchemaCodec validates JSON payloads against one writer's JSON Schema
// (santhosh-tekuri/jsonschema: drafts 4 to 2020-12, RE2 patterns). The
// schema's references are the registry's schemas, by the names the schema
// refers to them by; nothing is loaded from anywhere else (no file, no
// network).
type jsonSchemaCodec struct {
	schema *jsonschema.Schema
	// cost bounds validation's work per value, by the payload's nesting.
	cost *schemaCost
}

// jsonSchemaBase is the base URL schemas are compiled under: references
// resolve against it, and it can be fetched from nowhere.
// (.invalid is reserved: no such host exists).
const jsonSchemaBase = "https://registry.effectively.invalid/"

func newJSONSchemaCodec(id int, text string, refs []reference) (*jsonSchemaCodec, error) {
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{}) // load nothing
	regexps := &regexpBudget{}
	c.UseRegexpEngine(regexps.compile)
	root, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("the schema is not JSON: %w", err)
	}
	docs := &schemaDocCheck{regexps: regexps} // the schema and its references together
	if err := docs.check(root); err != nil {
		return nil, err
	}
	// References resolve against the root's $id, as Confluent's resolver
	// does, else against a base of our own that no one can fetch.
	base, _ := url.Parse(fmt.Sprintf("%sschema-%d.json", jsonSchemaBase, id))
	if obj, ok := root.(map[string]any); ok {
		if s, ok := obj["$id"].(string); ok {
			if u, err := url.Parse(s); err == nil && u.IsAbs() {
				base = u
			}
		}
	}
	for _, r := range refs {
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(r.text))
		if err != nil {
			return nil, fmt.Errorf("reference %s is not JSON: %w", Excerpt(r.name), err)
		}
		if err := docs.check(doc); err != nil {
			return nil, fmt.Errorf("reference %s: %w", Excerpt(r.name), err)
		}
		ref, err := url.Parse(r.name)
		if err != nil {
			return nil, fmt.Errorf("reference %s is not a URI reference: %w", Excerpt(r.name), err)
		}
		if err := c.AddResource(base.ResolveReference(ref).String(), doc); err != nil {
			return nil, err
		}
	}
	if err := c.AddResource(base.String(), root); err != nil {
		return nil, err
	}
	s, err := c.Compile(base.String())
	if err != nil {
		var se *jsonschema.SchemaValidationError
		var ve *jsonschema.ValidationError
		if errors.As(err, &se) && errors.As(se.Err, &ve) {
			return nil, fmt.Errorf("the schema is not valid against its meta-schema: %s", firstCause(ve))
		}
		return nil, err
	}
	regexps.compiled.Store(true)
	cost, err := newSchemaCost(s)
	if err != nil {
		return nil, err
	}
	if n := cost.at(0); n > MaxSchemaApplications {
		return nil, fmt.Errorf("validating one value against this schema would apply %s subschemas to it (its references and combinators, every branch counted; the bound is %s)", atLeast(n), english.Sprint(MaxSchemaApplications))
	}
	return &jsonSchemaCodec{schema: s, cost: cost}, nil
}

// check validates payload and returns it: it is the event's JSON.
func (c *jsonSchemaCodec) check(payload []byte) ([]byte, error) {
	if !utf8.Valid(payload) {
		return nil, decodeErr(ReasonInvalidUTF8, "the payload is not valid UTF-8 at byte %d", invalidUTF8Offset(payload))
	}
	pd, err := parseDocument(payload, MaxNesting)
	if err != nil {
		return nil, notJSON("the payload", err)
	}
	if len(pd.d.issues) > 0 {
		return nil, decodeErr(ReasonInvalidData, "the payload is not I-JSON: %s", pd.d.issues[0].msg)
	}
	if err := c.cost.check(pd.d.nesting, pd.d.values, len(payload), pd.d.pairedBytes); err != nil {
		return nil, err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return nil, notJSON("the payload", err)
	}
	// The validator reads numbers as exact fractions: 1e-999999 would cost
	// seconds. A number with a fraction or an exponent is validated as the
	// double it is hashed as; integers keep their digits.
	v = asDoubles(v)
	if err := c.schema.Validate(v); err != nil {
		// Never err.Error() of a validation error: it renders every
		// cause, each quoting its value (a gigabyte for 990 failed
		// formats on a megabyte string).
		var ve *jsonschema.ValidationError
		var msg string
		if errors.As(err, &ve) {
			msg = firstCause(ve)
		} else {
			msg = err.Error()
		}
		return nil, decodeErr(ReasonSchemaMismatch, "the payload does not match its JSON Schema: %s", Excerpt(msg))
	}
	return payload, nil
}

var english = message.NewPrinter(language.English)

// atLeast says n, a saturated count: "more than 1,000" at the cap.
func atLeast(n uint64) string {
	if n >= costCap {
		return "more than " + english.Sprint(MaxSchemaApplications)
	}
	return english.Sprint(n)
}

// asDoubles replaces, in a value from jsonschema.UnmarshalJSON, every
// number that is not a plain integer with its float64.
func asDoubles(v any) any {
	switch v := v.(type) {
	case json.Number:
		if strings.ContainsAny(string(v), ".eE") {
			if f, err := strconv.ParseFloat(string(v), 64); err == nil {
				return f
			}
		}
	case map[string]any:
		for k, x := range v {
			v[k] = asDoubles(x)
		}
	case []any:
		for i, x := range v {
			v[i] = asDoubles(x)
		}
	}
	return v
}

// firstCause is the innermost first cause of a validation error: where it
// failed and why, in one line.
func firstCause(ve *jsonschema.ValidationError) string {
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	what := ve.ErrorKind.LocalizedString(english)
	if f, ok := ve.ErrorKind.(*kind.Format); ok && f.Err != nil {
		// Not the value again: a regular expression can be a megabyte.
		what = fmt.Sprintf("not a valid %s: %s", f.Want, shortError(f.Err))
	}
	return fmt.Sprintf("at /%s: %s", shorten(strings.Join(ve.InstanceLocation, "/")), shorten(what))
}

// shorten cuts s to its first 1,000 bytes, marked.
func shorten(s string) string {
	if len(s) <= 1000 {
		return s
	}
	return cutUTF8(s, 1000) + "…"
}

// shortError is err's message, any regular expression it quotes
// excerpted.
func shortError(err error) string {
	var se *syntax.Error
	if errors.As(err, &se) {
		return fmt.Sprintf("%s: %s", se.Code, Excerpt(se.Expr))
	}
	return err.Error()
}
