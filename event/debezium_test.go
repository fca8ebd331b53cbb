package event

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Change events as Debezium 3.6.1's PostgreSQL connector writes them with
// the JSON converter (captured from a real connector, stack/cdc.sh).
const (
	dbzSnapshot = `{"before":null,"after":{"id":1,"name":"customer 1","status":"new"},"source":{"version":"3.6.1.Final","connector":"postgresql","name":"src","ts_ms":1796324492002,"snapshot":"first","db":"source","sequence":"[null,\"24261168\"]","ts_us":1796324492002000,"ts_ns":1796324492002000000,"schema":"public","table":"customers","txId":746,"lsn":24261168,"xmin":null,"origin":null,"origin_lsn":null},"transaction":null,"op":"r","ts_ms":1796324492256,"ts_us":1796324492256000,"ts_ns":1796324492256000000}`
	dbzUpdate   = `{"before":{"id":1,"name":"customer 1","status":"new"},"after":{"id":1,"name":"customer 1","status":"active"},"source":{"version":"3.6.1.Final","connector":"postgresql","name":"src","ts_ms":1796324500000,"snapshot":"false","db":"source","sequence":"[null,\"24263856\"]","schema":"public","table":"customers","txId":747,"lsn":24263856,"xmin":null},"transaction":null,"op":"u","ts_ms":1796324500123}`
	dbzDelete   = `{"before":{"id":1,"name":"customer 1","status":"active"},"after":null,"source":{"version":"3.6.1.Final","connector":"postgresql","name":"src","ts_ms":1796324501000,"snapshot":"false","db":"source","schema":"public","table":"customers","txId":748,"lsn":24303536},"transaction":null,"op":"d","ts_ms":1796324501456}`
	dbzKey      = `{"id":1}`
)

func dbzRecord(value string) Record {
	return Record{Key: []byte(dbzKey), Value: []byte(value)}
}

func dbzDecoder(t *testing.T) *Decoder {
	t.Helper()
	d, err := NewDecoder(DecoderConfig{Topic: "src.public.customers", Format: FormatDebezium})
	require.NoError(t, err)
	return d
}

// debeziumDecodeCases are TestDecode's cases for format debezium.
func debeziumDecodeCases() []decodeCase {
	cfg := DecoderConfig{Format: FormatDebezium}
	return []decodeCase{
		{name: "debezium: snapshot read", cfg: cfg, rec: dbzRecord(dbzSnapshot), check: func(t *testing.T, ev Event) {
			require.Equal(t, "public.customers.read", ev.Type)
			require.Equal(t, "1", ev.Subject)
			require.Equal(t, int64(24261168), ev.Version)
			require.Equal(t, "src.public.customers", ev.Source)
			require.Equal(t, StrategyPosition, ev.Strategy)
		}},
		{name: "debezium: an array", cfg: cfg, rec: dbzRecord(`[1]`), reason: ReasonNotDebezium},
		{name: "debezium: no op", cfg: cfg, rec: dbzRecord(strings.Replace(dbzUpdate, `"op":"u"`, `"opx":"u"`, 1)), reason: ReasonNotDebezium},
		{name: "debezium: unknown op", cfg: cfg, rec: dbzRecord(strings.Replace(dbzUpdate, `"op":"u"`, `"op":"x"`, 1)), reason: ReasonNotDebezium},
		{name: "debezium: no lsn (another connector)", cfg: cfg, rec: dbzRecord(strings.Replace(dbzUpdate, `"lsn":24263856`, `"pos":1`, 1)), reason: ReasonInvalidVersion},
		{name: "debezium: an lsn beyond 10^18", cfg: cfg, rec: dbzRecord(strings.Replace(dbzUpdate, `"lsn":24263856`, `"lsn":1000000000000000000`, 1)), reason: ReasonInvalidVersion},
		{name: "debezium: no key", cfg: cfg, rec: Record{Value: []byte(dbzUpdate)}, reason: ReasonMissingSubject},
		{name: "debezium: not JSON", cfg: cfg, rec: dbzRecord(`{"op":`), reason: ReasonNotJSON},
	}
}

func TestDebeziumChangeEvents(t *testing.T) {
	d := dbzDecoder(t)
	snap, err := d.Decode(dbzRecord(dbzSnapshot))
	require.NoError(t, err)
	up, err := d.Decode(dbzRecord(dbzUpdate))
	require.NoError(t, err)
	del, err := d.Decode(dbzRecord(dbzDelete))
	require.NoError(t, err)

	require.Equal(t, []string{"public.customers.read", "public.customers.update", "public.customers.delete"}, []string{snap.Type, up.Type, del.Type})
	require.Less(t, snap.Version, up.Version, "a row's versions are its log positions: increasing")
	require.Less(t, up.Version, del.Version)
	require.NotEqual(t, snap.Key, up.Key)

	// The change as Data: before, after, op, source; no processing times.
	var data map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(up.Data, &data))
	require.JSONEq(t, `{"id":1,"name":"customer 1","status":"new"}`, string(data["before"]))
	require.JSONEq(t, `{"id":1,"name":"customer 1","status":"active"}`, string(data["after"]))
	require.JSONEq(t, `"u"`, string(data["op"]))
	require.NotContains(t, data, "ts_ms")
	doc, err := up.Document()
	require.NoError(t, err)
	v, ok := doc.Get("after", "status")
	require.True(t, ok)
	require.Equal(t, "active", v.Text())

	// Re-sent after the connector restarts: the same change with new
	// processing times is the same event (a duplicate, not a conflict).
	again, err := d.Decode(dbzRecord(strings.Replace(dbzUpdate, `"ts_ms":1796324500123`, `"ts_ms":1796329999999`, 1)))
	require.NoError(t, err)
	require.Equal(t, up.Key, again.Key)
	require.Equal(t, up.PayloadHash, again.PayloadHash)

	// The JSON converter's schema envelope changes nothing.
	wrapped, err := d.Decode(Record{
		Key:   []byte(`{"schema":{"type":"struct","fields":[{"type":"int64","optional":false,"field":"id"}],"optional":false,"name":"src.public.customers.Key"},"payload":{"id":1}}`),
		Value: []byte(`{"schema":{"type":"struct","name":"src.public.customers.Envelope"},"payload":` + dbzUpdate + `}`),
	})
	require.NoError(t, err)
	require.Equal(t, up.Key, wrapped.Key)
	require.Equal(t, up.PayloadHash, wrapped.PayloadHash)
	require.Equal(t, "1", wrapped.Subject)
}

// A transaction that began while the replication slot was being created
// and commits after its consistent point is streamed, not in the
// snapshot, and its changes can carry LSNs at or below the snapshot's
// (snapbuild.c): it must still outrank the snapshot's read of the row, or
// the replica keeps the older row. And a read and a change at one LSN are
// two events, not one event sent twice with different data (a conflict).
func TestDebeziumStreamedChangeOutranksTheSnapshot(t *testing.T) {
	d := dbzDecoder(t)
	snap, err := d.Decode(dbzRecord(dbzSnapshot)) // lsn 24261168
	require.NoError(t, err)
	for _, lsn := range []string{"24261000", "24261168", "1"} {
		up, err := d.Decode(dbzRecord(strings.Replace(dbzUpdate, `"lsn":24263856`, `"lsn":`+lsn, 1)))
		require.NoError(t, err)
		require.Greater(t, up.Version, snap.Version, "a streamed change at lsn %s outranks the snapshot's read", lsn)
		require.NotEqual(t, snap.Key, up.Key, "lsn %s", lsn)
		require.NotEqual(t, snap.ID, up.ID, "lsn %s", lsn)
	}
	require.Equal(t, int64(24261168), snap.Version, "a read's version is its LSN")
}

func TestDebeziumSkipsWhatChangesNoRow(t *testing.T) {
	d := dbzDecoder(t)
	for name, r := range map[string]Record{
		"tombstone":                {Key: []byte(dbzKey)},
		"tombstone with schemas":   {Key: []byte(dbzKey), Value: []byte(`{"schema":null,"payload":null}`)},
		"truncate":                 dbzRecord(strings.Replace(dbzUpdate, `"op":"u"`, `"op":"t"`, 1)),
		"logical decoding message": dbzRecord(strings.Replace(dbzUpdate, `"op":"u"`, `"op":"m"`, 1)),
	} {
		_, err := d.Decode(r)
		require.True(t, IsSkip(err), "%s: %v", name, err)
		require.False(t, IsPermanent(err), name)
	}
}

func TestDebeziumCompositeKey(t *testing.T) {
	d := dbzDecoder(t)
	ev, err := d.Decode(Record{Key: []byte(`{"tenant":"t1","id":7}`), Value: []byte(dbzUpdate)})
	require.NoError(t, err)
	require.Equal(t, `{"id":7,"tenant":"t1"}`, ev.Subject, "a wider key is its canonical JSON")
	other, err := d.Decode(Record{Key: []byte(`{"id":7,"tenant":"t1"}`), Value: []byte(dbzUpdate)})
	require.NoError(t, err)
	require.Equal(t, ev.Key, other.Key, "the key's column order does not matter")
}

func TestDebeziumConfig(t *testing.T) {
	_, err := NewDecoder(DecoderConfig{Topic: "t", Format: FormatDebezium, KeyStrategy: StrategyField, KeyPointer: "/id"})
	require.ErrorContains(t, err, "position")
	_, err = NewDecoder(DecoderConfig{Topic: "t", Format: FormatDebezium, TypePointer: "/op"})
	require.ErrorContains(t, err, "type pointer")
}

func TestDebeziumChangeForHandlers(t *testing.T) {
	d := dbzDecoder(t)
	up, err := d.Decode(dbzRecord(dbzUpdate))
	require.NoError(t, err)
	c, err := up.Change()
	require.NoError(t, err)
	require.Equal(t, "u", c.Op)
	require.Equal(t, int64(24263856), c.LSN)
	was, _ := c.Before.Get("status")
	is, _ := c.After.Get("status")
	require.Equal(t, []string{"new", "active"}, []string{was.Text(), is.Text()}, "a transition, as a handler sees it")
	var row struct {
		ID     int64  `json:"id"`
		Status string `json:"status"`
	}
	require.NoError(t, json.Unmarshal(c.After.Raw(), &row))
	require.Equal(t, int64(1), row.ID)
	lsn, _ := c.Source.Get("lsn")
	require.Equal(t, "24263856", lsn.Text())

	del, err := d.Decode(dbzRecord(dbzDelete))
	require.NoError(t, err)
	c, err = del.Change()
	require.NoError(t, err)
	require.Equal(t, KindNull, c.After.Kind())

	_, err = Event{Data: []byte(`{"a":1}`)}.Change()
	require.Error(t, err)
}

// Debezium's envelope as a registry converter writes it in Avro (the
// shape of Debezium's own Avro schemas: unions with null for the row
// images and the optional source fields), and the key's record.
const (
	dbzEnvelopeAvro = `{"type":"record","name":"Envelope","namespace":"src.public.customers","fields":[
	{"name":"before","type":["null",{"type":"record","name":"Value","fields":[
		{"name":"id","type":"long"},{"name":"name","type":"string"},{"name":"status","type":"string"}]}],"default":null},
	{"name":"after","type":["null","Value"],"default":null},
	{"name":"source","type":{"type":"record","name":"Source","namespace":"io.debezium.connector.postgresql","fields":[
		{"name":"version","type":"string"},{"name":"connector","type":"string"},{"name":"name","type":"string"},
		{"name":"ts_ms","type":"long"},{"name":"snapshot","type":["string","null"],"default":"false"},
		{"name":"db","type":"string"},{"name":"schema","type":"string"},{"name":"table","type":"string"},
		{"name":"txId","type":["null","long"],"default":null},{"name":"lsn","type":["null","long"],"default":null}]}},
	{"name":"op","type":"string"},
	{"name":"ts_ms","type":["null","long"],"default":null},
	{"name":"transaction","type":["null",{"type":"record","name":"block","namespace":"event","fields":[
		{"name":"id","type":"string"},{"name":"total_order","type":"long"},{"name":"data_collection_order","type":"long"}]}],"default":null}]}`
	dbzKeyAvro = `{"type":"record","name":"Key","namespace":"src.public.customers","fields":[{"name":"id","type":"long"}]}`
)

// dbzAvroUpdate is dbzUpdate in Avro, processed at tsMs.
func dbzAvroUpdate(tsMs int64) Record {
	row := func(status string) map[string]any {
		return map[string]any{"src.public.customers.Value": map[string]any{"id": int64(1), "name": "customer 1", "status": status}}
	}
	value := avroPayload(nil, dbzEnvelopeAvro, map[string]any{
		"before": row("new"), "after": row("active"),
		"source": map[string]any{"version": "3.6.1.Final", "connector": "postgresql", "name": "src", "ts_ms": int64(1796324500000),
			"snapshot": map[string]any{"string": "false"}, "db": "source", "schema": "public", "table": "customers",
			"txId": map[string]any{"long": int64(747)}, "lsn": map[string]any{"long": int64(24263856)}},
		"op": "u", "ts_ms": map[string]any{"long": tsMs}, "transaction": nil,
	})
	return Record{Key: wire(11, nil, avroPayload(nil, dbzKeyAvro, map[string]any{"id": int64(1)})), Value: wire(10, nil, value)}
}

// Change events written by a registry converter: the same mapping as the
// JSON converter's, the value and the key decoded with the writer's
// schemas; a re-sent change (a new ts_ms) is the same event.
func TestDebeziumThroughARegistry(t *testing.T) {
	reg := newMemRegistry()
	reg.add(10, "src.public.customers-value", 1, sr.Schema{Schema: dbzEnvelopeAvro})
	reg.add(11, "src.public.customers-key", 1, sr.Schema{Schema: dbzKeyAvro})
	reg.add(12, "pb-value", 1, sr.Schema{Type: sr.TypeProtobuf, Schema: `syntax = "proto3";
message Envelope { Value before = 1; Value after = 2; Source source = 3; string op = 4; int64 ts_ms = 5; }
message Value { int64 id = 1; string name = 2; string status = 3; }
message Source { string name = 1; string schema = 2; string table = 3; int64 lsn = 4; }`})
	reg.add(13, "pb-key", 1, sr.Schema{Type: sr.TypeProtobuf, Schema: `syntax = "proto3"; message Key { int64 id = 1; }`})
	d, err := NewDecoder(DecoderConfig{Topic: "src.public.customers", Format: FormatDebezium, Registry: reg})
	require.NoError(t, err)

	fromJSON, err := d.Decode(dbzRecord(dbzUpdate))
	require.NoError(t, err, "JSON change events still read beside the registry's")
	ev, err := d.Decode(dbzAvroUpdate(1796324500123))
	require.NoError(t, err)
	require.Equal(t, "public.customers.update", ev.Type)
	require.Equal(t, "1", ev.Subject)
	require.Equal(t, StreamedVersion+24263856, ev.Version)
	require.Equal(t, fromJSON.Key, ev.Key, "the same change, whichever converter wrote it, is one event")
	require.Equal(t, FormatAvro, ev.Wire.Format)
	require.Equal(t, 10, ev.Wire.SchemaID)
	ch, err := ev.Change()
	require.NoError(t, err)
	require.Equal(t, "u", ch.Op)
	status, _ := ch.After.Get("status")
	require.Equal(t, "active", status.Text())
	before, _ := ch.Before.Get("status")
	require.Equal(t, "new", before.Text())

	again, err := d.Decode(dbzAvroUpdate(1796324599999))
	require.NoError(t, err)
	require.Equal(t, ev.Key, again.Key)
	require.Equal(t, string(ev.Data), string(again.Data), "a re-sent change differs only in its processing time, which is not data")

	pbValue, pbKey := protoMessage(t, d, 12, []int{0}), protoMessage(t, d, 13, []int{0})
	require.NoError(t, protojson.Unmarshal([]byte(`{"after":{"id":"7","name":"customer 7","status":"new"},"source":{"name":"src","schema":"public","table":"customers","lsn":"24270000"},"op":"c","ts_ms":"1"}`), pbValue))
	require.NoError(t, protojson.Unmarshal([]byte(`{"id":"7"}`), pbKey))
	value, err := proto.Marshal(pbValue)
	require.NoError(t, err)
	key, err := proto.Marshal(pbKey)
	require.NoError(t, err)
	ev, err = d.Decode(Record{Key: wire(13, []int{0}, key), Value: wire(12, []int{0}, value)})
	require.NoError(t, err)
	require.Equal(t, []any{"public.customers.create", "7", StreamedVersion + 24270000, FormatProtobuf},
		[]any{ev.Type, ev.Subject, ev.Version, ev.Wire.Format}, "Protobuf: the int64 position is a decimal string in its JSON mapping")

	// The record's fault: an unknown schema; not the record's: the
	// registry down.
	unknown := dbzAvroUpdate(1)
	unknown.Value = wire(99999, nil, unknown.Value[5:])
	_, err = d.Decode(unknown)
	require.Equal(t, ReasonUnknownSchema, ReasonOf(err), "%v", err)
	reg.setDown(errors.New("connection refused"))
	fresh, err := NewDecoder(DecoderConfig{Topic: "t", Format: FormatDebezium, Registry: reg})
	require.NoError(t, err)
	_, err = fresh.Decode(dbzAvroUpdate(1))
	require.ErrorIs(t, err, ErrSchemaRegistryUnavailable)
	require.False(t, IsPermanent(err))

	// Without a registry, a wire-format record says what to configure.
	_, err = dbzDecoder(t).Decode(dbzAvroUpdate(1))
	require.Equal(t, ReasonNotDebezium, ReasonOf(err), "%v", err)
	require.ErrorContains(t, err, "schema_registry.url")
}

// A row's changes are ordered as their transactions committed, then by
// LSN within one: (Version, Sequence) is (StreamedVersion + the last
// commit before the change, its LSN). The case LSNs alone get wrong,
// reproduced on PostgreSQL 15 (docs/guides/change-data-capture.md): A
// updates row 1 at LSN 100; B inserts row 1 at 200 and waits on A's key;
// A deletes it at 300 and commits at 400; B commits after. Decoded in
// commit order u, d, c, the insert is the newest.
func TestDebeziumOrderIsTheCommitOrder(t *testing.T) {
	d := dbzDecoder(t)
	change := func(value, lsn, seq string) Event {
		t.Helper()
		v := strings.Replace(value, `"lsn":24263856`, `"lsn":`+lsn, 1)
		v = strings.Replace(v, `"sequence":"[null,\"24263856\"]"`, `"sequence":`+seq, 1)
		require.NotEqual(t, value, v)
		ev, err := d.Decode(dbzRecord(v))
		require.NoError(t, err, seq)
		return ev
	}
	newer := func(a, b Event) bool {
		return a.Version > b.Version || a.Version == b.Version && a.Sequence > b.Sequence
	}
	insert := strings.Replace(strings.Replace(dbzUpdate, `"op":"u"`, `"op":"c"`, 1), `"before":{"id":1,"name":"customer 1","status":"new"}`, `"before":null`, 1)
	del := strings.Replace(strings.Replace(dbzUpdate, `"op":"u"`, `"op":"d"`, 1), `"after":{"id":1,"name":"customer 1","status":"active"}`, `"after":null`, 1)
	u := change(dbzUpdate, "100", `"[\"50\",\"100\"]"`)
	dl := change(del, "300", `"[\"50\",\"300\"]"`)
	c := change(insert, "200", `"[\"400\",\"200\"]"`)
	require.Equal(t, [2]int64{StreamedVersion + 50, 100}, [2]int64{u.Version, u.Sequence})
	require.True(t, newer(dl, u), "within A, the later change")
	require.True(t, newer(c, dl), "B committed after A: its insert is newer than A's delete, whose LSN is higher")
	snap, err := d.Decode(dbzRecord(dbzSnapshot))
	require.NoError(t, err)
	require.Equal(t, [2]int64{24261168, 0}, [2]int64{snap.Version, snap.Sequence}, "a read: its LSN, no sequence")
	require.True(t, newer(u, snap), "a streamed change outranks every read")

	// Re-sent from an earlier offset, a change may follow another last
	// commit (null before the connector has seen one): the same event,
	// with the same id, key and hash. Only its order differs, and stays
	// below every later transaction's.
	for _, seq := range []string{`"[null,\"200\"]"`, `"[\"399\",\"200\"]"`, `"[ \"400\" , \"200\"]"`} {
		again := change(insert, "200", seq)
		require.Equal(t, []any{c.ID, c.Key, c.PayloadHash, string(c.Data)}, []any{again.ID, again.Key, again.PayloadHash, string(again.Data)}, seq)
	}
	// A null first (the first transaction after the connector starts or
	// snapshots again) is ordered by its LSN, above the changes streamed
	// before a new snapshot.
	first := change(insert, "200", `"[null,\"200\"]"`)
	require.Equal(t, [2]int64{StreamedVersion + 200, 0}, [2]int64{first.Version, first.Sequence})
	require.True(t, newer(change(del, "9100", `"[null,\"9100\"]"`), change(dbzUpdate, "5100", `"[\"5000\",\"5100\"]"`)), "a delete after a new snapshot outranks a change streamed before it")

	// Without a sequence (a connector older than Debezium 1.4): by LSN.
	old := change(dbzUpdate, "100", `null`)
	require.Equal(t, [2]int64{StreamedVersion + 100, 0}, [2]int64{old.Version, old.Sequence})
	require.Equal(t, u.Key, old.Key)

	for _, seq := range []string{`"[\"x\",\"100\"]"`, `"[\"-1\",\"100\"]"`, `"[\"007\",\"100\"]"`, `"[\"1000000000000000000\",\"100\"]"`, `"100"`, `"[\"100\"]"`, `[null,"100"]`, `7`} {
		v := strings.Replace(dbzUpdate, `"sequence":"[null,\"24263856\"]"`, `"sequence":`+seq, 1)
		_, err := d.Decode(dbzRecord(v))
		require.Equal(t, ReasonInvalidVersion, ReasonOf(err), "sequence %s: %v", seq, err)
	}
}

// A change re-sent by another Debezium (an upgrade between the first
// sending and the re-sending: another version, other processing times, a
// sequence, the position as a string) is the same change: a duplicate,
// never a conflict.
func TestDebeziumReSentAcrossUpgradesIsTheSameChange(t *testing.T) {
	d := dbzDecoder(t)
	first, err := d.Decode(dbzRecord(dbzUpdate))
	require.NoError(t, err)
	for name, edit := range map[string][2]string{
		"connector version": {`"version":"3.6.1.Final"`, `"version":"3.7.0.Final"`},
		"source times":      {`"ts_ms":1796324500000`, `"ts_ms":1796324500999,"ts_us":1796324500999000,"ts_ns":1796324500999000000`},
		"snapshot marker":   {`"snapshot":"false"`, `"snapshot":"last"`},
		"sequence":          {`"sequence":"[null,\"24263856\"]"`, `"sequence":"[\"24263000\",\"24263856\"]"`},
		"position a string": {`"lsn":24263856`, `"lsn":"24263856"`},
		"txId a string":     {`"txId":747`, `"txId":"747"`},
		"txId zero-padded":  {`"txId":747`, `"txId":"0747"`},
	} {
		again, err := d.Decode(dbzRecord(strings.Replace(dbzUpdate, edit[0], edit[1], 1)))
		require.NoError(t, err, name)
		require.Equal(t, first.Key, again.Key, name)
		require.Equal(t, first.PayloadHash, again.PayloadHash, name)
		require.Equal(t, string(first.Data), string(again.Data), name)
	}
	src, _ := first.Document()
	got, _ := src.Get("source")
	require.JSONEq(t, `{"db":"source","schema":"public","table":"customers","lsn":24263856,"txId":747}`, string(got.Raw()))

	// A txId that names no 64-bit transaction is left out: the data stays
	// JSON whatever the text held.
	for _, txID := range []string{`"99999999999999999999999"`, `"-1"`, `"7e3"`, `""`} {
		ev, err := d.Decode(dbzRecord(strings.Replace(dbzUpdate, `"txId":747`, `"txId":`+txID, 1)))
		require.NoError(t, err, txID)
		src, _ := ev.Document()
		got, _ := src.Get("source")
		require.JSONEq(t, `{"db":"source","schema":"public","table":"customers","lsn":24263856}`, string(got.Raw()), txID)
	}
}

func TestDebeziumHostileKeys(t *testing.T) {
	d := dbzDecoder(t)
	for name, key := range map[string]string{
		"a duplicate member": `{"id":1,"id":2}`,
		"a lone surrogate":   `{"id":"\ud800"}`,
	} {
		_, err := d.Decode(Record{Key: []byte(key), Value: []byte(dbzUpdate)})
		require.Equal(t, ReasonInvalidData, ReasonOf(err), "%s: %v", name, err)
	}

	// A key in the wire format says it is the key that is wrong.
	reg := newMemRegistry()
	d, err := NewDecoder(DecoderConfig{Topic: "t", Format: FormatDebezium, Registry: reg})
	require.NoError(t, err)
	_, err = d.Decode(Record{Key: []byte{0, 1}, Value: []byte(dbzUpdate)})
	require.Equal(t, ReasonNotWireFormat, ReasonOf(err))
	require.ErrorContains(t, err, "the record key has 2 bytes")
	_, err = d.Decode(Record{Key: wire(77777, nil, []byte{2}), Value: []byte(dbzUpdate)})
	require.Equal(t, ReasonUnknownSchema, ReasonOf(err))
	require.ErrorContains(t, err, "the record key: ")
}

// A JSON Schema change event whose schema refers to another JSON Schema
// (the referring schema's type, not Avro's, is what references must be).
func TestDebeziumJSONSchemaWithReferences(t *testing.T) {
	reg := newMemRegistry()
	reg.add(20, "row", 1, sr.Schema{Type: sr.TypeJSON, Schema: `{"$id":"https://example.com/row.json","type":"object","required":["id"]}`})
	reg.add(21, "src.public.customers-value", 1, sr.Schema{Type: sr.TypeJSON,
		Schema:     `{"type":"object","properties":{"after":{"$ref":"https://example.com/row.json"}}}`,
		References: []sr.SchemaReference{{Name: "https://example.com/row.json", Subject: "row", Version: 1}}})
	d, err := NewDecoder(DecoderConfig{Topic: "t", Format: FormatDebezium, Registry: reg})
	require.NoError(t, err)
	ev, err := d.Decode(Record{Key: []byte(dbzKey), Value: wire(21, nil, []byte(dbzUpdate))})
	require.NoError(t, err)
	require.Equal(t, FormatJSONSchema, ev.Wire.Format)
	require.Equal(t, "public.customers.update", ev.Type)
}

// A row key is the source table's text: a tab, a newline or a
// noncharacter in a one-column text key is a key like any other (the same
// value in a wider key decoded already).
func TestDebeziumRowKeysTakeAnyText(t *testing.T) {
	d := dbzDecoder(t)
	for _, key := range []string{`{"code":"a\tb"}`, `{"code":"line1\nline2"}`, `{"code":"x\ufffe"}`} {
		ev, err := d.Decode(Record{Key: []byte(key), Value: []byte(dbzUpdate)})
		require.NoError(t, err, key)
		var want struct{ Code string }
		require.NoError(t, json.Unmarshal([]byte(key), &want))
		require.Equal(t, want.Code, ev.Subject)
	}
	_, err := d.Decode(Record{Key: []byte(`{"code":"a\u0000b"}`), Value: []byte(dbzUpdate)})
	require.Equal(t, ReasonInvalidAttribute, ReasonOf(err), "%v", err)
}
