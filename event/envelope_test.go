package event

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const (
	testTopic  = "invoices"
	testSource = "https://invoices.example/"
	testKey    = "acc-1"
)

// event builds a structured-mode value: the envelope of an invoice.opened
// event with the given members replaced (a nil value removes one). Members
// keep a fixed order so that tests can compare bytes.
func event(overrides map[string]any) []byte {
	members := []struct {
		name  string
		value any
	}{
		{"specversion", "1.0"},
		{"id", "evt-1"},
		{"source", testSource},
		{"type", "invoice.opened"},
		{"subject", testKey},
		{"time", "2026-01-02T03:04:05Z"},
		{"datacontenttype", "application/json"},
		{"resourceversion", json.RawMessage("3")},
		{"data", json.RawMessage(`{"name":"Ada","email":"ada@example.com","plan":"pro"}`)},
	}
	var b strings.Builder
	b.WriteByte('{')
	first := true
	write := func(name string, v any) {
		if !first {
			b.WriteByte(',')
		}
		first = false
		n, _ := json.Marshal(name)
		b.Write(n)
		b.WriteByte(':')
		if raw, ok := v.(json.RawMessage); ok {
			b.Write(raw)
			return
		}
		val, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		b.Write(val)
	}
	for _, m := range members {
		v, ok := overrides[m.name]
		if !ok {
			v = m.value
		}
		if v == nil {
			continue
		}
		write(m.name, v)
	}
	var extra []string
	for name := range overrides {
		found := false
		for _, m := range members {
			found = found || m.name == name
		}
		if !found && overrides[name] != nil {
			extra = append(extra, name)
		}
	}
	// Deterministic order for the extra members.
	for i := range extra {
		for j := i + 1; j < len(extra); j++ {
			if extra[j] < extra[i] {
				extra[i], extra[j] = extra[j], extra[i]
			}
		}
	}
	for _, name := range extra {
		write(name, overrides[name])
	}
	b.WriteByte('}')
	return []byte(b.String())
}

func structured(value []byte) Record {
	return Record{Topic: testTopic, Key: []byte(testKey), Value: value}
}

// binaryHeaders are the ce_ headers of the invoice.opened event of event().
func binaryHeaders(overrides map[string]string) []Header {
	hs := []struct{ k, v string }{
		{"ce_specversion", "1.0"},
		{"ce_id", "evt-1"},
		{"ce_source", testSource},
		{"ce_type", "invoice.opened"},
		{"ce_subject", testKey},
		{"ce_time", "2026-01-02T03:04:05Z"},
		{"ce_resourceversion", "3"},
		{"content-type", "application/json"},
	}
	var out []Header
	for _, h := range hs {
		v, ok := overrides[h.k]
		if !ok {
			v = h.v
		}
		if v == "\x00omit" {
			continue
		}
		out = append(out, Header{Key: h.k, Value: []byte(v)})
	}
	for k, v := range overrides {
		found := false
		for _, h := range hs {
			found = found || h.k == k
		}
		if !found {
			out = append(out, Header{Key: k, Value: []byte(v)})
		}
	}
	return out
}

const omit = "\x00omit"

func binary(headers []Header, value string) Record {
	return Record{Topic: testTopic, Key: []byte(testKey), Value: []byte(value), Headers: headers}
}

const openedData = `{"name":"Ada","email":"ada@example.com","plan":"pro"}`

type decodeCase struct {
	name   string
	cfg    DecoderConfig // Topic defaults to testTopic
	rec    Record
	reason Reason // "" for success
	check  func(t *testing.T, ev Event)
}

func (c decodeCase) config() DecoderConfig {
	cfg := c.cfg
	if cfg.Topic == "" {
		cfg.Topic = testTopic
	}
	return cfg
}

func ledgerEvent(typ string) map[string]any {
	return map[string]any{
		"id": "evt-2", "type": typ, "resourceversion": nil,
		"data": json.RawMessage(`{"amount_cents":1250,"currency":"EUR"}`),
	}
}

var webhookCfg = DecoderConfig{
	Format: FormatJSON, KeyStrategy: StrategyField, KeyPointer: "/event/id",
	IDPointer: "/event/id", TypePointer: "/event/type", SubjectPointer: "/invoice/id", VersionPointer: "/invoice/version",
}

const webhook = `{"event":{"id":"wh_1","type":"invoice.updated"},"invoice":{"id":"acc-1","version":7,"plan":"pro"}}`

var (
	longSource  = "https://invoices.example/" + strings.Repeat("s", MaxAttributeBytes-len("https://invoices.example/"))
	longID      = strings.Repeat("i", MaxAttributeBytes)
	longSubject = strings.Repeat("r", MaxResourceIDBytes)
	hugeSubject = strings.Repeat("r", 3000)
)

// nested is depth levels of arrays around a number.
func nested(depth int) string {
	return strings.Repeat("[", depth) + "1" + strings.Repeat("]", depth)
}

// numbers is an array of n numbers.
func numbers(n int) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(i * 7919 % 1000003))
	}
	b.WriteByte(']')
	return b.String()
}

// decodeCases holds one case per reason code and the happy paths. The fuzz
// targets are seeded from it.
func decodeCases() []decodeCase {
	long := strings.Repeat("k", 1000)
	return []decodeCase{
		// Happy paths.
		{name: "structured invoice.opened", rec: structured(event(nil)), check: func(t *testing.T, ev Event) {
			require.Equal(t, testSource, ev.Source)
			require.Equal(t, "evt-1", ev.ID)
			require.Equal(t, "invoice.opened", ev.Type)
			require.Equal(t, testKey, ev.Subject)
			require.Equal(t, int64(3), ev.Version)
			require.Equal(t, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), ev.Time.UTC())
			require.JSONEq(t, openedData, string(ev.Data))
			require.Equal(t, "ce:25:https://invoices.example/:evt-1", ev.Key)
			require.Equal(t, StrategyCloudEvents, ev.Strategy)
			require.Equal(t, hashOf(t, "invoice.opened", testKey, 3, openedData), ev.PayloadHash)
		}},
		{name: "binary invoice.opened", rec: binary(binaryHeaders(nil), openedData), check: func(t *testing.T, ev Event) {
			require.Equal(t, "evt-1", ev.ID)
			require.Equal(t, int64(3), ev.Version)
			require.Equal(t, "ce:25:https://invoices.example/:evt-1", ev.Key)
			require.Equal(t, openedData, string(ev.Data))
		}},
		{name: "structured charge.credited without version", rec: structured(event(ledgerEvent("charge.credited"))), check: func(t *testing.T, ev Event) {
			require.Equal(t, "charge.credited", ev.Type)
			require.Zero(t, ev.Version)
			require.Equal(t, "ce:25:https://invoices.example/:evt-2", ev.Key)
		}},
		{name: "binary charge.credited without version", rec: binary(binaryHeaders(map[string]string{
			"ce_id": "evt-2", "ce_type": "charge.credited", "ce_resourceversion": omit,
		}), `{"amount_cents":1250,"currency":"EUR"}`), check: func(t *testing.T, ev Event) {
			require.Zero(t, ev.Version)
			require.Equal(t, "ce:25:https://invoices.example/:evt-2", ev.Key)
		}},
		{name: "structured without data or time", rec: structured(event(map[string]any{"data": nil, "time": nil, "datacontenttype": nil})), check: func(t *testing.T, ev Event) {
			require.Nil(t, ev.Data)
			require.True(t, ev.Time.IsZero())
			require.Equal(t, hashOf(t, "invoice.opened", testKey, 3, ""), ev.PayloadHash)
		}},
		{name: "null attributes are absent", rec: structured(event(map[string]any{"time": json.RawMessage("null"), "resourceversion": json.RawMessage("null")})), check: func(t *testing.T, ev Event) {
			require.Zero(t, ev.Version)
			require.True(t, ev.Time.IsZero())
		}},
		{name: "structured declared by content-type ignores ce_ headers", rec: Record{Key: []byte(testKey), Value: event(nil), Headers: []Header{
			{Key: "Content-Type", Value: []byte("application/cloudevents+json; charset=utf-8")},
			{Key: "ce_id", Value: []byte("other")},
		}}, check: func(t *testing.T, ev Event) {
			require.Equal(t, "evt-1", ev.ID)
		}},
		{name: "forged retry headers change nothing", rec: Record{Key: []byte(testKey), Value: event(nil), Headers: []Header{
			{Key: "retry-count", Value: []byte("99")}, {Key: "x-attempt", Value: []byte("\xff")},
		}}, check: func(t *testing.T, ev Event) {
			require.Equal(t, "ce:25:https://invoices.example/:evt-1", ev.Key)
		}},
		{name: "extension attributes are allowed", rec: structured(event(map[string]any{"traceparent": "00-abc", "sequence": json.RawMessage("7"), "flag": true})), check: func(t *testing.T, ev Event) {
			require.Equal(t, "evt-1", ev.ID)
		}},
		{name: "resource from partitionkey (the CloudEvents SDK's Kafka binding)", rec: structured(event(map[string]any{"subject": nil, "partitionkey": testKey})), check: func(t *testing.T, ev Event) {
			require.Equal(t, testKey, ev.Subject)
		}},
		{name: "binary resource from ce_partitionkey", rec: binary(binaryHeaders(map[string]string{"ce_subject": omit, "ce_partitionkey": testKey}), openedData), check: func(t *testing.T, ev Event) {
			require.Equal(t, testKey, ev.Subject)
		}},
		{name: "resource from the record key", rec: structured(event(map[string]any{"subject": nil})), check: func(t *testing.T, ev Event) {
			require.Equal(t, testKey, ev.Subject)
		}},
		{name: "subject and partitionkey agree", rec: structured(event(map[string]any{"partitionkey": testKey})), check: func(t *testing.T, ev Event) {
			require.Equal(t, testKey, ev.Subject)
		}},
		{name: "large version", rec: structured(event(map[string]any{"resourceversion": json.RawMessage("9223372036854775807")})), check: func(t *testing.T, ev Event) {
			require.Equal(t, int64(9223372036854775807), ev.Version)
		}},
		{name: "field strategy", cfg: DecoderConfig{KeyStrategy: StrategyField, KeyPointer: "/email"}, rec: structured(event(nil)), check: func(t *testing.T, ev Event) {
			require.Equal(t, "field:25:https://invoices.example/:ada@example.com", ev.Key)
			require.Equal(t, StrategyField, ev.Strategy)
		}},
		{name: "field strategy integer", cfg: DecoderConfig{KeyStrategy: StrategyField, KeyPointer: "/n"},
			rec: structured(event(map[string]any{"data": json.RawMessage(`{"n":12345678901234567890}`)})), check: func(t *testing.T, ev Event) {
				require.Equal(t, "field:25:https://invoices.example/:12345678901234567890", ev.Key)
			}},
		{name: "field strategy pointer escaping", cfg: DecoderConfig{KeyStrategy: StrategyField, KeyPointer: "/a~1b/m~0n/1"},
			rec: structured(event(map[string]any{"data": json.RawMessage(`{"a/b":{"m~n":["x","y"]},"a":{"b":"wrong"}}`)})), check: func(t *testing.T, ev Event) {
				require.Equal(t, "field:25:https://invoices.example/:y", ev.Key)
			}},
		{name: "natural strategy", cfg: DecoderConfig{KeyStrategy: StrategyNatural, NaturalKey: []string{"/email", "/plan"}}, rec: structured(event(nil)), check: func(t *testing.T, ev Event) {
			want := sha256Hex(`["ada@example.com","pro"]`)
			require.Equal(t, "natural:25:https://invoices.example/:"+want, ev.Key)
			require.Equal(t, StrategyNatural, ev.Strategy)
		}},
		{name: "content-hash strategy", cfg: DecoderConfig{KeyStrategy: StrategyContentHash}, rec: structured(event(nil)), check: func(t *testing.T, ev Event) {
			require.Equal(t, "content:25:https://invoices.example/:"+hex.EncodeToString(ev.PayloadHash[:]), ev.Key)
			require.Equal(t, StrategyContentHash, ev.Strategy)
		}},
		{name: "long key is hashed", rec: structured(event(map[string]any{"source": longSource, "id": longID})), check: func(t *testing.T, ev Event) {
			want := "ce:256:" + longSource + ":" + longID
			require.Equal(t, "sha256:"+sha256Hex(want), ev.Key)
			require.Len(t, ev.Key, len("sha256:")+64)
		}},
		{name: "json format webhook", cfg: webhookCfg, rec: Record{Topic: "billing", Key: []byte("acc-1"), Value: []byte(webhook)}, check: func(t *testing.T, ev Event) {
			require.Equal(t, testTopic, ev.Source) // the decoder's topic
			require.Equal(t, "wh_1", ev.ID)
			require.Equal(t, "invoice.updated", ev.Type)
			require.Equal(t, "acc-1", ev.Subject)
			require.Equal(t, int64(7), ev.Version)
			require.Equal(t, "field:8:invoices:wh_1", ev.Key)
			require.Equal(t, webhook, string(ev.Data))
			require.Equal(t, hashOf(t, "invoice.updated", "acc-1", 7, webhook), ev.PayloadHash)
		}},
		{name: "json format without id pointer or version", cfg: DecoderConfig{Format: FormatJSON, KeyStrategy: StrategyContentHash, TypePointer: "/event/type", SubjectPointer: "/n"},
			rec: Record{Key: []byte("42"), Value: []byte(`{"event":{"type":"charge.credited"},"n":42}`)}, check: func(t *testing.T, ev Event) {
				require.Equal(t, "42", ev.Subject)
				require.Zero(t, ev.Version)
				require.Equal(t, ev.Key, ev.ID)
				require.True(t, strings.HasPrefix(ev.Key, "content:8:invoices:"))
			}},
		{name: "json format natural key", cfg: DecoderConfig{Format: FormatJSON, KeyStrategy: StrategyNatural, NaturalKey: []string{"/invoice/id", "/invoice/version"},
			TypePointer: "/event/type", SubjectPointer: "/invoice/id"},
			rec: Record{Key: []byte("acc-1"), Value: []byte(webhook)}, check: func(t *testing.T, ev Event) {
				require.Equal(t, "natural:8:invoices:"+sha256Hex(`["acc-1",7]`), ev.Key)
			}},

		// One case (or a few) per reason code.
		{name: "empty value", rec: Record{Key: []byte(testKey)}, reason: ReasonEmptyValue},
		{name: "empty non-nil value", rec: binary(binaryHeaders(nil), ""), reason: ReasonEmptyValue},
		{name: "too large", cfg: DecoderConfig{MaxPayloadBytes: 64}, rec: structured(event(nil)), reason: ReasonTooLarge},
		{name: "invalid utf8 value", rec: structured([]byte("{\"id\":\"\xff\"}")), reason: ReasonInvalidUTF8},
		{name: "invalid utf8 header", rec: binary(binaryHeaders(map[string]string{"ce_id": "e\xffe"}), openedData), reason: ReasonInvalidUTF8},
		{name: "invalid utf8 content-type", rec: binary(binaryHeaders(map[string]string{"content-type": "\xff"}), openedData), reason: ReasonInvalidUTF8},
		{name: "missing binary headers", rec: binary(binaryHeaders(map[string]string{"ce_specversion": omit}), openedData), reason: ReasonMissingBinaryHeaders},
		{name: "missing binary headers with structured value", rec: binary([]Header{{Key: "ce_id", Value: []byte("evt-1")}}, string(event(nil))), reason: ReasonMissingBinaryHeaders},
		{name: "not json", rec: structured([]byte(`{"specversion":"1.0",`)), reason: ReasonNotJSON},
		{name: "not json binary data", rec: binary(binaryHeaders(nil), "plain text"), reason: ReasonNotJSON},
		{name: "not json format json", cfg: webhookCfg, rec: Record{Key: []byte("acc-1"), Value: []byte("{")}, reason: ReasonNotJSON},
		{name: "not an object", rec: structured([]byte(`["specversion","1.0"]`)), reason: ReasonNotCloudEvents},
		{name: "no specversion", rec: structured(event(map[string]any{"specversion": nil})), reason: ReasonNotCloudEvents},
		{name: "old specversion", rec: structured(event(map[string]any{"specversion": "0.3"})), reason: ReasonNotCloudEvents},
		{name: "numeric specversion", rec: structured(event(map[string]any{"specversion": json.RawMessage("1.0")})), reason: ReasonNotCloudEvents},
		{name: "binary specversion", rec: binary(binaryHeaders(map[string]string{"ce_specversion": "0.3"}), openedData), reason: ReasonNotCloudEvents},
		{name: "duplicate top-level member", rec: structured([]byte(strings.Replace(string(event(nil)), `"id":"evt-1"`, `"id":"evt-1","id":"evt-forged"`, 1))), reason: ReasonNotCloudEvents},
		{name: "uppercase attribute name", rec: structured(event(map[string]any{"ID": "x"})), reason: ReasonNotCloudEvents},
		{name: "uppercase binary header", rec: binary(binaryHeaders(map[string]string{"ce_Foo": "x"}), openedData), reason: ReasonNotCloudEvents},
		{name: "duplicate binary header", rec: binary(append(binaryHeaders(nil), Header{Key: "ce_id", Value: []byte("evt-9")}), openedData), reason: ReasonNotCloudEvents},
		{name: "batch mode", rec: Record{Key: []byte(testKey), Value: []byte("[" + string(event(nil)) + "]"),
			Headers: []Header{{Key: "content-type", Value: []byte("application/cloudevents-batch+json")}}}, reason: ReasonNotCloudEvents},
		{name: "missing id", rec: structured(event(map[string]any{"id": nil})), reason: ReasonMissingID},
		{name: "empty id", rec: structured(event(map[string]any{"id": ""})), reason: ReasonMissingID},
		{name: "null id", rec: structured(event(map[string]any{"id": json.RawMessage("null")})), reason: ReasonMissingID},
		{name: "missing binary id", rec: binary(binaryHeaders(map[string]string{"ce_id": omit}), openedData), reason: ReasonMissingID},
		{name: "missing json id", cfg: webhookCfg, rec: Record{Key: []byte("acc-1"), Value: []byte(`{"event":{"type":"t"},"invoice":{"id":"acc-1"}}`)}, reason: ReasonMissingID},
		{name: "missing source", rec: structured(event(map[string]any{"source": nil})), reason: ReasonMissingSource},
		{name: "missing binary source", rec: binary(binaryHeaders(map[string]string{"ce_source": ""}), openedData), reason: ReasonMissingSource},
		{name: "missing type", rec: structured(event(map[string]any{"type": nil})), reason: ReasonMissingType},
		{name: "missing binary type", rec: binary(binaryHeaders(map[string]string{"ce_type": omit}), openedData), reason: ReasonMissingType},
		{name: "missing json type", cfg: webhookCfg, rec: Record{Key: []byte("acc-1"), Value: []byte(`{"event":{"id":"wh_1"},"invoice":{"id":"acc-1"}}`)}, reason: ReasonMissingType},
		{name: "missing subject, no partitionkey, no record key", rec: Record{Topic: testTopic, Value: event(map[string]any{"subject": nil})}, reason: ReasonMissingSubject},
		{name: "missing subject where the topic requires one", cfg: DecoderConfig{RequireSubject: true}, rec: structured(event(map[string]any{"subject": nil, "partitionkey": testKey})), reason: ReasonMissingSubject},
		{name: "missing binary subject where the topic requires one", cfg: DecoderConfig{RequireSubject: true}, rec: binary(binaryHeaders(map[string]string{"ce_subject": omit}), openedData), reason: ReasonMissingSubject},
		{name: "subject and partitionkey differ", rec: structured(event(map[string]any{"partitionkey": "acc-2"})), reason: ReasonSubjectMismatch},
		{name: "partitionkey differs from the record key", rec: structured(event(map[string]any{"subject": nil, "partitionkey": "acc-2"})), reason: ReasonSubjectMismatch},
		{name: "no subject and a record key that is not UTF-8", rec: Record{Topic: testTopic, Key: []byte("inv\xd1oice-1"), Value: event(map[string]any{"subject": nil})}, reason: ReasonInvalidUTF8},
		{name: "partitionkey not a string", rec: structured(event(map[string]any{"subject": nil, "partitionkey": json.RawMessage("7")})), reason: ReasonInvalidAttribute},
		{name: "missing json subject", cfg: webhookCfg, rec: Record{Key: []byte("acc-1"), Value: []byte(`{"event":{"id":"wh_1","type":"t"}}`)}, reason: ReasonMissingSubject},
		{name: "subject mismatch", rec: Record{Key: []byte("acc-2"), Value: event(nil)}, reason: ReasonSubjectMismatch},
		{name: "subject without key", rec: Record{Value: event(nil)}, reason: ReasonSubjectMismatch},
		{name: "subject mismatch long key", rec: Record{Key: []byte(long), Value: event(nil)}, reason: ReasonSubjectMismatch},
		{name: "binary subject mismatch", rec: Record{Key: []byte("acc-2"), Value: []byte(openedData), Headers: binaryHeaders(nil)}, reason: ReasonSubjectMismatch},
		{name: "numeric id", rec: structured(event(map[string]any{"id": json.RawMessage("17")})), reason: ReasonInvalidAttribute},
		{name: "id with NUL", rec: structured(event(map[string]any{"id": "evt\u00001"})), reason: ReasonInvalidAttribute},
		{name: "type with noncharacter", rec: structured(event(map[string]any{"type": "invoice.opened\ufffe"})), reason: ReasonInvalidAttribute},
		{name: "source with lone surrogate", rec: structured([]byte(strings.Replace(string(event(nil)), `"source":"https://invoices.example/"`, `"source":"\ud800"`, 1))), reason: ReasonInvalidAttribute},
		{name: "bad time", rec: structured(event(map[string]any{"time": "yesterday"})), reason: ReasonInvalidAttribute},
		{name: "numeric time", rec: structured(event(map[string]any{"time": json.RawMessage("1700000000")})), reason: ReasonInvalidAttribute},
		{name: "binary bad time", rec: binary(binaryHeaders(map[string]string{"ce_time": "2026-13-01T00:00:00Z"}), openedData), reason: ReasonInvalidAttribute},
		{name: "object extension", rec: structured(event(map[string]any{"ext": map[string]any{"a": 1}})), reason: ReasonInvalidAttribute},
		{name: "json subject not a string", cfg: webhookCfg, rec: Record{Key: []byte("acc-1"), Value: []byte(`{"event":{"id":"wh_1","type":"t"},"invoice":{"id":true}}`)}, reason: ReasonInvalidAttribute},
		{name: "version zero", rec: structured(event(map[string]any{"resourceversion": json.RawMessage("0")})), reason: ReasonInvalidVersion},
		{name: "version negative", rec: structured(event(map[string]any{"resourceversion": json.RawMessage("-4")})), reason: ReasonInvalidVersion},
		{name: "version fractional", rec: structured(event(map[string]any{"resourceversion": json.RawMessage("1.5")})), reason: ReasonInvalidVersion},
		{name: "version with fraction zero", rec: structured(event(map[string]any{"resourceversion": json.RawMessage("2.0")})), reason: ReasonInvalidVersion},
		{name: "version exponent", rec: structured(event(map[string]any{"resourceversion": json.RawMessage("1e3")})), reason: ReasonInvalidVersion},
		{name: "version string in structured mode", rec: structured(event(map[string]any{"resourceversion": "5"})), reason: ReasonInvalidVersion},
		{name: "version beyond int64", rec: structured(event(map[string]any{"resourceversion": json.RawMessage("9223372036854775808")})), reason: ReasonInvalidVersion},
		{name: "binary version not a number", rec: binary(binaryHeaders(map[string]string{"ce_resourceversion": "v3"}), openedData), reason: ReasonInvalidVersion},
		{name: "binary version zero", rec: binary(binaryHeaders(map[string]string{"ce_resourceversion": "0"}), openedData), reason: ReasonInvalidVersion},
		{name: "binary version leading zero", rec: binary(binaryHeaders(map[string]string{"ce_resourceversion": "03"}), openedData), reason: ReasonInvalidVersion},
		{name: "json version string", cfg: webhookCfg, rec: Record{Key: []byte("acc-1"), Value: []byte(strings.Replace(webhook, `"version":7`, `"version":"7"`, 1))}, reason: ReasonInvalidVersion},
		{name: "data_base64", rec: structured(event(map[string]any{"data": nil, "data_base64": "eyJhIjoxfQ=="})), reason: ReasonUnsupportedData},
		{name: "non-JSON datacontenttype", rec: structured(event(map[string]any{"datacontenttype": "text/plain", "data": "hello"})), reason: ReasonUnsupportedData},
		{name: "binary non-JSON content-type", rec: binary(binaryHeaders(map[string]string{"content-type": "application/xml"}), `"<a/>"`), reason: ReasonUnsupportedData},
		{name: "data with duplicate member", rec: structured(event(map[string]any{"data": json.RawMessage(`{"plan":"free","plan":"pro"}`)})), reason: ReasonInvalidData},
		{name: "binary data with lone surrogate", rec: binary(binaryHeaders(nil), `{"name":"\udc00"}`), reason: ReasonInvalidData},
		{name: "data number out of range", rec: structured(event(map[string]any{"data": json.RawMessage(`{"x":1e400}`)})), reason: ReasonInvalidData},
		{name: "json payload duplicate member", cfg: webhookCfg, rec: Record{Key: []byte("acc-1"), Value: []byte(`{"event":{"id":"a","id":"b","type":"t"},"invoice":{"id":"acc-1"}}`)}, reason: ReasonInvalidData},
		// Bounds (limits.go): each exactly at its limit passes, one byte more
		// is refused.
		{name: "id too long", rec: structured(event(map[string]any{"id": longID + "i"})), reason: ReasonAttributeTooLong},
		{name: "source too long", rec: structured(event(map[string]any{"source": longSource + "s"})), reason: ReasonAttributeTooLong},
		{name: "type too long", rec: structured(event(map[string]any{"type": strings.Repeat("t", MaxAttributeBytes+1)})), reason: ReasonAttributeTooLong},
		{name: "binary type too long", rec: binary(binaryHeaders(map[string]string{"ce_type": strings.Repeat("t", MaxAttributeBytes+1)}), openedData), reason: ReasonAttributeTooLong},
		{name: "json id too long", cfg: webhookCfg, rec: Record{Key: []byte("acc-1"), Value: []byte(strings.Replace(webhook, `"wh_1"`, `"`+longID+`x"`, 1))}, reason: ReasonAttributeTooLong},
		{name: "subject at the limit", rec: Record{Topic: testTopic, Key: []byte(longSubject), Value: event(map[string]any{"subject": longSubject})}, check: func(t *testing.T, ev Event) {
			require.Equal(t, longSubject, ev.Subject)
		}},
		{name: "subject too long, equal to the key", rec: Record{Topic: testTopic, Key: []byte(hugeSubject), Value: event(map[string]any{"subject": hugeSubject})}, reason: ReasonResourceIDTooLong},
		{name: "partitionkey too long", rec: Record{Topic: testTopic, Key: []byte(hugeSubject), Value: event(map[string]any{"subject": nil, "partitionkey": hugeSubject})}, reason: ReasonResourceIDTooLong},
		{name: "record key not UTF-8, no subject", rec: Record{Topic: testTopic, Key: []byte("acc-1\xc2\xd8"), Value: event(map[string]any{"subject": nil})}, reason: ReasonInvalidUTF8},
		{name: "record key too long, no subject", rec: Record{Topic: testTopic, Key: []byte(hugeSubject), Value: event(map[string]any{"subject": nil})}, reason: ReasonResourceIDTooLong},
		{name: "binary subject too long", rec: Record{Topic: testTopic, Key: []byte(hugeSubject), Value: []byte(openedData), Headers: binaryHeaders(map[string]string{"ce_subject": hugeSubject})}, reason: ReasonResourceIDTooLong},
		{name: "json subject too long", cfg: webhookCfg, rec: Record{Key: []byte(hugeSubject), Value: []byte(strings.Replace(webhook, `"acc-1"`, `"`+hugeSubject+`"`, 1))}, reason: ReasonResourceIDTooLong},
		{name: "data nested to the limit", rec: structured(event(map[string]any{"data": json.RawMessage(nested(MaxNesting))})), check: func(t *testing.T, ev Event) {
			require.Equal(t, nested(MaxNesting), string(ev.Data))
		}},
		{name: "binary data nested to the limit", rec: binary(binaryHeaders(nil), nested(MaxNesting))},
		{name: "data nested too deep", rec: structured(event(map[string]any{"data": json.RawMessage(nested(MaxNesting + 1))})), reason: ReasonNestingTooDeep},
		{name: "data nested 5000 deep", rec: structured(event(map[string]any{"data": json.RawMessage(nested(5000))})), reason: ReasonNestingTooDeep},
		{name: "binary data nested too deep", rec: binary(binaryHeaders(nil), nested(MaxNesting+1)), reason: ReasonNestingTooDeep},
		{name: "json payload nested too deep", cfg: webhookCfg, rec: Record{Key: []byte("acc-1"), Value: []byte(strings.Replace(webhook, `"plan":"pro"`, `"plan":`+nested(MaxNesting), 1))}, reason: ReasonNestingTooDeep},
		{name: "unterminated deep nesting is too deep, not not_json", rec: binary(binaryHeaders(nil), strings.Repeat("[", 5000)), reason: ReasonNestingTooDeep},
		{name: "large array of numbers", rec: binary(binaryHeaders(nil), numbers(20_000)), check: func(t *testing.T, ev Event) {
			require.Len(t, ev.Data, len(numbers(20_000)))
		}},
		{name: "key field missing", cfg: DecoderConfig{KeyStrategy: StrategyField, KeyPointer: "/provider_id"}, rec: structured(event(nil)), reason: ReasonMissingKeyField},
		{name: "key field boolean", cfg: DecoderConfig{KeyStrategy: StrategyField, KeyPointer: "/b"}, rec: structured(event(map[string]any{"data": json.RawMessage(`{"b":true}`)})), reason: ReasonMissingKeyField},
		{name: "key field fraction", cfg: DecoderConfig{KeyStrategy: StrategyField, KeyPointer: "/b"}, rec: structured(event(map[string]any{"data": json.RawMessage(`{"b":1.5}`)})), reason: ReasonMissingKeyField},
		{name: "key field empty string", cfg: DecoderConfig{KeyStrategy: StrategyField, KeyPointer: "/b"}, rec: structured(event(map[string]any{"data": json.RawMessage(`{"b":""}`)})), reason: ReasonMissingKeyField},
		{name: "key field without data", cfg: DecoderConfig{KeyStrategy: StrategyField, KeyPointer: "/email"}, rec: structured(event(map[string]any{"data": nil})), reason: ReasonMissingKeyField},
		{name: "natural key part missing", cfg: DecoderConfig{KeyStrategy: StrategyNatural, NaturalKey: []string{"/email", "/nope"}}, rec: structured(event(nil)), reason: ReasonMissingKeyField},
		{name: "natural key array index out of range", cfg: DecoderConfig{KeyStrategy: StrategyNatural, NaturalKey: []string{"/a/2"}},
			rec: structured(event(map[string]any{"data": json.RawMessage(`{"a":["x","y"]}`)})), reason: ReasonMissingKeyField},
	}
}

func TestDecode(t *testing.T) {
	t.Parallel()
	covered := make(map[Reason]bool)
	for _, tc := range append(append(decodeCases(), registryDecodeCases()...), debeziumDecodeCases()...) {
		covered[tc.reason] = true
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, err := NewDecoder(tc.config())
			require.NoError(t, err)
			ev, err := d.Decode(tc.rec)
			if tc.reason != "" {
				var de *DecodeError
				require.ErrorAs(t, err, &de, "got event %+v", ev)
				require.Equal(t, tc.reason, de.Reason, de.Error())
				require.True(t, strings.HasPrefix(err.Error(), string(tc.reason)+": "))
				require.True(t, IsPermanent(err))
				require.Equal(t, tc.reason, ReasonOf(err))
				require.Zero(t, ev)
				requireSafeMessage(t, de.Msg, tc.rec)
				return
			}
			require.NoError(t, err)
			require.NotEmpty(t, ev.Key)
			require.LessOrEqual(t, len(ev.Key), MaxKeyBytes)
			require.NotEmpty(t, ev.Strategy)
			if tc.check != nil {
				tc.check(t, ev)
			}
		})
	}
	for _, r := range DecodeReasons() {
		require.True(t, covered[r], "no test case for reason %s", r)
	}
}

// requireSafeMessage checks that a message quotes no more than an excerpt
// of the record: never the whole value when the value is large.
func requireSafeMessage(t *testing.T, msg string, r Record) {
	t.Helper()
	require.Less(t, len(msg), 400, msg)
	require.NotContains(t, msg, "\n")
	if len(r.Value) > 100 {
		require.NotContains(t, msg, string(r.Value))
	}
	if len(r.Key) > 100 {
		require.NotContains(t, msg, string(r.Key))
		require.Contains(t, msg, "...")
	}
}

func TestDecodeStructuredBinaryEquivalence(t *testing.T) {
	t.Parallel()
	strategies := []DecoderConfig{
		{},
		{KeyStrategy: StrategyField, KeyPointer: "/email"},
		{KeyStrategy: StrategyNatural, NaturalKey: []string{"/email", "/name"}},
		{KeyStrategy: StrategyContentHash},
	}
	// The same event: structured with another member order, whitespace and
	// time; binary with the data re-serialised.
	structuredValue := []byte(`{
		"data": {"plan": "pro", "email": "ada@example.com", "name": "Ada"},
		"resourceversion": 3, "subject": "acc-1", "type": "invoice.opened",
		"source": "https://invoices.example/", "id": "evt-1", "specversion": "1.0",
		"time": "2026-05-05T00:00:00.123Z"
	}`)
	for _, cfg := range strategies {
		t.Run(cfg.KeyStrategy, func(t *testing.T) {
			t.Parallel()
			cfg.Topic = testTopic
			d, err := NewDecoder(cfg)
			require.NoError(t, err)
			s, err := d.Decode(structured(structuredValue))
			require.NoError(t, err)
			b, err := d.Decode(binary(binaryHeaders(nil), openedData))
			require.NoError(t, err)
			require.Equal(t, s.Key, b.Key)
			require.Equal(t, s.PayloadHash, b.PayloadHash)
			require.NotEqual(t, s.Time, b.Time)

			// Changed data: same key (unless the key is the content),
			// different hash — a conflict, not a duplicate.
			c, err := d.Decode(binary(binaryHeaders(nil), `{"name":"Ada","email":"ada@example.com","plan":"free"}`))
			require.NoError(t, err)
			require.NotEqual(t, s.PayloadHash, c.PayloadHash)
			if cfg.KeyStrategy != StrategyContentHash {
				require.Equal(t, s.Key, c.Key)
			} else {
				require.NotEqual(t, s.Key, c.Key)
			}

			// A changed version or type changes the hash too.
			v, err := d.Decode(binary(binaryHeaders(map[string]string{"ce_resourceversion": "4"}), openedData))
			require.NoError(t, err)
			require.NotEqual(t, s.PayloadHash, v.PayloadHash)
			ty, err := d.Decode(binary(binaryHeaders(map[string]string{"ce_type": "invoice.updated"}), openedData))
			require.NoError(t, err)
			require.NotEqual(t, s.PayloadHash, ty.PayloadHash)
		})
	}
}

func TestDecodeDataDoesNotAliasRecord(t *testing.T) {
	t.Parallel()
	d, err := NewDecoder(DecoderConfig{Topic: testTopic})
	require.NoError(t, err)
	for _, rec := range []Record{structured(event(nil)), binary(binaryHeaders(nil), openedData)} {
		ev, err := d.Decode(rec)
		require.NoError(t, err)
		before := string(ev.Data)
		for i := range rec.Value {
			rec.Value[i] = ' '
		}
		require.Equal(t, before, string(ev.Data))
	}
}

func TestNewDecoderValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  DecoderConfig
		want string // substring of the error
	}{
		{"no topic", DecoderConfig{}, "topic"},
		{"unknown format", DecoderConfig{Topic: "t", Format: "avro"}, `format "avro"`},
		{"unknown strategy", DecoderConfig{Topic: "t", KeyStrategy: "offset"}, `key strategy "offset"`},
		{"negative limit", DecoderConfig{Topic: "t", MaxPayloadBytes: -1}, "max payload bytes"},
		{"field without pointer", DecoderConfig{Topic: "t", KeyStrategy: StrategyField}, "needs a key pointer"},
		{"pointer without slash", DecoderConfig{Topic: "t", KeyStrategy: StrategyField, KeyPointer: "id"}, "not a JSON pointer"},
		{"bad tilde escape", DecoderConfig{Topic: "t", KeyStrategy: StrategyField, KeyPointer: "/a~2b"}, "'~' must be followed"},
		{"trailing tilde", DecoderConfig{Topic: "t", KeyStrategy: StrategyField, KeyPointer: "/a~"}, "'~' must be followed"},
		{"natural without pointers", DecoderConfig{Topic: "t", KeyStrategy: StrategyNatural}, "at least one"},
		{"natural bad pointer", DecoderConfig{Topic: "t", KeyStrategy: StrategyNatural, NaturalKey: []string{"/a", "b"}}, "not a JSON pointer"},
		{"natural empty pointer", DecoderConfig{Topic: "t", KeyStrategy: StrategyNatural, NaturalKey: []string{""}}, "is empty"},
		{"natural duplicate pointer", DecoderConfig{Topic: "t", KeyStrategy: StrategyNatural, NaturalKey: []string{"/a", "/a"}}, "twice"},
		{"key pointer with other strategy", DecoderConfig{Topic: "t", KeyPointer: "/a"}, "only for key strategy"},
		{"natural key with other strategy", DecoderConfig{Topic: "t", KeyStrategy: StrategyField, KeyPointer: "/a", NaturalKey: []string{"/b"}}, "only for key strategy"},
		{"json pointers on cloudevents", DecoderConfig{Topic: "t", TypePointer: "/type"}, "only for format"},
		{"json with cloudevents strategy", DecoderConfig{Topic: "t", Format: FormatJSON, KeyStrategy: StrategyCloudEvents, TypePointer: "/t", SubjectPointer: "/s"}, "needs key strategy"},
		{"json without strategy", DecoderConfig{Topic: "t", Format: FormatJSON, TypePointer: "/t", SubjectPointer: "/s"}, "needs key strategy"},
		{"json without type pointer", DecoderConfig{Topic: "t", Format: FormatJSON, KeyStrategy: StrategyContentHash, SubjectPointer: "/s"}, "type pointer"},
		{"json without subject pointer", DecoderConfig{Topic: "t", Format: FormatJSON, KeyStrategy: StrategyContentHash, TypePointer: "/t"}, "subject pointer"},
		{"json bad version pointer", DecoderConfig{Topic: "t", Format: FormatJSON, KeyStrategy: StrategyContentHash, TypePointer: "/t", SubjectPointer: "/s", VersionPointer: "v"}, "version pointer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, err := NewDecoder(tc.cfg)
			require.Error(t, err)
			require.Nil(t, d)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestWarnings(t *testing.T) {
	t.Parallel()
	d, err := NewDecoder(DecoderConfig{Topic: "webhooks", KeyStrategy: StrategyContentHash})
	require.NoError(t, err)
	require.Equal(t, []string{"topic webhooks uses key strategy content-hash: distinct events with identical content will collide and be treated as duplicates"}, d.Warnings())

	d, err = NewDecoder(DecoderConfig{Topic: "invoices"})
	require.NoError(t, err)
	require.Empty(t, d.Warnings())
}

func TestPermanent(t *testing.T) {
	t.Parallel()
	base := errors.New("invoice has no currency")
	require.NoError(t, Permanent(nil))

	err := Permanent(base)
	require.True(t, IsPermanent(err))
	require.Equal(t, ReasonHandlerError, ReasonOf(err))
	require.ErrorIs(t, err, base)
	require.Equal(t, "permanent failure (handler_error): invoice has no currency", err.Error())

	wrapped := fmt.Errorf("applying evt-1: %w", err)
	require.True(t, IsPermanent(wrapped))
	require.Equal(t, ReasonHandlerError, ReasonOf(wrapped))

	require.False(t, IsPermanent(base))
	require.False(t, IsPermanent(nil))
	require.Equal(t, Reason(""), ReasonOf(base))
	require.Equal(t, Reason(""), ReasonOf(nil))

	de := &DecodeError{Reason: ReasonMissingID, Msg: "the event has no id"}
	require.Equal(t, "missing_id: the event has no id", de.Error())
	require.True(t, IsPermanent(de))
	require.Equal(t, ReasonMissingID, ReasonOf(fmt.Errorf("decoding: %w", de)))
	require.Equal(t, ReasonMissingID, ReasonOf(Permanent(de)), "Permanent keeps a decode reason")

	custom := PermanentWithReason("prerequisite_missing", base)
	require.Equal(t, Reason("prerequisite_missing"), ReasonOf(custom))
	require.Equal(t, Reason("prerequisite_missing"), ReasonOf(Permanent(custom)))
	require.Equal(t, Reason("conflict"), ReasonOf(PermanentWithReason("conflict", de)), "the outermost reason wins")
	require.Error(t, PermanentWithReason("conflict", nil))

	joined := errors.Join(base, fmt.Errorf("x: %w", de))
	require.True(t, IsPermanent(joined))
	require.Equal(t, ReasonMissingID, ReasonOf(joined))
}

func TestExcerpt(t *testing.T) {
	t.Parallel()
	require.Equal(t, `"abc"`, Excerpt("abc"))
	require.Equal(t, `"a\x00\n\x1b"`, Excerpt("a\x00\n\x1b"))
	long := strings.Repeat("é", 40) // 80 bytes
	got := Excerpt(long)
	require.Equal(t, `"`+strings.Repeat("é", 32)+`"...`, got)
	// A cut through a multi-byte character drops the partial one.
	got = Excerpt("x" + strings.Repeat("é", 40))
	require.Equal(t, `"x`+strings.Repeat("é", 31)+`"...`, got)
	require.Equal(t, `"\xff"`, Excerpt("\xff"))
}
