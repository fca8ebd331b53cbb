package config

import (
	"embed"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// configSources are the files of this package that declare the Config
// struct and its sections: the doc comments of their fields are the
// descriptions in the generated reference, so a build's binary can document
// its configuration without the source tree.
//
//go:embed config.go kafka_security.go targets.go sinks.go schema_registry.go
var configSources embed.FS

// KeyDoc describes one configuration key for the generated reference
// (docs/reference/config.md): everything in it is derived from the Config
// struct, its doc comments, [Default] and the build's [Extension].
type KeyDoc struct {
	// Key is the key as the file and `config` write it: kafka.brokers,
	// targets.warehouse.url, or topics[].format for a field of a topics: entry.
	Key string
	// Section is the key's first segment (kafka, targets, topics, ...).
	Section string
	// Type is the value's type in words: string, string list, integer,
	// boolean, duration.
	Type string
	// Default is the default as an environment variable would spell it;
	// empty when there is none.
	Default string
	// Env are the environment variables that set the key, the newest name
	// first (older names are a build's aliases). Empty for topics: fields,
	// which only the file sets.
	Env []string
	// Flag is the command-line flag that sets the key, without "--"; empty
	// when there is none.
	Flag string
	// Aliases are older keys the build still accepts for this one.
	Aliases []string
	// Doc is the field's doc comment, as one paragraph.
	Doc string
}

// SectionDoc describes one section of keys (a field of Config).
type SectionDoc struct {
	// Name is the section's key segment: kafka, postgres, targets, topics...
	Name string
	// Doc is the Config field's doc comment.
	Doc string
}

// Sections returns the sections of the configuration in the struct's order.
func Sections() []SectionDoc {
	docs := fieldDocs()
	t := reflect.TypeFor[Config]()
	out := make([]SectionDoc, 0, t.NumField())
	for i := range t.NumField() {
		sf := t.Field(i)
		out = append(out, SectionDoc{Name: tagName(sf), Doc: docs[t.Name()+"."+sf.Name]})
	}
	return out
}

// Reference returns every configuration key of a build with exts: the
// engine's keys in struct order, then targets.<name>.* for each declared
// target, then the fields of a topics: entry.
func Reference(exts ...Extension) []KeyDoc {
	docs := fieldDocs()
	def := reflect.ValueOf(defaults(exts))
	root := reflect.TypeFor[Config]()
	var out []KeyDoc
	for _, l := range leaves {
		out = append(out, KeyDoc{
			Key:     l.key,
			Section: sectionOf(l.key),
			Type:    typeWords(l.typ),
			Default: formatValue(def.FieldByIndex(l.index).Interface()),
			Env:     envOf(l.key, exts),
			Flag:    flagOf(l.key),
			Aliases: aliasesOf(l.key, exts),
			Doc:     docs[fieldDocKey(root, l.index)],
		})
	}
	tt := reflect.TypeFor[Target]()
	for _, n := range targetNames(exts) {
		for _, f := range targetFields {
			key := "targets." + n + "." + f.key
			out = append(out, KeyDoc{
				Key:     key,
				Section: "targets",
				Type:    typeWords(f.typ),
				Env:     envOf(key, exts),
				Aliases: aliasesOf(key, exts),
				Doc:     docs[fieldDocKey(tt, f.index)],
			})
		}
	}
	topic := reflect.ValueOf(defaults(exts).TopicSettings("<name>"))
	top := reflect.TypeFor[Topic]()
	for _, f := range topicFields {
		d := ""
		if f.typ != boolPtrType { // an unset override inherits; its doc says from what
			d = formatValue(topic.FieldByIndex(f.index).Interface())
		}
		out = append(out, KeyDoc{
			Key:     "topics[]." + f.key,
			Section: "topics",
			Type:    typeWords(f.typ),
			Default: d,
			Doc:     docs[fieldDocKey(top, f.index)],
		})
	}
	for _, list := range []struct {
		prefix string
		typ    reflect.Type
		fields []leaf
	}{
		{"sinks[].", reflect.TypeFor[Sink](), sinkFields},
		{"sinks[].columns[].", reflect.TypeFor[SinkColumn](), columnFields},
		{"sinks[].totals[].", reflect.TypeFor[SinkTotal](), totalFields},
	} {
		for _, f := range list.fields {
			out = append(out, KeyDoc{
				Key:     list.prefix + f.key,
				Section: "sinks",
				Type:    typeWords(f.typ),
				Doc:     docs[fieldDocKey(list.typ, f.index)],
			})
		}
	}
	return out
}

func sectionOf(key string) string {
	s, _, _ := strings.Cut(key, ".")
	return s
}

func flagOf(key string) string {
	if hasFlag(key) {
		return FlagName(key)
	}
	return ""
}

// envOf is envNames in a stable order: the key's own name, then its
// aliases' names sorted.
func envOf(key string, exts []Extension) []string {
	out := []string{EnvName(key)}
	for _, old := range aliasesOf(key, exts) {
		out = append(out, EnvName(old))
	}
	return out
}

func aliasesOf(key string, exts []Extension) []string {
	var out []string
	for _, x := range exts {
		for old, k := range x.Aliases {
			if k == key {
				out = append(out, old)
			}
		}
	}
	sort.Strings(out) // map order: keep the output stable
	return out
}

func typeWords(t reflect.Type) string {
	switch {
	case t == durationType:
		return "duration"
	case t == stringsType:
		return "string list"
	case t == boolPtrType:
		return "boolean (optional)"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int32:
		return "integer"
	}
	return t.String()
}

// fieldDocKey names the field at index below t as "Struct.Field", the key
// of fieldDocs.
func fieldDocKey(t reflect.Type, index []int) string {
	for i, x := range index {
		sf := t.Field(x)
		if i == len(index)-1 {
			return t.Name() + "." + sf.Name
		}
		t = sf.Type
	}
	return ""
}

// docLink is a Go doc link, [Default] or [Config.Redacted]: a code span in
// Markdown.
var docLink = regexp.MustCompile(`\[([A-Z][A-Za-z0-9_.]*)\]`)

var (
	fieldDocsOnce sync.Once
	fieldDocsMap  map[string]string
)

// fieldDocs maps "Struct.Field" to the field's doc comment in config.go,
// as one line of text.
func fieldDocs() map[string]string {
	fieldDocsOnce.Do(func() {
		fieldDocsMap = map[string]string{}
		entries, _ := configSources.ReadDir(".")
		for _, e := range entries {
			src, _ := configSources.ReadFile(e.Name())
			f, err := parser.ParseFile(token.NewFileSet(), e.Name(), src, parser.ParseComments)
			if err != nil {
				panic(fmt.Sprintf("config: parsing the embedded %s: %v", e.Name(), err)) // it compiled
			}
			inspectFieldDocs(f)
		}
	})
	return fieldDocsMap
}

// inspectFieldDocs records the doc comments of f's struct fields.
func inspectFieldDocs(f *ast.File) {
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			return false
		}
		for _, fld := range st.Fields.List {
			if fld.Doc == nil {
				continue
			}
			text := strings.Join(strings.Fields(fld.Doc.Text()), " ")
			text = docLink.ReplaceAllString(text, "`$1`")
			for _, name := range fld.Names {
				fieldDocsMap[ts.Name.Name+"."+name.Name] = text
			}
		}
		return false
	})
}
