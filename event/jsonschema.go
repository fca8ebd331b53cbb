package event

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"regexp/syntax"
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
	validator *schemaValidator
}

// jsonSchemaBase is the base URL schemas are compiled under: references
// resolve against it, and it can be fetched from nowhere.
// (.invalid is reserved: no such host exists).
const jsonSchemaBase = "https://registry.effectively.invalid/"

func newJSONSchemaCodec(id int, text string, refs []reference) (*jsonSchemaCodec, error) {
	if err := checkSchemaSize(text, refs); err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{}) // load nothing
	regexps := &regexpBudget{}
	c.UseRegexpEngine(regexps.compile)
	root, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("the schema is not JSON: %w", err)
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
	docs := &schemaDocCheck{regexps: regexps, url: len(base.String())} // the schema and its references together
	if err := docs.check(root); err != nil {
		return nil, err
	}
	for _, r := range refs {
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(r.text))
		if err != nil {
			return nil, fmt.Errorf("reference %s is not JSON: %w", Excerpt(r.name), err)
		}
		ref, err := url.Parse(r.name)
		if err != nil {
			return nil, fmt.Errorf("reference %s is not a URI reference: %w", Excerpt(r.name), err)
		}
		at := base.ResolveReference(ref).String()
		docs.url = len(at)
		if err := docs.check(doc); err != nil {
			return nil, fmt.Errorf("reference %s: %w", Excerpt(r.name), err)
		}
		if err := c.AddResource(at, doc); err != nil {
			return nil, err
		}
	}
	if err := docs.done(); err != nil {
		return nil, err
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
	nodes, err := schemaNodes(s)
	if err != nil {
		return nil, err
	}
	validator, err := newSchemaValidator(s, nodes, regexps)
	if err != nil {
		return nil, err
	}
	return &jsonSchemaCodec{validator: validator}, nil
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
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return nil, notJSON("the payload", err)
	}
	// Numbers are compared exactly, as decimals: 1e-400 is above 0.
	v, err = payloadDecimals(v)
	if err != nil {
		return nil, decodeErr(ReasonInvalidData, "the payload is not I-JSON: %v", err)
	}
	fail, err := c.validator.validate(v)
	if err != nil {
		return nil, err
	}
	if fail != nil {
		return nil, decodeErr(ReasonSchemaMismatch, "the payload does not match its JSON Schema: %s", Excerpt(fail.String()))
	}
	return payload, nil
}

var english = message.NewPrinter(language.English)

// firstCause is the innermost first cause of a validation error (the
// schema's, against its meta-schema): where it failed and why, in one line.
func firstCause(ve *jsonschema.ValidationError) string {
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	return fmt.Sprintf("at /%s: %s", shorten(strings.Join(ve.InstanceLocation, "/")), describeFailure(ve.ErrorKind))
}

// describeFailure says why a value failed, in at most 1,000 bytes.
func describeFailure(k jsonschema.ErrorKind) string {
	if f, ok := k.(*kind.Format); ok && f.Err != nil {
		// Not the value again: a regular expression can be a megabyte.
		return shorten(fmt.Sprintf("not a valid %s: %s", f.Want, shortError(f.Err)))
	}
	return shorten(k.LocalizedString(english))
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
