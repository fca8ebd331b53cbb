package event

import (
	"context"
	be "encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/anypb"
)

// Hostile records and schemas for the registry formats, from a review
// whose brief was "break this". Each failed before its fix.

func hostileDecoder(t *testing.T, reg SchemaRegistry, format string) *Decoder {
	t.Helper()
	d, err := NewDecoder(DecoderConfig{Topic: "t", Format: format, Registry: reg, KeyStrategy: StrategyContentHash, TypePointer: "/type", SubjectPointer: "/sku"})
	require.NoError(t, err)
	return d
}

// allocated is what f allocates, in bytes.
func allocated(f func()) uint64 {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	f()
	runtime.ReadMemStats(&m1)
	return m1.TotalAlloc - m0.TotalAlloc
}

// Protobuf writes unset fields: 10 KB of empty messages of a type with
// 200 fields would be 150 MB of JSON. Refused before it is built.
func TestProtobufUnsetFieldsCannotAmplify(t *testing.T) {
	var b strings.Builder
	b.WriteString("syntax = \"proto3\";\nmessage Big {\n")
	for i := 1; i <= 200; i++ {
		fmt.Fprintf(&b, "  string field_with_a_longish_name_%03d = %d;\n", i, i)
	}
	b.WriteString("}\nmessage Top { string sku = 1; string type = 2; repeated Big items = 3; }\n")
	reg := newMemRegistry()
	reg.add(1, "s", 1, sr.Schema{Type: sr.TypeProtobuf, Schema: b.String()})
	d := hostileDecoder(t, reg, FormatProtobuf)
	payload := []byte{0x0a, 1, 'a', 0x12, 1, 't'}
	for range 5000 {
		payload = append(payload, 0x1a, 0) // one empty Big
	}
	rec := Record{Key: []byte("a"), Value: wire(1, []int{1}, payload)}
	_, _ = d.Decode(rec) // the schema, compiled
	var err error
	n := allocated(func() { _, err = d.Decode(rec) })
	require.Equal(t, ReasonTooLarge, ReasonOf(err), "%v", err)
	require.Less(t, n, uint64(32<<20), "a 10 KB record allocated %d MB before being refused", n>>20)

	// The same through an Any of the schema's own type.
	reg.add(2, "a", 1, sr.Schema{Type: sr.TypeProtobuf, Schema: b.String() + "import \"google/protobuf/any.proto\";\nmessage Wrap { string sku = 1; string type = 2; google.protobuf.Any x = 3; }\n"})
	inner := []byte{}
	for range 5000 {
		inner = append(inner, 0x1a, 0)
	}
	anyb, err := proto.Marshal(&anypb.Any{TypeUrl: "type.googleapis.com/Top", Value: inner})
	require.NoError(t, err)
	wrap := append([]byte{0x0a, 1, 'a', 0x12, 1, 't', 0x1a}, protoLen(len(anyb))...)
	rec = Record{Key: []byte("a"), Value: wire(2, []int{2}, append(wrap, anyb...))}
	_, _ = d.Decode(rec)
	n = allocated(func() { _, err = d.Decode(rec) })
	require.Equal(t, ReasonTooLarge, ReasonOf(err), "%v", err)
	require.Less(t, n, uint64(32<<20), "an Any of 10 KB allocated %d MB before being refused", n>>20)
}

// Unmarshal builds a dynamic message per element before anything weighs
// it: a record of 1 MB of empty elements of a repeated message field (two
// bytes each: 0a 00) took 634 ms and 181 MiB of heap, and three at once
// took a worker past 384 MiB (review 21). The wire format is weighed
// first; a record of a real shape, 5,000 small messages and a packed
// array of 50,000 numbers, is decoded.
func TestProtobufEmptyMessagesCannotAmplifyMemory(t *testing.T) {
	reg := newMemRegistry()
	reg.add(1, "s", 1, sr.Schema{Type: sr.TypeProtobuf, Schema: `syntax = "proto3";
message M { string sku = 1; string type = 2; repeated E e = 3; repeated int32 n = 4; map<string, E> m = 5; }
message E { string name = 1; int64 qty = 2; }`})
	d := hostileDecoder(t, reg, FormatProtobuf)
	head := []byte{0x0a, 1, 'a', 0x12, 1, 't'}
	decode := func(body []byte) (uint64, error) {
		rec := Record{Key: []byte("a"), Value: wire(1, []int{0}, append(append([]byte{}, head...), body...))}
		var err error
		n := allocated(func() { _, err = d.Decode(rec) })
		return n, err
	}
	_, err := decode(nil) // the schema, compiled
	require.NoError(t, err)

	for _, c := range []struct {
		name string
		elem []byte
	}{
		{"empty messages in a list", []byte{0x1a, 0x00}},
		{"empty map entries", []byte{0x2a, 0x00}},
	} {
		var body []byte
		for len(body) < 1000<<10 {
			body = append(body, c.elem...)
		}
		n, err := decode(body)
		require.Equal(t, ReasonTooLarge, ReasonOf(err), "%s: %v", c.name, err)
		require.ErrorContains(t, err, "more than 64 MiB of memory")
		require.Less(t, n, uint64(8<<20), "%s: 1 MB allocated %d MB before being refused", c.name, n>>20)
	}

	realistic := func(messages, numbers int) []byte {
		var b []byte
		for i := range messages {
			e := append([]byte{0x0a, 4}, fmt.Sprintf("i%03d", i%1000)...)
			e = append(e, 0x10, byte(i%100+1))
			b = append(append(append(b, 0x1a), protoLen(len(e))...), e...)
		}
		var packed []byte
		for i := range numbers {
			packed = append(packed, byte(i%100+1))
		}
		return append(append(append(b, 0x22), protoLen(len(packed))...), packed...)
	}
	n, err := decode(realistic(1000, 10_000))
	require.NoError(t, err, "a record of 1,000 small messages and 10,000 packed numbers")
	t.Logf("a record of 1,000 messages and 10,000 numbers: decoded, %d KB allocated", n>>10)
	// A megabyte of the same shapes weighs far less than the bound.
	big := realistic(50_000, 400_000)
	c, err := d.registry.schema(t.Context(), 1, false)
	require.NoError(t, err)
	md := c.proto.file.Messages().Get(0)
	big = append(append([]byte{}, head...), big...)
	cost := c.proto.decodeCost(md, big, 1, maxProtoDecodeHeap)
	require.Less(t, cost, maxProtoDecodeHeap, "a %d-byte record of 50,000 messages and 400,000 numbers", len(big))
	var live runtime.MemStats
	built := allocated(func() {
		m := dynamicpb.NewMessage(md)
		require.NoError(t, proto.Unmarshal(big, m))
		runtime.GC()
		runtime.ReadMemStats(&live)
		runtime.KeepAlive(m)
	})
	t.Logf("a %d-byte record of 50,000 messages and 400,000 numbers weighs %d MiB; unmarshalled, it allocated %d MiB and held %d MiB of heap", len(big), cost>>20, built>>20, live.HeapAlloc>>20)
}

func protoLen(n int) []byte {
	var b []byte
	for ; n >= 0x80; n >>= 7 {
		b = append(b, byte(n)|0x80)
	}
	return append(b, byte(n))
}

// The JSON Schema validator reads numbers as exact fractions: 1e-999999
// (a valid double: zero) cost seconds per kilobyte.
func TestJSONSchemaHugeExponentsAreCheap(t *testing.T) {
	reg := newMemRegistry()
	reg.add(1, "s", 1, sr.Schema{Type: sr.TypeJSON, Schema: `{"type":"object","properties":{"n":{"type":"array","items":{"type":"number","minimum":0}}}}`})
	d := hostileDecoder(t, reg, FormatJSONSchema)
	nums := strings.TrimSuffix(strings.Repeat("1e-999999,", 1000), ",")
	start := time.Now()
	_, err := d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, []byte(`{"sku":"a","type":"t","n":[`+nums+`]}`))})
	require.NoError(t, err)
	// Not a performance bound: on HEAD before the fix this took minutes.
	require.Less(t, time.Since(start), 30*time.Second)
	_, err = d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, []byte(`{"sku":"a","type":"t","n":[1e999999]}`))})
	require.Equal(t, ReasonInvalidData, ReasonOf(err), "%v", err)
}

// A decimal's precision bounds its scale: a scale of 100,000 padded each
// value with 100,000 zeros, quadratically.
func TestAvroDecimalOfAbsurdPrecisionIsUnusable(t *testing.T) {
	s := `{"type":"record","name":"R","fields":[{"name":"sku","type":"string"},{"name":"type","type":"string"},{"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":100000,"scale":100000}}]}`
	reg := newMemRegistry()
	reg.add(1, "s", 1, sr.Schema{Schema: s})
	d := hostileDecoder(t, reg, FormatAvro)
	_, err := d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, []byte{2, 'a', 2, 't', 2, 1})})
	require.Equal(t, ReasonUnusableSchema, ReasonOf(err), "%v", err)
}

// Decimals are strings of their exact digits: as JSON numbers they were
// hashed as doubles, and two amounts collided.
func TestAvroDecimalDigitsReachTheHash(t *testing.T) {
	s := `{"type":"record","name":"R","fields":[{"name":"sku","type":"string"},{"name":"type","type":"string"},{"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":20,"scale":2}}]}`
	reg := newMemRegistry()
	reg.add(1, "s", 1, sr.Schema{Schema: s})
	d := hostileDecoder(t, reg, FormatAvro)
	var evs []Event
	for _, a := range []string{"10000000000000000001/100", "10000000000000000002/100", "5/100"} {
		r, _ := new(big.Rat).SetString(a)
		ev, err := d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, avroPayload(t, s, map[string]any{"sku": "a", "type": "t", "amount": r}))})
		require.NoError(t, err)
		evs = append(evs, ev)
	}
	require.NotEqual(t, evs[0].PayloadHash, evs[1].PayloadHash, "%s and %s hash alike", evs[0].Data, evs[1].Data)
	require.Contains(t, string(evs[2].Data), `"amount":"0.05"`)
}

// A cancelled context (a revoke, a shutdown) while a schema compiles is
// not the schema's fault, and must not be remembered as one.
func TestCancelledCompileIsNotPermanent(t *testing.T) {
	reg := newMemRegistry()
	reg.add(30, "p", 1, sr.Schema{Schema: productProto, Type: sr.TypeProtobuf})
	d := hostileDecoder(t, reg, FormatProtobuf)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rec := Record{Key: []byte("a"), Value: wire(30, []int{1}, []byte{0x0a, 1, 'a', 0x1a, 1, 't'})}
	_, err := d.DecodeContext(ctx, rec)
	require.False(t, IsPermanent(err), "a cancelled context dead-letters the record: %v", err)
	require.ErrorIs(t, err, ErrSchemaRegistryUnavailable)
	_, err = d.Decode(rec)
	require.NoError(t, err, "the next record of the schema, with a live context")
}

type proxy404 struct{ *memRegistry }

func (proxy404) SchemaByID(context.Context, int) (sr.Schema, error) {
	return sr.Schema{}, &sr.ResponseError{StatusCode: http.StatusNotFound, Raw: []byte("<html>404 Not Found</html>")}
}

// A 404 without the registry's error code is a proxy or a wrong path,
// not an answer about the schema: the partition waits.
func TestA404FromAProxyIsNotUnknownSchema(t *testing.T) {
	d := hostileDecoder(t, proxy404{}, FormatAvro)
	_, err := d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, []byte{0})})
	require.ErrorIs(t, err, ErrSchemaRegistryUnavailable)
}

func TestRefusalsAreBounded(t *testing.T) {
	d := hostileDecoder(t, newMemRegistry(), FormatAvro)
	for id := 1000; id < 1000+maxRefusals+500; id++ {
		_, _ = d.Decode(Record{Key: []byte("a"), Value: wire(id, nil, []byte{0})})
	}
	require.LessOrEqual(t, len(d.registry.refused), maxRefusals)
}

// Concurrent first decodes of one schema fetch and compile it once.
func TestConcurrentFirstDecodesFetchOnce(t *testing.T) {
	reg := registryWith(t)
	d, err := NewDecoder(withTopic(avroCfg(reg)))
	require.NoError(t, err)
	rec := Record{Key: []byte("sku-1"), Value: wire(1, nil, avroPayload(t, productAvro, product(nil)))}
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			_, err := d.Decode(rec)
			require.NoError(t, err)
		})
	}
	wg.Wait()
	require.Equal(t, 1, reg.requests)
}

// References resolve against the root's $id, as Confluent resolves them.
func TestJSONSchemaReferenceResolvesAgainstRootID(t *testing.T) {
	reg := newMemRegistry()
	reg.add(100, "money", 1, sr.Schema{Type: sr.TypeJSON, Schema: `{"type":"object","properties":{"cents":{"type":"integer"}}}`})
	reg.add(1, "o", 1, sr.Schema{Type: sr.TypeJSON,
		Schema:     `{"$id":"https://example.com/schemas/order.json","type":"object","properties":{"price":{"$ref":"money.json"}}}`,
		References: []sr.SchemaReference{{Name: "money.json", Subject: "money", Version: 1}}})
	d := hostileDecoder(t, reg, FormatJSONSchema)
	_, err := d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, []byte(`{"sku":"a","type":"t","price":{"cents":5}}`))})
	require.NoError(t, err)
	_, err = d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, []byte(`{"sku":"a","type":"t","price":{"cents":"5"}}`))})
	require.Equal(t, ReasonSchemaMismatch, ReasonOf(err), "%v", err)
}

// An Any of a type of the schema's own file, and a proto2 extension it
// declares, are the schema's values.
func TestProtobufAnyAndExtensionsOfTheSchema(t *testing.T) {
	reg := newMemRegistry()
	reg.add(1, "s", 1, sr.Schema{Type: sr.TypeProtobuf, Schema: `syntax = "proto3";
import "google/protobuf/any.proto";
message M { string sku = 1; string type = 2; google.protobuf.Any extra = 3; }
message Other { string x = 1; }`})
	reg.add(2, "e", 1, sr.Schema{Type: sr.TypeProtobuf, Schema: `syntax = "proto2";
message M { optional string sku = 1; optional string type = 2; extensions 100 to 200; }
extend M { optional string ext = 100; }`})
	d := hostileDecoder(t, reg, FormatProtobuf)
	m := protoMessage(t, d, 1, []int{0})
	o := protoMessage(t, d, 1, []int{1})
	o.Set(o.Descriptor().Fields().ByName("x"), protoreflect.ValueOfString("y"))
	ob, err := proto.Marshal(o)
	require.NoError(t, err)
	m.Set(m.Descriptor().Fields().ByName("sku"), protoreflect.ValueOfString("a"))
	m.Set(m.Descriptor().Fields().ByName("type"), protoreflect.ValueOfString("t"))
	m.Set(m.Descriptor().Fields().ByName("extra"), protoreflect.ValueOfMessage((&anypb.Any{TypeUrl: "type.googleapis.com/Other", Value: ob}).ProtoReflect()))
	payload, err := proto.Marshal(m)
	require.NoError(t, err)
	ev, err := d.Decode(Record{Key: []byte("a"), Value: wire(1, []int{0}, payload)})
	require.NoError(t, err, "Any of a type in the schema")
	require.Contains(t, string(ev.Data), `"x":"y"`)
	ev, err = d.Decode(Record{Key: []byte("a"), Value: wire(2, []int{0}, []byte{0x0a, 1, 'a', 0x12, 1, 't', 0xa2, 0x06, 1, 'z'})})
	require.NoError(t, err, "a proto2 extension declared in the schema")
	require.Contains(t, string(ev.Data), `"z"`)
}

func TestAvroDateOutOfRange(t *testing.T) {
	s := `{"type":"record","name":"R","fields":[{"name":"sku","type":"string"},{"name":"type","type":"string"},{"name":"d","type":{"type":"int","logicalType":"date"}}]}`
	reg := newMemRegistry()
	reg.add(1, "s", 1, sr.Schema{Schema: s})
	d := hostileDecoder(t, reg, FormatAvro)
	for _, days := range []int64{2147483647, -800000} { // "5881580-07-11", "-0221-09-04"
		payload := []byte{2, 'a', 2, 't'}
		u := uint64(days<<1) ^ uint64(days>>63)
		for ; u >= 0x80; u >>= 7 {
			payload = append(payload, byte(u)|0x80)
		}
		payload = append(payload, byte(u))
		ev, err := d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, payload)})
		require.Equal(t, ReasonSchemaMismatch, ReasonOf(err), "date %d became %s", days, ev.Data)
	}
}

// anyChain is n Anys, each holding the next (the innermost empty).
func anyChain(n int) []byte {
	const url = "type.googleapis.com/google.protobuf.Any"
	var v []byte
	for range n {
		b := append(protowire.AppendTag(nil, 1, protowire.BytesType), protowire.AppendBytes(nil, []byte(url))...)
		b = protowire.AppendBytes(protowire.AppendTag(b, 2, protowire.BytesType), v)
		v = b
	}
	return v
}

// Each Any is parsed afresh, with its own recursion limit: a chain of
// Anys each holding the next was parsed again at every level (23,000 in a
// megabyte took 8.5 s and allocated 23 GiB). Their nesting counts like any
// other message's.
func TestProtobufAnyChainIsRefusedAsTooDeep(t *testing.T) {
	reg := newMemRegistry()
	reg.add(1, "s", 1, sr.Schema{Type: sr.TypeProtobuf, Schema: `syntax = "proto3";
import "google/protobuf/any.proto";
message M { string sku = 1; string type = 2; google.protobuf.Any extra = 3; }`})
	d := hostileDecoder(t, reg, FormatProtobuf)
	head := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte("a"))
	head = protowire.AppendBytes(protowire.AppendTag(head, 2, protowire.BytesType), []byte("t"))
	for _, n := range []int{MaxNesting + 1, 5000} {
		payload := protowire.AppendBytes(protowire.AppendTag(append([]byte(nil), head...), 3, protowire.BytesType), anyChain(n))
		var err error
		alloc := allocated(func() { _, err = d.Decode(Record{Key: []byte("a"), Value: wire(1, []int{0}, payload)}) })
		require.Equal(t, ReasonNestingTooDeep, ReasonOf(err), "%d Anys: %v", n, err)
		// Parsed at most MaxNesting times: 5,000 Anys (220 KiB) allocated
		// 1.1 GiB when each level parsed the rest again.
		require.Less(t, alloc, uint64(64<<20), "%d Anys: bytes allocated", n)
	}
	// A few levels are a value like any other.
	payload := protowire.AppendBytes(protowire.AppendTag(append([]byte(nil), head...), 3, protowire.BytesType), anyChain(3))
	_, err := d.Decode(Record{Key: []byte("a"), Value: wire(1, []int{0}, payload)})
	require.NoError(t, err)
}

// A schema ID beyond 31 bits is no registry's: unknown at once, without
// asking (Confluent's registry would answer a bare 404, an outage to us,
// and the partition would wait for good).
func TestSchemaIDBeyond31BitsIsUnknownWithoutAsking(t *testing.T) {
	reg := registryWith(t)
	d := hostileDecoder(t, reg, FormatAvro)
	before := reg.requests
	for _, id := range []int{math.MaxInt32 + 1, math.MaxUint32} {
		_, err := d.Decode(Record{Key: []byte("a"), Value: wire(id, nil, []byte{0})})
		require.Equal(t, ReasonUnknownSchema, ReasonOf(err), "%v", err)
	}
	require.Equal(t, before, reg.requests, "the registry was asked")
}

// avroString is an Avro string's encoding.
func avroString(s string) []byte {
	return append(be.AppendVarint(nil, int64(len(s))), s...)
}

// Avro writes a union's value without naming its branch in JSON, so two
// branches can write the same JSON: a Credit and a Debit of one amount, a
// string and bytes. Their events must still differ (content-hash keys
// would drop the second as a duplicate of the first), and the same value
// re-sent must still be a duplicate.
func TestAvroUnionBranchesTellEventsApart(t *testing.T) {
	schema := `{"type":"record","name":"R","fields":[{"name":"sku","type":"string"},{"name":"type","type":"string"},
	  {"name":"change","type":[{"type":"record","name":"Credit","fields":[{"name":"amount","type":"long"}]},
	                           {"type":"record","name":"Debit","fields":[{"name":"amount","type":"long"}]}]},
	  {"name":"note","type":["null","string","bytes"]}]}`
	reg := newMemRegistry()
	reg.add(1, "s", 1, sr.Schema{Schema: schema})
	d := hostileDecoder(t, reg, FormatAvro)
	payload := func(change int64, note []byte) []byte {
		p := append(avroString("a"), avroString("t")...)
		p = be.AppendVarint(p, change)
		p = be.AppendVarint(p, 100)
		return append(p, note...)
	}
	noteString := append(be.AppendVarint(nil, 1), avroString("AAE=")...)
	noteBytes := append(be.AppendVarint(nil, 2), be.AppendVarint(nil, 2)...)
	noteBytes = append(noteBytes, 0, 1)
	decode := func(p []byte) Event {
		ev, err := d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, p)})
		require.NoError(t, err)
		return ev
	}
	credit, debit := decode(payload(0, noteString)), decode(payload(1, noteString))
	require.JSONEq(t, string(credit.Data), string(debit.Data), "the JSON does not tell the branches apart")
	require.NotEqual(t, credit.PayloadHash, debit.PayloadHash)
	require.NotEqual(t, credit.Key, debit.Key, "content-hash keys")
	asBytes := decode(payload(0, noteBytes))
	require.JSONEq(t, string(credit.Data), string(asBytes.Data))
	require.NotEqual(t, credit.PayloadHash, asBytes.PayloadHash)
	require.Equal(t, credit.PayloadHash, decode(payload(0, noteString)).PayloadHash, "the same value re-sent")
}

// Keys written by a registry serializer (Kafka Connect's key converters,
// most producers' key serializers) are decoded like the value and compared
// as their text: a string key as the string, a record of one field as that
// field's value. They were compared as their wire bytes, so every record
// was a subject mismatch.
func TestWireFormatKeysAreReadAsTheirText(t *testing.T) {
	value := `{"type":"record","name":"R","fields":[{"name":"sku","type":"string"},{"name":"type","type":"string"}]}`
	reg := newMemRegistry()
	reg.add(1, "t-value", 1, sr.Schema{Schema: value})
	reg.add(2, "t-key", 1, sr.Schema{Schema: `"string"`})
	reg.add(3, "u-key", 1, sr.Schema{Schema: `{"type":"record","name":"K","fields":[{"name":"sku","type":"string"}]}`})
	reg.add(4, "v-key", 1, sr.Schema{Schema: `{"type":"record","name":"K2","fields":[{"name":"sku","type":"string"},{"name":"n","type":"long"}]}`})
	d := hostileDecoder(t, reg, FormatAvro)
	v := wire(1, nil, avroPayload(t, value, map[string]any{"sku": "sku-1", "type": "t"}))
	for _, key := range [][]byte{
		wire(2, nil, avroString("sku-1")),
		wire(3, nil, avroPayload(t, `{"type":"record","name":"K","fields":[{"name":"sku","type":"string"}]}`, map[string]any{"sku": "sku-1"})),
	} {
		ev, err := d.Decode(Record{Key: key, Value: v})
		require.NoError(t, err)
		require.Equal(t, "sku-1", ev.Subject)
	}
	// A wider key is its canonical JSON: not this subject.
	_, err := d.Decode(Record{Key: wire(4, nil, avroPayload(t, `{"type":"record","name":"K2","fields":[{"name":"sku","type":"string"},{"name":"n","type":"long"}]}`, map[string]any{"sku": "sku-1", "n": int64(7)})), Value: v})
	require.Equal(t, ReasonSubjectMismatch, ReasonOf(err), "%v", err)
	require.Contains(t, err.Error(), `{\"n\":7,\"sku\":\"sku-1\"}`)
	// A key that does not decode (a schema the registry does not have, a
	// plain serializer's bytes that start with zero: a small int64) stays
	// as its bytes, as before, and is compared as such.
	for _, key := range [][]byte{wire(99999, nil, avroString("sku-1")), {0, 0, 0, 0, 0, 0, 0, 7}} {
		asked := reg.requests
		_, err = d.Decode(Record{Key: key, Value: v})
		require.Equal(t, ReasonSubjectMismatch, ReasonOf(err), "%v", err)
		if key[1] == 0 && key[4] == 0 {
			require.Equal(t, asked, reg.requests, "schema ID 0 is no registry's: not asked")
		}
	}
	// The registry down: the key waits like the value would.
	reg.setDown(errors.New("connection refused"))
	_, err = d.Decode(Record{Key: wire(5, nil, avroString("sku-1")), Value: v})
	require.ErrorIs(t, err, ErrSchemaRegistryUnavailable)
}

// A registry node that lags the one a schema was registered with answers
// 40403 for a moment. An ID near the highest this worker has read is asked
// again (the partition retries, as for an outage) for unknownGrace before
// its record is dead-lettered; once the node has it, the record decodes.
// An ID far beyond is unknown at once.
func TestJustRegisteredSchemaUnknownToALaggingNodeIsRetried(t *testing.T) {
	reg := registryWith(t) // IDs 1 and 2
	d := hostileDecoder(t, reg, FormatAvro)
	clock := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	d.registry.now = func() time.Time { return clock }
	good := avroPayload(t, productAvro, product(nil))
	_, err := d.Decode(Record{Key: []byte("sku-1"), Value: wire(1, nil, good)})
	require.NoError(t, err)

	rec := Record{Key: []byte("sku-1"), Value: wire(3, nil, good)}
	_, err = d.Decode(rec)
	require.ErrorIs(t, err, ErrSchemaRegistryUnavailable, "%v", err)
	clock = clock.Add(unknownGrace / 2)
	reg.add(3, "products-value", 2, sr.Schema{Schema: productAvro}) // the node catches up
	_, err = d.Decode(rec)
	require.NoError(t, err)

	// Never registered: retried for the grace, then the record's fault.
	lost := Record{Key: []byte("sku-1"), Value: wire(4, nil, good)}
	_, err = d.Decode(lost)
	require.ErrorIs(t, err, ErrSchemaRegistryUnavailable)
	clock = clock.Add(unknownGrace)
	_, err = d.Decode(lost)
	require.Equal(t, ReasonUnknownSchema, ReasonOf(err), "%v", err)
	asked := reg.requests
	_, err = d.Decode(lost)
	require.Equal(t, ReasonUnknownSchema, ReasonOf(err))
	require.Equal(t, asked, reg.requests, "remembered once refused")

	// Far beyond the IDs in use (a poison record's): unknown at once.
	_, err = d.Decode(Record{Key: []byte("sku-1"), Value: wire(3+unknownIDMargin+1, nil, good)})
	require.Equal(t, ReasonUnknownSchema, ReasonOf(err), "%v", err)
}

// A union's branches are hashed by index, never by name: an array of
// field-less records of two long-named types costs one payload byte an
// item, and names (4,000 bytes each) allocated gigabytes for a 97 KiB
// record.
func TestAvroUnionBranchesCostNoMoreThanThePayload(t *testing.T) {
	ns := strings.Repeat("n.", 2000) + "x"
	schema := `{"type":"record","name":"R","fields":[{"name":"sku","type":"string"},{"name":"type","type":"string"},
		{"name":"xs","type":{"type":"array","items":[{"type":"record","name":"A","namespace":"` + ns + `","fields":[]},{"type":"record","name":"B","namespace":"` + ns + `","fields":[]}]}}]}`
	reg := newMemRegistry()
	reg.add(1, "s", 1, sr.Schema{Type: sr.TypeAvro, Schema: schema})
	d := hostileDecoder(t, reg, FormatAvro)
	n := 100_000
	p := append(avroString("a"), avroString("t")...)
	p = be.AppendVarint(p, int64(n))
	p = append(p, make([]byte, n)...) // n items, each branch 0
	p = append(p, 0)
	var err error
	alloc := allocated(func() { _, err = d.Decode(Record{Key: []byte("a"), Value: wire(1, nil, p)}) })
	require.NoError(t, err)
	require.Less(t, alloc, uint64(64<<20), "bytes allocated for a %d KiB record", len(p)>>10)
}

// gatedRegistry holds each SchemaByID until released.
type gatedRegistry struct {
	*memRegistry
	entered chan struct{}
	release chan struct{}
}

func (g *gatedRegistry) SchemaByID(ctx context.Context, id int) (sr.Schema, error) {
	g.entered <- struct{}{}
	<-g.release
	return g.memRegistry.SchemaByID(ctx, id)
}

// Partitions waiting on one fetch of a just-registered schema that a
// lagging node does not have yet all wait; none is told unknown_schema
// (the outcome was decided after the waiters were let go).
func TestConcurrentWaitersForALaggingSchemaAllWait(t *testing.T) {
	g := &gatedRegistry{memRegistry: registryWith(t), entered: make(chan struct{}, 10), release: make(chan struct{})}
	d := hostileDecoder(t, g, FormatAvro)
	good := avroPayload(t, productAvro, product(nil))
	close(g.release)
	_, err := d.Decode(Record{Key: []byte("sku-1"), Value: wire(1, nil, good)})
	require.NoError(t, err)
	<-g.entered
	g.release = make(chan struct{})
	rec := Record{Key: []byte("sku-1"), Value: wire(3, nil, good)}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	wg.Add(1)
	go func() { defer wg.Done(); _, errs[0] = d.Decode(rec) }()
	<-g.entered // the fetch is in flight
	for i := 1; i < len(errs); i++ {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = d.Decode(rec) }()
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		d.registry.mu.Lock()
		l := d.registry.loading[3]
		d.registry.mu.Unlock()
		if l != nil {
			break
		}
	}
	time.Sleep(20 * time.Millisecond) // the waiters reach the fetch's done
	close(g.release)
	wg.Wait()
	for i, err := range errs {
		require.ErrorIs(t, err, ErrSchemaRegistryUnavailable, "partition %d: %v", i, err)
	}
}

// With every place to remember a lagging ID taken, a new one is the
// record's fault at once, never retried for good.
func TestLaggingSchemaGraceEndsWhenItsMemoryIsFull(t *testing.T) {
	d := hostileDecoder(t, registryWith(t), FormatAvro)
	clock := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	d.registry.now = func() time.Time { return clock }
	good := avroPayload(t, productAvro, product(nil))
	_, err := d.Decode(Record{Key: []byte("sku-1"), Value: wire(1, nil, good)})
	require.NoError(t, err)
	for i := range maxRefusals {
		d.registry.unknownSince[-1-i] = clock
	}
	lost := Record{Key: []byte("sku-1"), Value: wire(4, nil, good)}
	_, err = d.Decode(lost)
	require.Equal(t, ReasonUnknownSchema, ReasonOf(err), "full, none past its grace: %v", err)
	// Once those are past their grace, there is room again.
	clock = clock.Add(unknownGrace)
	_, err = d.Decode(Record{Key: []byte("sku-1"), Value: wire(5, nil, good)})
	require.ErrorIs(t, err, ErrSchemaRegistryUnavailable, "%v", err)
}

// An Avro enum's symbol has no length limit: with one of 100,000 bytes
// used by 1,000 fields, each byte of a record was 100 KB of JSON, checked
// only at the record's end (review 21: 28 MiB of heap for a 105-byte
// record with 100 fields; each field a copy of the symbols). The bound is
// checked after each field, and the enum is compiled once.
func TestAvroLongEnumSymbolsCannotAmplify(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, `{"type":"record","name":"R","fields":[{"name":"e0","type":{"type":"enum","name":"E","symbols":["%s"]}}`, strings.Repeat("A", 100_000))
	for i := 1; i < 1000; i++ {
		fmt.Fprintf(&b, `,{"name":"e%x","type":"E"}`, i)
	}
	b.WriteString("]}")
	reg := newMemRegistry()
	reg.add(1, "s", 1, sr.Schema{Type: sr.TypeAvro, Schema: b.String()})
	rd := newRegistryDecoder(FormatAvro, reg)
	s, err := rd.schema(t.Context(), 1, false)
	require.NoError(t, err)
	require.Less(t, s.cost, int64(2<<20), "one node for the enum, however often it is used")
	rec := wire(1, nil, make([]byte, 1000)) // every field: the symbol
	n := allocated(func() { _, _, err = rd.transcode(t.Context(), "value", rec, maxExpansion*len(rec)+maxExpansionSlack) })
	require.Equal(t, ReasonTooLarge, ReasonOf(err), "%v", err)
	require.Less(t, n, uint64(2<<20), "a 1,005-byte record allocated %d KB before being refused", n>>10)
}

// An Any's message and a proto2 extension are unmarshalled as the
// messages they are: weighed as such before (review 22: 1 MB of empty
// elements inside an Any built 167 MiB, inside an extension 179 MiB, and
// three records at once took a worker to 388 MiB).
func TestProtobufAnyAndExtensionsAreWeighed(t *testing.T) {
	empties := func() []byte {
		var b []byte
		for len(b) < 1000<<10 {
			b = protowire.AppendTag(b, 1, protowire.BytesType)
			b = protowire.AppendBytes(b, nil)
		}
		return b
	}
	for _, c := range []struct {
		name, schema string
		payload      func() []byte
	}{
		{"an Any of empty elements", "syntax = \"proto3\";\nimport \"google/protobuf/any.proto\";\nmessage M { google.protobuf.Any a = 1; }\nmessage L { repeated E e = 1; }\nmessage E { }\n", func() []byte {
			var a []byte
			a = protowire.AppendTag(a, 1, protowire.BytesType)
			a = protowire.AppendString(a, "type.googleapis.com/L")
			a = protowire.AppendTag(a, 2, protowire.BytesType)
			a = protowire.AppendBytes(a, empties())
			return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), a)
		}},
		{"a repeated extension of empty messages", "syntax = \"proto2\";\nmessage M { extensions 1 to 100; }\nmessage E { }\nextend M { repeated E e = 1; }\n", empties},
		{"an extension holding empty elements", "syntax = \"proto2\";\nmessage M { extensions 1 to 100; }\nmessage E { }\nmessage L { repeated E e = 1; }\nextend M { optional L l = 2; }\n", func() []byte {
			return protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), empties())
		}},
	} {
		reg := newMemRegistry()
		reg.add(1, "s", 1, sr.Schema{Type: sr.TypeProtobuf, Schema: c.schema})
		rd := newRegistryDecoder(FormatProtobuf, reg)
		_, err := rd.schema(t.Context(), 1, false)
		require.NoError(t, err, c.name)
		rec := wire(1, []int{0}, c.payload())
		n := allocated(func() { _, _, err = rd.transcode(t.Context(), "value", rec, maxExpansion*len(rec)+maxExpansionSlack) })
		require.Equal(t, ReasonTooLarge, ReasonOf(err), "%s: %v", c.name, err)
		require.Less(t, n, uint64(16<<20), "%s: 1 MB allocated %d MB before being refused", c.name, n>>20)
	}
}

// A schema's references count with their names (review 22: 40 names of
// 50,000 '<', six bytes each in JSON, made the child's request too long
// to read, and the record was retried for ever as the environment's).
func TestSchemaReferenceNamesCount(t *testing.T) {
	refs := []reference{{name: strings.Repeat("<", 50_000), text: "{}"}}
	for range 20 {
		refs = append(refs, refs[0])
	}
	require.ErrorContains(t, checkSchemaSize(`"string"`, refs), "effectively compiles at most")
}

// A record key is bounded like its value: a wire-format key goes through
// the registry too (review 22: max_payload_bytes did not bound it).
func TestRecordKeysAreBoundedLikeValues(t *testing.T) {
	reg := newMemRegistry()
	reg.add(1, "s", 1, sr.Schema{Type: sr.TypeAvro, Schema: `"string"`})
	d, err := NewDecoder(DecoderConfig{Topic: "t", Format: FormatDebezium, Registry: reg, MaxPayloadBytes: 1000})
	require.NoError(t, err)
	_, err = d.Decode(Record{Key: wire(1, nil, make([]byte, 2000)), Value: []byte(`{}`)})
	require.Equal(t, ReasonTooLarge, ReasonOf(err), "%v", err)
	require.ErrorContains(t, err, "the record key has 2005 bytes, more than the limit of 1000")
}

// Protobuf decodes share one bound on the messages they build at once
// (protoDecodeHeap): a decode waits for room, and a decode stopped while
// it waits is not the record's fault (not permanent, no reason). Once
// there is room it decodes.
func TestProtobufDecodesWaitForTheSharedHeapBound(t *testing.T) {
	reg := newMemRegistry()
	reg.add(1, "s", 1, sr.Schema{Type: sr.TypeProtobuf, Schema: `syntax = "proto3";
message M { string sku = 1; string type = 2; repeated E e = 3; }
message E { string name = 1; }`})
	d := hostileDecoder(t, reg, FormatProtobuf)
	body := []byte{0x0a, 1, 'a', 0x12, 1, 't'}
	for range 1000 {
		body = append(body, 0x1a, 0x00) // an empty element: a message built
	}
	rec := Record{Key: []byte("a"), Value: wire(1, []int{0}, body)}
	_, err := d.Decode(rec) // the schema, compiled
	require.NoError(t, err)

	require.NoError(t, protoDecodeHeap.Acquire(t.Context(), maxProtoDecodeHeap)) // other decodes hold it all
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err = d.DecodeContext(ctx, rec)
	require.ErrorIs(t, err, context.DeadlineExceeded, "it waited for room")
	require.False(t, IsPermanent(err))
	require.Empty(t, ReasonOf(err))

	protoDecodeHeap.Release(maxProtoDecodeHeap)
	ev, err := d.DecodeContext(t.Context(), rec)
	require.NoError(t, err)
	var data struct {
		E []struct {
			Name *string `json:"name"`
		} `json:"e"`
	}
	require.NoError(t, json.Unmarshal(ev.Data, &data)) // protojson's spacing varies by build
	require.Len(t, data.E, 1000)
	require.NotNil(t, data.E[999].Name)
	require.True(t, protoDecodeHeap.TryAcquire(maxProtoDecodeHeap), "a decode gives back what it took")
	protoDecodeHeap.Release(maxProtoDecodeHeap)
}

// Lists of small numbers and booleans are one byte a value on the wire and
// a few in JSON: the JSON bound (16 times the record) holds them, and the
// estimate that refuses a record before its JSON is built must count them
// as they are written, not at a 64-bit number's width (it refused 7,000
// booleans as more than 177,856 bytes of JSON).
func TestProtobufListsOfSmallValuesAreNotRefused(t *testing.T) {
	reg := newMemRegistry()
	reg.add(1, "s", 1, sr.Schema{Type: sr.TypeProtobuf, Schema: `syntax = "proto3";
message M { string sku = 1; string type = 2; repeated bool flags = 3; repeated int32 codes = 4; repeated sint64 deltas = 5; }`})
	d := hostileDecoder(t, reg, FormatProtobuf)
	for _, field := range []protowire.Number{3, 4, 5} {
		packed := make([]byte, 100_000) // zeros: false, 0, 0
		body := []byte{0x0a, 1, 'a', 0x12, 1, 't'}
		body = protowire.AppendTag(body, field, protowire.BytesType)
		body = protowire.AppendBytes(body, packed)
		ev, err := d.Decode(Record{Key: []byte("a"), Value: wire(1, []int{0}, body)})
		require.NoError(t, err, "field %d", field)
		var data map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(ev.Data, &data))
		var values []any
		require.NoError(t, json.Unmarshal(data[map[protowire.Number]string{3: "flags", 4: "codes", 5: "deltas"}[field]], &values))
		require.Len(t, values, 100_000, "field %d", field)
	}
}
