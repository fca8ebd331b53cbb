package event

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
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
}

// jsonSchemaBase is the base URL schemas are compiled under: references
// resolve against it, and it can be fetched from nowhere.
// (.invalid is reserved: no such host exists).
const jsonSchemaBase = "https://registry.effectively.invalid/"

func newJSONSchemaCodec(id int, text string, refs []reference) (*jsonSchemaCodec, error) {
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{}) // load nothing
	add := func(name, text string) error {
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
		if err != nil {
			return fmt.Errorf("%s is not JSON: %w", Excerpt(name), err)
		}
		return c.AddResource(name, doc)
	}
	for _, r := range refs {
		if err := add(jsonSchemaBase+r.name, r.text); err != nil {
			return nil, err
		}
	}
	root := fmt.Sprintf("%sschema-%d.json", jsonSchemaBase, id)
	if err := add(root, text); err != nil {
		return nil, err
	}
	s, err := c.Compile(root)
	if err != nil {
		return nil, err
	}
	return &jsonSchemaCodec{schema: s}, nil
}

// check validates payload and returns it: it is the event's JSON.
func (c *jsonSchemaCodec) check(payload []byte) ([]byte, error) {
	if !utf8.Valid(payload) {
		return nil, decodeErr(ReasonInvalidUTF8, "the payload is not valid UTF-8 at byte %d", invalidUTF8Offset(payload))
	}
	if _, err := parseDocument(payload, MaxNesting); err != nil {
		return nil, notJSON("the payload", err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return nil, notJSON("the payload", err)
	}
	if err := c.schema.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		msg := err.Error()
		if errors.As(err, &ve) {
			msg = firstCause(ve)
		}
		return nil, decodeErr(ReasonSchemaMismatch, "the payload does not match its JSON Schema: %s", Excerpt(msg))
	}
	return payload, nil
}

var english = message.NewPrinter(language.English)

// firstCause is the innermost first cause of a validation error: where it
// failed and why, in one line.
func firstCause(ve *jsonschema.ValidationError) string {
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	return fmt.Sprintf("at /%s: %s", strings.Join(ve.InstanceLocation, "/"), ve.ErrorKind.LocalizedString(english))
}
