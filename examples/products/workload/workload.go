// Package workload generates the products example's stream: product
// versions in Avro, Protobuf or JSON Schema, in the Confluent wire format, written by
// franz-go's sr serde as a producer would, with what a real topic has —
// re-sent records, versions of a product out of order, a schema that
// evolves mid-stream (v1 → v2, a field added: BACKWARD compatible) and
// poison of each kind a registry topic can carry. It remembers the end
// state the stream implies, for the demo and the tests to compare the
// database with.
package workload

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/bufbuild/protocompile"
	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The product schemas, each in two versions: v2 adds color.
const (
	AvroV1 = `{"type":"record","name":"Product","namespace":"shop","fields":[
		{"name":"sku","type":"string"},
		{"name":"version","type":"long"},
		{"name":"type","type":"string"},
		{"name":"name","type":"string"},
		{"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
		{"name":"updated_at","type":{"type":"long","logicalType":"timestamp-millis"}},
		{"name":"launch","type":{"type":"int","logicalType":"date"}}]}`
	AvroV2 = `{"type":"record","name":"Product","namespace":"shop","fields":[
		{"name":"sku","type":"string"},
		{"name":"version","type":"long"},
		{"name":"type","type":"string"},
		{"name":"name","type":"string"},
		{"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
		{"name":"updated_at","type":{"type":"long","logicalType":"timestamp-millis"}},
		{"name":"launch","type":{"type":"int","logicalType":"date"}},
		{"name":"color","type":"string","default":"none"}]}`
	ProtoV1 = `syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Product {
  string sku = 1;
  int64 version = 2;
  string type = 3;
  string name = 4;
  string price = 5;
  google.protobuf.Timestamp updated_at = 6;
  string launch = 7;
}
`
	ProtoV2 = `syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Product {
  string sku = 1;
  int64 version = 2;
  string type = 3;
  string name = 4;
  string price = 5;
  google.protobuf.Timestamp updated_at = 6;
  string launch = 7;
  optional string color = 8;
}
`
)

// The JSON Schema versions are closed (no other properties), so that
// adding an optional property is BACKWARD compatible: a v1 document cannot
// hold a color of another type.
var (
	JSONSchemaV1 = productJSONSchema("")
	JSONSchemaV2 = productJSONSchema(`,
			"color":{"type":"string"}`)
)

func productJSONSchema(more string) string {
	return `{"$schema":"http://json-schema.org/draft-07/schema#","title":"Product","type":"object",
		"additionalProperties":false,
		"required":["sku","version","type","name","price","updated_at","launch"],
		"properties":{
			"sku":{"type":"string","minLength":1},
			"version":{"type":"integer","minimum":1},
			"type":{"type":"string"},
			"name":{"type":"string"},
			"price":{"type":"string","pattern":"^-?[0-9]{1,10}\\.[0-9]{2}$"},
			"updated_at":{"type":"string","format":"date-time"},
			"launch":{"type":"string","format":"date"}` + more + `}}`
}

// TypeProductUpdated is every product record's type.
const TypeProductUpdated = "product.updated"

// Product is one version of a product, as the generator meant it.
type Product struct {
	SKU     string    `json:"sku"`
	Version int64     `json:"version"`
	Name    string    `json:"name"`
	Cents   int64     `json:"cents"`
	Updated time.Time `json:"updated_at"`
	Launch  time.Time `json:"launch"`
	Color   string    `json:"color,omitempty"` // "" for a version written with v1
}

func (p Product) avro(v2 bool) map[string]any {
	m := map[string]any{
		"sku": p.SKU, "version": p.Version, "type": TypeProductUpdated, "name": p.Name,
		"price": big.NewRat(p.Cents, 100), "updated_at": p.Updated, "launch": p.Launch,
	}
	if v2 {
		m["color"] = p.Color
	}
	return m
}

// Encoder writes products as a producer does: franz-go's sr serde, one
// registered Go type per schema version.
type Encoder struct {
	serde *sr.Serde
	value func(p Product, v2 bool) any
	// prefix is how many header bytes follow the schema ID (Protobuf's
	// message indexes).
	prefix int
	// mismatch, when set, makes a payload that is no value of its schema
	// from a good one (for JSON Schema: valid JSON its schema refuses).
	mismatch func(value []byte) []byte
}

type (
	avroV1 map[string]any
	avroV2 map[string]any
)

// Avro encodes with the schemas AvroV1 and AvroV2, registered as idV1 and
// idV2.
func Avro(idV1, idV2 int) Encoder {
	s1, s2 := avro.MustParse(AvroV1), avro.MustParse(AvroV2)
	var serde sr.Serde
	serde.Register(idV1, avroV1{}, sr.EncodeFn(func(v any) ([]byte, error) { return avro.Marshal(s1, map[string]any(v.(avroV1))) }))
	serde.Register(idV2, avroV2{}, sr.EncodeFn(func(v any) ([]byte, error) { return avro.Marshal(s2, map[string]any(v.(avroV2))) }))
	return Encoder{serde: &serde, value: func(p Product, v2 bool) any {
		if v2 {
			return avroV2(p.avro(true))
		}
		return avroV1(p.avro(false))
	}}
}

type (
	protoV1 struct{ m *dynamicpb.Message }
	protoV2 struct{ m *dynamicpb.Message }
)

// Protobuf encodes dynamic messages of ProtoV1 and ProtoV2, compiled here
// as a producer's build would, registered as idV1 and idV2.
func Protobuf(idV1, idV2 int) (Encoder, error) {
	md := func(text string) (protoreflect.MessageDescriptor, error) {
		c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			Accessor: protocompile.SourceAccessorFromMap(map[string]string{"product.proto": text}),
		})}
		files, err := c.Compile(context.Background(), "product.proto")
		if err != nil {
			return nil, err
		}
		return files[0].Messages().ByName("Product"), nil
	}
	d1, err := md(ProtoV1)
	if err != nil {
		return Encoder{}, err
	}
	d2, err := md(ProtoV2)
	if err != nil {
		return Encoder{}, err
	}
	build := func(d protoreflect.MessageDescriptor, p Product, v2 bool) *dynamicpb.Message {
		m := dynamicpb.NewMessage(d)
		set := func(name string, v protoreflect.Value) { m.Set(d.Fields().ByName(protoreflect.Name(name)), v) }
		set("sku", protoreflect.ValueOfString(p.SKU))
		set("version", protoreflect.ValueOfInt64(p.Version))
		set("type", protoreflect.ValueOfString(TypeProductUpdated))
		set("name", protoreflect.ValueOfString(p.Name))
		set("price", protoreflect.ValueOfString(big.NewRat(p.Cents, 100).FloatString(2)))
		set("updated_at", protoreflect.ValueOfMessage(timestamppb.New(p.Updated).ProtoReflect()))
		set("launch", protoreflect.ValueOfString(p.Launch.Format(time.DateOnly)))
		if v2 {
			set("color", protoreflect.ValueOfString(p.Color))
		}
		return m
	}
	var serde sr.Serde
	serde.Register(idV1, protoV1{}, sr.EncodeFn(func(v any) ([]byte, error) { return proto.Marshal(v.(protoV1).m) }), sr.Index(0))
	serde.Register(idV2, protoV2{}, sr.EncodeFn(func(v any) ([]byte, error) { return proto.Marshal(v.(protoV2).m) }), sr.Index(0))
	return Encoder{serde: &serde, prefix: 1, value: func(p Product, v2 bool) any {
		if v2 {
			return protoV2{build(d2, p, true)}
		}
		return protoV1{build(d1, p, false)}
	}}, nil
}

type (
	jsonV1 map[string]any
	jsonV2 map[string]any
)

// JSONSchema encodes JSON documents valid against JSONSchemaV1 and
// JSONSchemaV2, registered as idV1 and idV2: the price as its exact
// digits, times in RFC 3339, the launch as a date.
func JSONSchema(idV1, idV2 int) Encoder {
	var serde sr.Serde
	marshal := sr.EncodeFn(func(v any) ([]byte, error) {
		switch v := v.(type) {
		case jsonV1:
			return json.Marshal(map[string]any(v))
		case jsonV2:
			return json.Marshal(map[string]any(v))
		}
		return nil, fmt.Errorf("not a product document: %T", v)
	})
	serde.Register(idV1, jsonV1{}, marshal)
	serde.Register(idV2, jsonV2{}, marshal)
	return Encoder{serde: &serde, value: func(p Product, v2 bool) any {
		m := map[string]any{
			"sku": p.SKU, "version": p.Version, "type": TypeProductUpdated, "name": p.Name,
			"price": big.NewRat(p.Cents, 100).FloatString(2), "updated_at": p.Updated.Format(time.RFC3339Nano),
			"launch": p.Launch.Format(time.DateOnly),
		}
		if v2 {
			m["color"] = p.Color
			return jsonV2(m)
		}
		return jsonV1(m)
	}, mismatch: func(value []byte) []byte {
		// The same header, a document its schema refuses: no version.
		return append(append([]byte(nil), value[:5]...), `{"sku":"sku-x","type":"product.updated"}`...)
	}}
}

// Formats are the registry formats the workload writes.
var Formats = []string{"avro", "protobuf", "jsonschema"}

// Schemas are format's two schema versions, as a producer registers them.
func Schemas(format string) (v1, v2 sr.Schema, err error) {
	switch format {
	case "avro":
		return sr.Schema{Schema: AvroV1}, sr.Schema{Schema: AvroV2}, nil
	case "protobuf":
		return sr.Schema{Schema: ProtoV1, Type: sr.TypeProtobuf}, sr.Schema{Schema: ProtoV2, Type: sr.TypeProtobuf}, nil
	case "jsonschema":
		return sr.Schema{Schema: JSONSchemaV1, Type: sr.TypeJSON}, sr.Schema{Schema: JSONSchemaV2, Type: sr.TypeJSON}, nil
	}
	return sr.Schema{}, sr.Schema{}, fmt.Errorf("format %q: want one of %v", format, Formats)
}

// NewEncoder is format's encoder for the schemas registered as idV1 and
// idV2.
func NewEncoder(format string, idV1, idV2 int) (Encoder, error) {
	switch format {
	case "avro":
		return Avro(idV1, idV2), nil
	case "protobuf":
		return Protobuf(idV1, idV2)
	case "jsonschema":
		return JSONSchema(idV1, idV2), nil
	}
	return Encoder{}, fmt.Errorf("format %q: want one of %v", format, Formats)
}

// Record is a record to produce: keyed by SKU.
type Record struct {
	Key, Value []byte
}

// Stream is the generator's output: the records in order, and what the
// tables must hold once they are applied.
type Stream struct {
	Records []Record `json:"-"`
	// Total is len(Records): the records produced.
	Total int `json:"records"`
	// Newest is each product's newest version: the products table's rows.
	Newest map[string]Product `json:"newest"`
	// Events is the distinct product versions: the product_events rows.
	Events int `json:"events"`
	// Poison counts the poison records by the dead-letter reason each must get.
	Poison  map[string]int `json:"poison"`
	Resent  int            `json:"resent"`
	Swapped int            `json:"swapped"`
	// FirstV2 is the index in Records of the first record written with
	// schema v2.
	FirstV2 int `json:"first_v2"`
}

// Config shapes a stream.
type Config struct {
	Products int
	// Poison adds, for about one product version in twenty, a poison
	// record of one kind: an unknown schema ID, a truncated payload, a
	// wrong magic byte.
	Poison bool
	Seed   uint64
	// NameBytes pads each product's name to this many bytes (0: names of
	// a few bytes): large records, for the memory bounds' tests.
	NameBytes int
}

// Generate writes each product with one to five versions: the first half
// of the stream in schema v1, the rest in v2; 15% of the records sent
// twice, neighbouring versions of a product swapped one time in four.
func Generate(c Config, enc Encoder) (Stream, error) {
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed^0x5eed))
	out := Stream{Newest: map[string]Product{}, Poison: map[string]int{}}
	type pending struct {
		p  Product
		v2 bool
	}
	var all []pending
	for i := range c.Products {
		sku := fmt.Sprintf("sku-%04d", i)
		n := 1 + rng.IntN(5)
		for v := 1; v <= n; v++ {
			p := Product{SKU: sku, Version: int64(v), Name: padName(fmt.Sprintf("Product %d v%d", i, v), c.NameBytes), Cents: rng.Int64N(10_000_000) - 5_000,
				Updated: time.UnixMilli(1_780_000_000_000 + rng.Int64N(1e10)).UTC(), Launch: time.Date(2026, 1, 1+rng.IntN(365), 0, 0, 0, 0, time.UTC)}
			all = append(all, pending{p: p})
		}
	}
	// Shuffle the versions over the stream, then put each product's back
	// in order, then swap some neighbours: disorder, within a product.
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	byKey := map[string][]int{}
	for i, a := range all {
		byKey[a.p.SKU] = append(byKey[a.p.SKU], i)
	}
	for sku := range c.Products {
		idx := byKey[fmt.Sprintf("sku-%04d", sku)]
		vs := make([]pending, len(idx))
		for k, i := range idx {
			vs[k] = all[i]
		}
		for a := range vs {
			for b := a + 1; b < len(vs); b++ {
				if vs[b].p.Version < vs[a].p.Version {
					vs[a], vs[b] = vs[b], vs[a]
				}
			}
		}
		for k := 0; k+1 < len(vs); k++ {
			if rng.IntN(4) == 0 {
				vs[k], vs[k+1] = vs[k+1], vs[k]
				out.Swapped++
			}
		}
		for k, i := range idx {
			all[i] = vs[k]
		}
	}
	for i := len(all) / 2; i < len(all); i++ {
		all[i].v2 = true
		all[i].p.Color = []string{"red", "green", "blue"}[rng.IntN(3)]
	}
	for _, a := range all {
		if a.v2 && out.FirstV2 == 0 {
			out.FirstV2 = len(out.Records)
		}
		value, err := enc.serde.Encode(enc.value(a.p, a.v2))
		if err != nil {
			return Stream{}, fmt.Errorf("encoding %s v%d: %w", a.p.SKU, a.p.Version, err)
		}
		rec := Record{Key: []byte(a.p.SKU), Value: value}
		out.Records = append(out.Records, rec)
		out.Events++
		if rng.IntN(100) < 15 {
			out.Records = append(out.Records, rec)
			out.Resent++
		}
		if cur, ok := out.Newest[a.p.SKU]; !ok || a.p.Version > cur.Version {
			out.Newest[a.p.SKU] = a.p
		}
		if !c.Poison {
			continue
		}
		// Poison, keyed like the products so it shares their partitions.
		switch rng.IntN(60) {
		case 0:
			bad := append([]byte(nil), value...)
			bad[1], bad[2], bad[3], bad[4] = 0x7f, 0xff, 0xff, 0xf0 // an ID no registry has
			out.Records = append(out.Records, Record{Key: rec.Key, Value: bad})
			out.Poison["unknown_schema"]++
		case 1:
			// Bytes that are no value of the schema: an Avro record cut
			// short (its fields have no tags, so any cut leaves one
			// unread), a Protobuf field whose tag runs off the end (a cut
			// Protobuf message can be a shorter valid one).
			bad := append(append([]byte(nil), value[:5+enc.prefix]...), 0xff, 0xff, 0xff, 0xff)
			switch {
			case enc.mismatch != nil:
				bad = enc.mismatch(value)
			case enc.prefix == 0:
				bad = append([]byte(nil), value[:len(value)-3]...)
			}
			out.Records = append(out.Records, Record{Key: rec.Key, Value: bad})
			out.Poison["schema_mismatch"]++
		case 2:
			bad := append([]byte{1}, value[1:]...)
			out.Records = append(out.Records, Record{Key: rec.Key, Value: bad})
			out.Poison["not_wire_format"]++
		}
	}
	out.Total = len(out.Records)
	return out, nil
}

// padName is name padded with dots to n bytes.
func padName(name string, n int) string {
	if n <= len(name) {
		return name
	}
	return name + " " + strings.Repeat(".", n-len(name)-1)
}
