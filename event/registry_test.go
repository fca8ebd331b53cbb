package event

import (
	"context"
	binenc "encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// memRegistry is a schema registry in memory: the decoder's side of the
// registry protocol (schemas by ID and by subject and version), answering
// as franz-go's client does, including its errors. The real registry is
// exercised by the end-to-end suites (test/registry_test.go).
type memRegistry struct {
	mu       sync.Mutex
	byID     map[int]sr.Schema
	bySubj   map[string]sr.SubjectSchema // "subject/version"
	down     error                       // answered to everything while set
	requests int
}

func newMemRegistry() *memRegistry {
	return &memRegistry{byID: map[int]sr.Schema{}, bySubj: map[string]sr.SubjectSchema{}}
}

func (m *memRegistry) add(id int, subject string, version int, s sr.Schema) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.byID[id] = s
	m.bySubj[fmt.Sprintf("%s/%d", subject, version)] = sr.SubjectSchema{Subject: subject, Version: version, ID: id, Schema: s}
}

func (m *memRegistry) setDown(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.down = err
}

func (m *memRegistry) SchemaByID(_ context.Context, id int) (sr.Schema, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests++
	if m.down != nil {
		return sr.Schema{}, m.down
	}
	s, ok := m.byID[id]
	if !ok {
		return sr.Schema{}, &sr.ResponseError{StatusCode: http.StatusNotFound, ErrorCode: 40403, Message: "Schema not found"}
	}
	return s, nil
}

func (m *memRegistry) SchemaByVersion(_ context.Context, subject string, version int) (sr.SubjectSchema, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests++
	if m.down != nil {
		return sr.SubjectSchema{}, m.down
	}
	s, ok := m.bySubj[fmt.Sprintf("%s/%d", subject, version)]
	if !ok {
		return sr.SubjectSchema{}, &sr.ResponseError{StatusCode: http.StatusNotFound, ErrorCode: 40402, Message: "Version not found"}
	}
	return s, nil
}

const productAvro = `{"type":"record","name":"Product","namespace":"shop","fields":[
	{"name":"sku","type":"string"},
	{"name":"version","type":"long"},
	{"name":"type","type":"string"},
	{"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
	{"name":"updated","type":{"type":"long","logicalType":"timestamp-millis"}},
	{"name":"updated_us","type":{"type":"long","logicalType":"timestamp-micros"}},
	{"name":"launch","type":{"type":"int","logicalType":"date"}},
	{"name":"opens","type":{"type":"int","logicalType":"time-millis"}},
	{"name":"id","type":{"type":"string","logicalType":"uuid"}},
	{"name":"tags","type":{"type":"array","items":"string"}},
	{"name":"attrs","type":{"type":"map","values":"int"}},
	{"name":"color","type":["null",{"type":"enum","name":"Color","symbols":["RED","GREEN"]}],"default":null},
	{"name":"weight","type":["null","double"],"default":null},
	{"name":"ratio","type":"float"},
	{"name":"active","type":"boolean"},
	{"name":"blob","type":"bytes"},
	{"name":"code","type":{"type":"fixed","name":"Code","size":2}},
	{"name":"note","type":"string"}
]}`

// wire frames payload in the Confluent wire format.
func wire(id int, index []int, payload []byte) []byte {
	var h sr.ConfluentHeader
	b, err := h.AppendEncode(nil, id, index)
	if err != nil {
		panic(err)
	}
	return append(b, payload...)
}

func product(over map[string]any) map[string]any {
	p := map[string]any{
		"sku": "sku-1", "version": int64(3), "type": "product.updated",
		"price":      big.NewRat(-1234567, 100),
		"updated":    time.Date(2026, 12, 3, 10, 11, 12, 345e6, time.UTC),
		"updated_us": time.Date(2026, 12, 3, 10, 11, 12, 345678e3, time.UTC),
		"launch":     time.Date(2027, 1, 2, 0, 0, 0, 0, time.UTC),
		"opens":      9*time.Hour + 30*time.Minute + 1500*time.Millisecond,
		"id":         "0b7c1d9e-6a55-4c3f-9d11-2f7f6c1a2b3c",
		"tags":       []string{"a", "b\"q"},
		"attrs":      map[string]int{"n": 1},
		"color":      map[string]any{"shop.Color": "GREEN"},
		"weight":     nil,
		"ratio":      float32(0.5),
		"active":     true,
		"blob":       []byte{0, 1, 2},
		"code":       [2]byte{'h', 'i'},
		"note":       "tab\there, nul\x00",
	}
	for k, v := range over {
		p[k] = v
	}
	return p
}

func avroPayload(_ testing.TB, schema string, v any) []byte {
	b, err := avro.Marshal(avro.MustParse(schema), v)
	if err != nil {
		panic(err)
	}
	return b
}

func registryWith(t testing.TB) *memRegistry {
	reg := newMemRegistry()
	reg.add(1, "products-value", 1, sr.Schema{Schema: productAvro})
	reg.add(2, "other-value", 1, sr.Schema{Schema: `syntax = "proto3"; message M { string a = 1; }`, Type: sr.TypeProtobuf})
	return reg
}

func avroCfg(reg SchemaRegistry) DecoderConfig {
	return DecoderConfig{Format: FormatAvro, Registry: reg, KeyStrategy: StrategyField, KeyPointer: "/sku",
		TypePointer: "/type", SubjectPointer: "/sku", VersionPointer: "/version"}
}

// registryDecodeCases are TestDecode's cases for the registry formats.
func registryDecodeCases() []decodeCase {
	reg := registryWith(nil)
	good := avroPayload(nil, productAvro, product(nil))
	cfg := avroCfg(reg)
	rec := func(v []byte) Record { return Record{Key: []byte("sku-1"), Value: v} }
	nulls := `{"type":"record","name":"N","fields":[{"name":"sku","type":"string"},{"name":"type","type":"string"},{"name":"n","type":{"type":"array","items":"null"}}]}`
	reg.add(3, "nulls-value", 1, sr.Schema{Schema: nulls})
	// A block of 2^40 nulls: six bytes of count.
	empty := avroPayload(nil, nulls, map[string]any{"sku": "sku-1", "type": "t", "n": []any{}})
	bomb := append(binenc.AppendVarint(empty[:len(empty)-1], 1<<40), 0)
	return []decodeCase{
		{name: "avro: wrong magic byte", cfg: cfg, rec: rec(append([]byte{1}, good...)), reason: ReasonNotWireFormat},
		{name: "avro: shorter than the header", cfg: cfg, rec: rec([]byte{0, 0, 1}), reason: ReasonNotWireFormat},
		{name: "avro: JSON on an avro topic", cfg: cfg, rec: rec([]byte(`{"sku":"sku-1"}`)), reason: ReasonNotWireFormat},
		{name: "avro: unknown schema id", cfg: cfg, rec: rec(wire(99999, nil, good)), reason: ReasonUnknownSchema},
		{name: "avro: a protobuf schema's id", cfg: cfg, rec: rec(wire(2, nil, good)), reason: ReasonUnusableSchema},
		{name: "avro: truncated", cfg: cfg, rec: rec(wire(1, nil, good[:len(good)-3])), reason: ReasonSchemaMismatch},
		{name: "avro: trailing bytes", cfg: cfg, rec: rec(wire(1, nil, append(append([]byte(nil), good...), 7))), reason: ReasonSchemaMismatch},
		{name: "avro: a billion nulls", cfg: DecoderConfig{Format: FormatAvro, Registry: reg, KeyStrategy: StrategyContentHash, TypePointer: "/type", SubjectPointer: "/sku"},
			rec: rec(wire(3, nil, bomb)), reason: ReasonTooLarge},
		{name: "avro: subject differs from the key", cfg: cfg, rec: Record{Key: []byte("sku-2"), Value: wire(1, nil, good)}, reason: ReasonSubjectMismatch},
		{name: "avro: decoded", cfg: cfg, rec: rec(wire(1, nil, good)), check: func(t *testing.T, ev Event) {
			require.JSONEq(t, `{"sku":"sku-1","version":3,"type":"product.updated","price":"-12345.67",
				"updated":"2026-12-03T10:11:12.345Z","updated_us":"2026-12-03T10:11:12.345678Z","launch":"2027-01-02","opens":"09:30:01.500",
				"id":"0b7c1d9e-6a55-4c3f-9d11-2f7f6c1a2b3c","tags":["a","b\"q"],"attrs":{"n":1},"color":"GREEN","weight":null,
				"ratio":0.5,"active":true,"blob":"AAEC","code":"aGk=","note":"tab\there, nul\u0000"}`, string(ev.Data))
			require.Contains(t, string(ev.Data), `"price":"-12345.67"`, "a decimal keeps its exact digits, as a string")
			require.Equal(t, "product.updated", ev.Type)
			require.Equal(t, "sku-1", ev.Subject)
			require.Equal(t, int64(3), ev.Version)
			require.Equal(t, testTopic, ev.Source)
			require.NotNil(t, ev.Wire)
			require.Equal(t, 1, ev.Wire.SchemaID)
			require.Equal(t, good, ev.Wire.Payload)
		}},
	}
}

func TestRegistryDecodeSameEventAsJSON(t *testing.T) {
	// The event of an Avro record is the event of its JSON form on a json
	// topic: one key, one payload hash. Everything after decoding is
	// format-blind.
	reg := registryWith(t)
	d, err := NewDecoder(withTopic(avroCfg(reg)))
	require.NoError(t, err)
	ev, err := d.Decode(Record{Key: []byte("sku-1"), Value: wire(1, nil, avroPayload(t, productAvro, product(nil)))})
	require.NoError(t, err)

	jcfg := avroCfg(nil)
	jcfg.Format = FormatJSON
	jd, err := NewDecoder(withTopic(jcfg))
	require.NoError(t, err)
	jev, err := jd.Decode(Record{Key: []byte("sku-1"), Value: ev.Data})
	require.NoError(t, err)
	require.Equal(t, jev.Key, ev.Key)
	require.Equal(t, jev.PayloadHash, ev.PayloadHash)
	require.Nil(t, jev.Wire)
}

func withTopic(cfg DecoderConfig) DecoderConfig {
	cfg.Topic = "products"
	return cfg
}

func TestRegistryUnavailableIsNotTheRecordsFault(t *testing.T) {
	reg := registryWith(t)
	d, err := NewDecoder(withTopic(avroCfg(reg)))
	require.NoError(t, err)
	r := Record{Key: []byte("sku-1"), Value: wire(1, nil, avroPayload(t, productAvro, product(nil)))}

	for _, down := range []error{
		errors.New("dial tcp 127.0.0.1:18081: connect: connection refused"),
		&sr.ResponseError{StatusCode: http.StatusServiceUnavailable, Message: "unavailable"},
		&sr.ResponseError{StatusCode: http.StatusUnauthorized, Message: "Unauthorized"},
	} {
		reg.setDown(down)
		_, err = d.Decode(r)
		require.ErrorIs(t, err, ErrSchemaRegistryUnavailable)
		require.False(t, IsPermanent(err), "a registry outage must not dead-letter: %v", err)
		require.Empty(t, ReasonOf(err))
	}
	reg.setDown(nil)
	ev, err := d.Decode(r)
	require.NoError(t, err, "the registry is back: the same record decodes")
	require.Equal(t, "sku-1", ev.Subject)

	// Known schemas are not asked for again: the registry going away
	// changes nothing for them.
	reg.setDown(errors.New("gone"))
	_, err = d.Decode(r)
	require.NoError(t, err)
}

func TestRegistryUnknownSchemaIsRememberedNotAskedPerRecord(t *testing.T) {
	reg := registryWith(t)
	d, err := NewDecoder(withTopic(avroCfg(reg)))
	require.NoError(t, err)
	r := Record{Key: []byte("sku-1"), Value: wire(42042, nil, []byte{1, 2})}
	for range 100 {
		_, err = d.Decode(r)
		require.Equal(t, ReasonUnknownSchema, ReasonOf(err))
	}
	require.Equal(t, 1, reg.requests)
}

func TestAvroSchemaEvolution(t *testing.T) {
	// v2 adds a field with a default: records of both versions decode, each
	// with its own writer's schema; v1's records have no such field.
	v1 := `{"type":"record","name":"P","fields":[{"name":"sku","type":"string"},{"name":"type","type":"string"}]}`
	v2 := `{"type":"record","name":"P","fields":[{"name":"sku","type":"string"},{"name":"type","type":"string"},{"name":"color","type":"string","default":"none"}]}`
	reg := newMemRegistry()
	reg.add(10, "p-value", 1, sr.Schema{Schema: v1})
	reg.add(11, "p-value", 2, sr.Schema{Schema: v2})
	d, err := NewDecoder(DecoderConfig{Topic: "p", Format: FormatAvro, Registry: reg, KeyStrategy: StrategyContentHash, TypePointer: "/type", SubjectPointer: "/sku"})
	require.NoError(t, err)
	e1, err := d.Decode(Record{Key: []byte("a"), Value: wire(10, nil, avroPayload(t, v1, map[string]any{"sku": "a", "type": "t"}))})
	require.NoError(t, err)
	e2, err := d.Decode(Record{Key: []byte("a"), Value: wire(11, nil, avroPayload(t, v2, map[string]any{"sku": "a", "type": "t", "color": "red"}))})
	require.NoError(t, err)
	require.JSONEq(t, `{"sku":"a","type":"t"}`, string(e1.Data))
	require.JSONEq(t, `{"sku":"a","type":"t","color":"red"}`, string(e2.Data))
}

func TestAvroReferences(t *testing.T) {
	reg := newMemRegistry()
	reg.add(20, "shop.Money", 1, sr.Schema{Schema: `{"type":"record","name":"Money","namespace":"shop","fields":[{"name":"cents","type":"long"}]}`})
	reg.add(21, "order-value", 1, sr.Schema{
		Schema:     `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"string"},{"name":"type","type":"string"},{"name":"total","type":"Money"},{"name":"next","type":["null","Order"],"default":null}]}`,
		References: []sr.SchemaReference{{Name: "shop.Money", Subject: "shop.Money", Version: 1}},
	})
	d, err := NewDecoder(DecoderConfig{Topic: "o", Format: FormatAvro, Registry: reg, KeyStrategy: StrategyField, KeyPointer: "/id", TypePointer: "/type", SubjectPointer: "/id"})
	require.NoError(t, err)
	full := `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"string"},{"name":"type","type":"string"},{"name":"total","type":{"type":"record","name":"Money","fields":[{"name":"cents","type":"long"}]}},{"name":"next","type":["null","Order"],"default":null}]}`
	v := map[string]any{"id": "o1", "type": "t", "total": map[string]any{"cents": int64(5)},
		"next": map[string]any{"shop.Order": map[string]any{"id": "o2", "type": "u", "total": map[string]any{"cents": int64(6)}, "next": nil}}}
	ev, err := d.Decode(Record{Key: []byte("o1"), Value: wire(21, nil, avroPayload(t, full, v))})
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"o1","type":"t","total":{"cents":5},"next":{"id":"o2","type":"u","total":{"cents":6},"next":null}}`, string(ev.Data))

	// A reference the registry lacks: the schema cannot be used.
	reg.add(22, "bad-value", 1, sr.Schema{Schema: `{"type":"record","name":"B","fields":[{"name":"m","type":"shop.Nope"}]}`,
		References: []sr.SchemaReference{{Name: "shop.Nope", Subject: "shop.Nope", Version: 1}}})
	_, err = d.Decode(Record{Key: []byte("o1"), Value: wire(22, nil, []byte{0})})
	require.Equal(t, ReasonUnusableSchema, ReasonOf(err), "%v", err)
}

const productProto = `syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
message Envelope { string note = 1; }
message Product {
  string sku = 1;
  int64 version = 2;
  string type = 3;
  google.protobuf.Timestamp updated = 4;
  google.protobuf.Int64Value stock = 5;
  google.protobuf.StringValue color = 6;
  repeated string tags = 7;
  Kind kind = 8;
  int32 count = 9;
  message Inner { bool ok = 1; }
  Inner inner = 10;
  enum Kind { KIND_UNSPECIFIED = 0; BOOK = 1; }
}`

func protoMessage(t *testing.T, d *Decoder, id int, idx []int) *dynamicpb.Message {
	t.Helper()
	s, err := d.registry.schema(context.Background(), id, true)
	require.NoError(t, err)
	md, err := s.proto.message(idx)
	require.NoError(t, err)
	return dynamicpb.NewMessage(md)
}

func TestProtobuf(t *testing.T) {
	reg := newMemRegistry()
	reg.add(30, "products-value", 1, sr.Schema{Schema: productProto, Type: sr.TypeProtobuf})
	d, err := NewDecoder(DecoderConfig{Topic: "products", Format: FormatProtobuf, Registry: reg, KeyStrategy: StrategyField, KeyPointer: "/sku",
		TypePointer: "/type", SubjectPointer: "/sku", VersionPointer: "/version"})
	require.NoError(t, err)

	m := protoMessage(t, d, 30, []int{1})
	set := func(name string, v protoreflect.Value) {
		m.Set(m.Descriptor().Fields().ByName(protoreflect.Name(name)), v)
	}
	set("sku", protoreflect.ValueOfString("sku-1"))
	set("version", protoreflect.ValueOfInt64(7))
	set("type", protoreflect.ValueOfString("product.updated"))
	set("updated", protoreflect.ValueOfMessage(timestamppb.New(time.Date(2026, 12, 3, 1, 2, 3, 0, time.UTC)).ProtoReflect()))
	set("stock", protoreflect.ValueOfMessage(wrapperspb.Int64(12).ProtoReflect()))
	payload, err := proto.Marshal(m)
	require.NoError(t, err)

	ev, err := d.Decode(Record{Key: []byte("sku-1"), Value: wire(30, []int{1}, payload)})
	require.NoError(t, err)
	require.JSONEq(t, `{"sku":"sku-1","version":"7","type":"product.updated","updated":"2026-12-03T01:02:03Z","stock":"12",
		"color":null,"tags":[],"kind":"KIND_UNSPECIFIED","count":0,"inner":null}`, string(ev.Data))
	require.Equal(t, int64(7), ev.Version, "a 64-bit version is a decimal string in JSON, still a version")
	require.Equal(t, []int{1}, ev.Wire.MessageIndexes)

	// The typed helper: the payload into a generated (here: dynamic) type.
	into := protoMessage(t, d, 30, []int{1})
	require.NoError(t, ev.Unmarshal(into))
	require.True(t, proto.Equal(m, into))

	for name, value := range map[string][]byte{
		"truncated":           wire(30, []int{1}, append(append([]byte(nil), payload...), 0x0a, 0x05, 'a')), // field 1, 5 bytes long, 1 there
		"another schema's":    wire(30, []int{1}, []byte{0x9a, 0x05, 0x01, 0x41}),                           // field 83, length 1
		"no such message":     wire(30, []int{5}, payload),
		"unreadable indexes":  append([]byte{0, 0, 0, 0, 30}, 0x80),
		"wrong message index": wire(30, []int{0}, payload), // Envelope: field 2 is unknown
	} {
		_, err := d.Decode(Record{Key: []byte("sku-1"), Value: value})
		require.True(t, IsPermanent(err), "%s: %v", name, err)
		require.Contains(t, []Reason{ReasonSchemaMismatch, ReasonNotWireFormat}, ReasonOf(err), "%s: %v", name, err)
	}
}

func TestJSONSchema(t *testing.T) {
	reg := newMemRegistry()
	reg.add(40, "money", 1, sr.Schema{Type: sr.TypeJSON, Schema: `{"type":"object","properties":{"cents":{"type":"integer"}},"required":["cents"]}`})
	reg.add(41, "p-value", 1, sr.Schema{Type: sr.TypeJSON, Schema: `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object",
		"properties":{"sku":{"type":"string"},"type":{"type":"string"},"price":{"$ref":"money.json"}},"required":["sku","type"]}`,
		References: []sr.SchemaReference{{Name: "money.json", Subject: "money", Version: 1}}})
	reg.add(42, "evil-value", 1, sr.Schema{Type: sr.TypeJSON, Schema: `{"$ref":"file:///etc/passwd"}`})
	d, err := NewDecoder(DecoderConfig{Topic: "p", Format: FormatJSONSchema, Registry: reg, KeyStrategy: StrategyContentHash, TypePointer: "/type", SubjectPointer: "/sku"})
	require.NoError(t, err)
	ev, err := d.Decode(Record{Key: []byte("a"), Value: wire(41, nil, []byte(`{"sku":"a","type":"t","price":{"cents":5}}`))})
	require.NoError(t, err)
	require.JSONEq(t, `{"sku":"a","type":"t","price":{"cents":5}}`, string(ev.Data))

	_, err = d.Decode(Record{Key: []byte("a"), Value: wire(41, nil, []byte(`{"sku":"a","type":"t","price":{"cents":"5"}}`))})
	require.Equal(t, ReasonSchemaMismatch, ReasonOf(err), "%v", err)
	require.Contains(t, err.Error(), "/price/cents")
	_, err = d.Decode(Record{Key: []byte("a"), Value: wire(41, nil, []byte(`{"sku":"a","type":"t"`))})
	require.Equal(t, ReasonNotJSON, ReasonOf(err), "%v", err)
	_, err = d.Decode(Record{Key: []byte("a"), Value: wire(42, nil, []byte(`{}`))})
	require.Equal(t, ReasonUnusableSchema, ReasonOf(err), "a schema that refers to a local file is refused, not read: %v", err)
	require.NotContains(t, err.Error(), "root:")
}

func TestAvroBinaryModeCloudEvents(t *testing.T) {
	// No type pointer: the attributes come from ce_ headers, the data is
	// the Avro payload; its content-type describes the wire bytes.
	reg := registryWith(t)
	d, err := NewDecoder(DecoderConfig{Topic: "products", Format: FormatAvro, Registry: reg})
	require.NoError(t, err)
	hs := []Header{{"ce_specversion", []byte("1.0")}, {"ce_id", []byte("e-1")}, {"ce_source", []byte("/shop")},
		{"ce_type", []byte("product.updated")}, {"ce_subject", []byte("sku-1")}, {"ce_resourceversion", []byte("4")},
		{"ce_dataschema", []byte("http://registry/schemas/ids/1")}, {"content-type", []byte("application/avro")}}
	ev, err := d.Decode(Record{Key: []byte("sku-1"), Value: wire(1, nil, avroPayload(t, productAvro, product(nil))), Headers: hs})
	require.NoError(t, err)
	require.Equal(t, "e-1", ev.ID)
	require.Equal(t, int64(4), ev.Version)
	require.Equal(t, StrategyCloudEvents, ev.Strategy)
	require.Contains(t, string(ev.Data), `"sku":"sku-1"`)

	_, err = d.Decode(Record{Key: []byte("sku-1"), Value: wire(1, nil, avroPayload(t, productAvro, product(nil)))})
	require.Equal(t, ReasonMissingBinaryHeaders, ReasonOf(err), "without headers and without pointers there is no envelope: %v", err)
}

func TestAvroUnmarshal(t *testing.T) {
	reg := registryWith(t)
	d, err := NewDecoder(withTopic(avroCfg(reg)))
	require.NoError(t, err)
	ev, err := d.Decode(Record{Key: []byte("sku-1"), Value: wire(1, nil, avroPayload(t, productAvro, product(nil)))})
	require.NoError(t, err)
	var p struct {
		SKU     string    `avro:"sku"`
		Version int64     `avro:"version"`
		Price   *big.Rat  `avro:"price"`
		Updated time.Time `avro:"updated"`
		Tags    []string  `avro:"tags"`
	}
	require.NoError(t, ev.Unmarshal(&p))
	require.Equal(t, "sku-1", p.SKU)
	require.Equal(t, int64(3), p.Version)
	require.Equal(t, "-12345.67", p.Price.FloatString(2))
	require.Equal(t, []string{"a", "b\"q"}, p.Tags)

	var generic map[string]any
	require.NoError(t, json.Unmarshal(ev.Data, &generic), "the generic value is the JSON")
	require.Equal(t, "GREEN", generic["color"])
}

func TestAvroHostilePayloads(t *testing.T) {
	reg := registryWith(t)
	d, err := NewDecoder(withTopic(avroCfg(reg)))
	require.NoError(t, err)
	good := avroPayload(t, productAvro, product(nil))
	// Every prefix and every single-byte corruption is decoded or refused
	// with a reason: never a panic, never a transient error.
	for n := 0; n < len(good); n++ {
		_, err := d.Decode(Record{Key: []byte("sku-1"), Value: wire(1, nil, good[:n])})
		require.True(t, IsPermanent(err), "prefix %d: %v", n, err)
	}
	for i := range good {
		for _, b := range []byte{0x00, 0x7f, 0x80, 0xff} {
			bad := append([]byte(nil), good...)
			bad[i] = b
			_, err := d.Decode(Record{Key: []byte("sku-1"), Value: wire(1, nil, bad)})
			if err != nil {
				require.True(t, IsPermanent(err), "byte %d = %#x: %v", i, b, err)
			}
		}
	}
}

// MaxDataBytes bounds the data a record decodes to, whatever its shape:
// an array of empty records is no bytes an item on the wire and three in
// JSON, so the count alone sets the data's size; past the bound the record
// is too_large, under it the data is within what MaxDataBytes reserves.
func TestMaxDataBytesBoundsTheData(t *testing.T) {
	reg := newMemRegistry()
	reg.add(1, "e", 1, sr.Schema{Type: sr.TypeAvro, Schema: `{"type":"record","name":"M","fields":[
		{"name":"type","type":"string"},{"name":"subject","type":"string"},{"name":"pad","type":"string"},
		{"name":"empties","type":{"type":"array","items":{"type":"record","name":"E","fields":[]}}}]}`})
	reg.add(2, "e-key", 1, sr.Schema{Type: sr.TypeAvro, Schema: `"string"`})
	d, err := NewDecoder(DecoderConfig{Topic: "e", Format: FormatAvro, Registry: reg, KeyStrategy: StrategyContentHash,
		TypePointer: "/type", SubjectPointer: "/subject"})
	require.NoError(t, err)
	accepted, refused := 0, 0
	for _, pad := range []int{0, 1000, 100_000} {
		for _, n := range []int{0, 1000, 20_000, 21_900, 22_000, 500_000, 1 << 30} {
			v := []byte{0, 0, 0, 0, 1, 2, 't', 2, 's'}
			v = binenc.AppendVarint(v, int64(pad))
			v = append(v, []byte(strings.Repeat("x", pad))...)
			v = binenc.AppendVarint(v, int64(n))
			if n > 0 {
				v = append(v, 0) // the array's end
			}
			r := Record{Key: []byte{0, 0, 0, 0, 2, 2, 's'}, Value: v}
			ev, err := d.Decode(r)
			if err != nil {
				require.Equal(t, ReasonTooLarge, ReasonOf(err), "pad %d, %d empties: %v", pad, n, err)
				refused++
				continue
			}
			accepted++
			require.LessOrEqual(t, len(ev.Data), d.MaxDataBytes(Record{Value: v}), "pad %d, %d empties", pad, n)
			require.Greater(t, d.MaxDataBytes(r), d.MaxDataBytes(Record{Value: v}), "a wire-format key's JSON is reserved too")
		}
	}
	require.Positive(t, accepted)
	require.Positive(t, refused)

	js, err := NewDecoder(DecoderConfig{Topic: "j", Format: FormatJSON, KeyStrategy: StrategyContentHash, TypePointer: "/type", SubjectPointer: "/subject"})
	require.NoError(t, err)
	v := []byte(`{"type":"t","subject":"s","n":[1,2,3]}`)
	require.Equal(t, len(v), js.MaxDataBytes(Record{Key: []byte{0, 1}, Value: v}), "data cut from the value; a key never decodes to more")
}

// An event's Size counts its data, the index kept with a small event, and
// its wire payload: what a pipeline holding it holds.
func TestEventSizeCountsDataIndexAndWire(t *testing.T) {
	reg := newMemRegistry()
	reg.add(1, "s", 1, sr.Schema{Type: sr.TypeAvro, Schema: `{"type":"record","name":"M","fields":[
		{"name":"type","type":"string"},{"name":"subject","type":"string"},
		{"name":"items","type":{"type":"array","items":{"type":"record","name":"I","fields":[{"name":"n","type":"int"}]}}}]}`})
	d, err := NewDecoder(DecoderConfig{Topic: "s", Format: FormatAvro, Registry: reg, KeyStrategy: StrategyContentHash,
		TypePointer: "/type", SubjectPointer: "/subject"})
	require.NoError(t, err)
	for _, n := range []int{10, 1000, 100_000} {
		v := []byte{0, 0, 0, 0, 1, 2, 't', 2, 's'}
		v = binenc.AppendVarint(v, int64(n))
		v = append(v, make([]byte, n)...)
		v = append(v, 0)
		ev, err := d.Decode(Record{Key: []byte("s"), Value: v})
		require.NoError(t, err)
		require.Equal(t, len(v)-5, len(ev.Wire.Payload))
		min := len(ev.Data) + len(ev.Wire.Payload) + len(ev.Key)
		if n == 10 {
			require.NotNil(t, ev.doc, "a small event keeps its index")
		}
		if ev.doc != nil {
			min += 16 * n // an object per item
		}
		require.GreaterOrEqual(t, ev.Size(), min, "%d items", n)
		require.Less(t, ev.Size(), 2*min+1024, "%d items", n)
	}
}
