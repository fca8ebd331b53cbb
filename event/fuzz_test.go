package event

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// The fuzz targets are seeded from the table cases of envelope_test.go and
// canonical_test.go; findings live in testdata/fuzz.

func FuzzDecodeStructured(f *testing.F) {
	for _, tc := range decodeCases() {
		f.Add(tc.rec.Value, tc.rec.Key)
	}
	decoders := fuzzDecoders(f)
	f.Fuzz(func(t *testing.T, value, key []byte) {
		for _, d := range decoders {
			ev, err := d.Decode(Record{Topic: testTopic, Key: key, Value: value})
			if err != nil {
				requireDecodeError(t, err, value, key)
				continue
			}
			requireValidEvent(t, ev, key)
			if ev.Data == nil {
				continue // binary mode cannot carry an event without data
			}
			// The same event in binary mode has the same key and hash.
			headers := []Header{
				{Key: "ce_specversion", Value: []byte("1.0")},
				{Key: "ce_id", Value: []byte(ev.ID)},
				{Key: "ce_source", Value: []byte(ev.Source)},
				{Key: "ce_type", Value: []byte(ev.Type)},
				{Key: "ce_subject", Value: []byte(ev.Subject)},
			}
			if ev.Version > 0 {
				headers = append(headers, Header{Key: "ce_resourceversion", Value: []byte(strconv.FormatInt(ev.Version, 10))})
			}
			if !ev.Time.IsZero() {
				headers = append(headers, Header{Key: "ce_time", Value: []byte(ev.Time.Format(time.RFC3339Nano))})
			}
			bin, err := d.Decode(Record{Key: key, Value: ev.Data, Headers: headers})
			require.NoError(t, err, "the binary copy of a valid structured event")
			requireSameEvent(t, ev, bin)
		}
	})
}

func FuzzDecodeBinary(f *testing.F) {
	for _, tc := range decodeCases() {
		h := map[string]string{}
		for _, hd := range tc.rec.Headers {
			h[hd.Key] = string(hd.Value)
		}
		if _, ok := h["ce_specversion"]; !ok {
			continue
		}
		f.Add(h["ce_id"], h["ce_source"], h["ce_type"], h["ce_subject"], h["ce_resourceversion"], h["ce_time"], h["content-type"], string(tc.rec.Key), tc.rec.Value)
	}
	decoders := fuzzDecoders(f)
	f.Fuzz(func(t *testing.T, id, source, typ, subject, version, tm, ct, key string, value []byte) {
		headers := []Header{
			{Key: "ce_specversion", Value: []byte("1.0")},
			{Key: "ce_id", Value: []byte(id)},
			{Key: "ce_source", Value: []byte(source)},
			{Key: "ce_type", Value: []byte(typ)},
			{Key: "ce_subject", Value: []byte(subject)},
		}
		if version != "" {
			headers = append(headers, Header{Key: "ce_resourceversion", Value: []byte(version)})
		}
		if tm != "" {
			headers = append(headers, Header{Key: "ce_time", Value: []byte(tm)})
		}
		if ct != "" {
			headers = append(headers, Header{Key: "content-type", Value: []byte(ct)})
		}
		for _, d := range decoders {
			ev, err := d.Decode(Record{Key: []byte(key), Value: value, Headers: headers})
			if err != nil {
				requireDecodeError(t, err, value, []byte(key))
				continue
			}
			requireValidEvent(t, ev, []byte(key))
			// The same event in structured mode has the same key and hash.
			env := map[string]any{
				"specversion": "1.0", "id": ev.ID, "source": ev.Source, "type": ev.Type,
				"subject": ev.Subject, "data": json.RawMessage(ev.Data),
			}
			if ev.Version > 0 {
				env["resourceversion"] = ev.Version
			}
			if !ev.Time.IsZero() {
				env["time"] = ev.Time.Format(time.RFC3339Nano)
			}
			value, err := json.Marshal(env)
			require.NoError(t, err)
			st, err := d.Decode(Record{Key: []byte(key), Value: value})
			require.NoError(t, err, "the structured copy %s of a valid binary event", value)
			requireSameEvent(t, ev, st)
		}
	})
}

func FuzzCanonicalize(f *testing.F) {
	for _, tc := range decodeCases() {
		f.Add(tc.rec.Value)
	}
	for _, s := range []string{
		`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
		`{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew","1":"One","\ud83d\ude00":"Emoji","\u0080":"Control","\u00f6":"o"}`,
		`[-0,1e21,1e-7,9007199254740993,1.5e300,5e-324]`, `"\ud800"`, `{"a":1,"a":2}`, `1e400`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := Canonicalize(data)
		valid := utf8.Valid(data) && json.Valid(data)
		if !valid {
			require.Error(t, err, "accepted text that is not JSON")
			return
		}
		if err != nil {
			// Valid JSON is refused only for I-JSON violations, or for
			// nesting deeper than MaxNesting.
			doc, perr := parseJSON(data, MaxNesting)
			var se *syntaxError
			if errors.As(perr, &se) && se.tooDeep {
				require.Greater(t, jsonDepth(data), MaxNesting, "refused as too deep")
				return
			}
			require.NoError(t, perr, "valid JSON refused as a syntax error")
			require.NotEmpty(t, doc.issues)
			return
		}
		require.True(t, utf8.Valid(out))
		require.True(t, json.Valid(out), "%s", out)
		again, err := Canonicalize(out)
		require.NoError(t, err)
		require.Equal(t, string(out), string(again), "not idempotent")
		// Same meaning (numbers as doubles, as encoding/json reads them).
		var in, res any
		require.NoError(t, json.Unmarshal(data, &in))
		require.NoError(t, json.Unmarshal(out, &res))
		require.True(t, reflect.DeepEqual(in, res), "meaning changed: %s -> %s", data, out)
	})
}

func FuzzKeyDerivation(f *testing.F) {
	for _, tc := range decodeCases() {
		ptrs := append([]string{tc.cfg.KeyPointer}, tc.cfg.NaturalKey...)
		for _, p := range ptrs {
			if p == "" {
				continue
			}
			for s := range uint8(3) {
				f.Add(p, []byte(openedData), s)
				if len(tc.rec.Headers) > 0 {
					f.Add(p, tc.rec.Value, s)
				}
			}
		}
	}
	f.Add("/a~1b/m~0n/1", []byte(`{"a/b":{"m~n":["x","y"]}}`), uint8(0))
	f.Add("/0", []byte(`["x"]`), uint8(1))
	f.Add("/n", []byte(`{"n":-0}`), uint8(0))
	f.Fuzz(func(t *testing.T, ptr string, data []byte, strategy uint8) {
		cfg := DecoderConfig{Topic: testTopic}
		switch strategy % 3 {
		case 0:
			cfg.KeyStrategy, cfg.KeyPointer = StrategyField, ptr
		case 1:
			cfg.KeyStrategy, cfg.NaturalKey = StrategyNatural, []string{ptr}
		default:
			cfg.KeyStrategy = StrategyContentHash
		}
		d, err := NewDecoder(cfg)
		if err != nil {
			_, perr := parsePointer(ptr)
			require.True(t, perr != nil || ptr == "", "NewDecoder refused a valid pointer %q: %v", ptr, err)
			return
		}
		rec := binary(binaryHeaders(nil), string(data))
		ev, err := d.Decode(rec)
		if err != nil {
			requireDecodeError(t, err, data, rec.Key)
			require.Contains(t, []Reason{ReasonEmptyValue, ReasonInvalidUTF8, ReasonNotJSON, ReasonNestingTooDeep, ReasonInvalidData, ReasonMissingKeyField}, ReasonOf(err))
			return
		}
		requireValidEvent(t, ev, rec.Key)
		again, err := d.Decode(rec)
		require.NoError(t, err)
		require.Equal(t, ev, again, "not deterministic")

		if cfg.KeyStrategy != StrategyField || strings.HasPrefix(ev.Key, "sha256:") {
			return
		}
		// Cross-check the field value against encoding/json.
		value := strings.TrimPrefix(ev.Key, "field:25:"+testSource+":")
		p, err := parsePointer(ptr)
		require.NoError(t, err)
		var doc any
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.UseNumber()
		require.NoError(t, dec.Decode(&doc))
		for _, tok := range p.tokens {
			switch v := doc.(type) {
			case map[string]any:
				doc = v[tok]
			case []any:
				i, ok := arrayIndex(tok)
				require.True(t, ok && i < len(v))
				doc = v[i]
			default:
				t.Fatalf("pointer %q resolved through a %T", ptr, v)
			}
		}
		switch v := doc.(type) {
		case string:
			require.Equal(t, v, value)
		case json.Number:
			if string(v) == "-0" {
				v = "0"
			}
			require.Equal(t, string(v), value)
		default:
			t.Fatalf("key from a %T", v)
		}
	})
}

// jsonDepth is the deepest nesting of arrays and objects in the JSON text
// data, counted the simple way.
func jsonDepth(data []byte) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}

func fuzzDecoders(tb testing.TB) []*Decoder {
	var ds []*Decoder
	for _, cfg := range []DecoderConfig{
		{Topic: testTopic},
		{Topic: testTopic, KeyStrategy: StrategyField, KeyPointer: "/id"},
		{Topic: testTopic, KeyStrategy: StrategyContentHash},
	} {
		d, err := NewDecoder(cfg)
		require.NoError(tb, err)
		ds = append(ds, d)
	}
	return ds
}

func requireDecodeError(t *testing.T, err error, value, key []byte) {
	t.Helper()
	var de *DecodeError
	require.ErrorAs(t, err, &de)
	require.Contains(t, DecodeReasons(), de.Reason)
	require.True(t, utf8.ValidString(de.Msg), "%q", de.Msg)
	require.Less(t, len(de.Msg), 600, de.Msg)
	if len(value) > 300 {
		require.NotContains(t, de.Msg, string(value))
	}
	if len(key) > 300 {
		require.NotContains(t, de.Msg, string(key))
	}
}

func requireValidEvent(t *testing.T, ev Event, key []byte) {
	t.Helper()
	require.Equal(t, string(key), ev.Subject)
	require.NotEmpty(t, ev.Key)
	require.LessOrEqual(t, len(ev.Key), MaxKeyBytes)
	require.False(t, hasControl(ev.Key), "%q", ev.Key)
	require.True(t, utf8.ValidString(ev.Key))
	require.GreaterOrEqual(t, ev.Version, int64(0))
	for _, s := range []string{ev.ID, ev.Source, ev.Type, ev.Subject} {
		require.NotEmpty(t, s)
		require.NoError(t, checkChars("attribute", s))
	}
	if ev.Data != nil {
		require.True(t, json.Valid(ev.Data))
		requireDocumentOfData(t, ev)
	}
	require.True(t, slices.Contains([]string{StrategyCloudEvents, StrategyField, StrategyNatural, StrategyContentHash}, ev.Strategy))
}

func requireSameEvent(t *testing.T, want, got Event) {
	t.Helper()
	require.Equal(t, want.Key, got.Key)
	require.Equal(t, want.PayloadHash, got.PayloadHash)
	require.Equal(t, want.ID, got.ID)
	require.Equal(t, want.Source, got.Source)
	require.Equal(t, want.Type, got.Type)
	require.Equal(t, want.Subject, got.Subject)
	require.Equal(t, want.Version, got.Version)
	require.True(t, want.Time.Equal(got.Time))
}
