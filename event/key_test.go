package event

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func mustParse(t *testing.T, s string) *jsonDoc {
	t.Helper()
	doc, err := parseJSON([]byte(s), MaxNesting)
	require.NoError(t, err)
	require.Empty(t, doc.issues)
	return doc
}

// hashOf is the payload hash of an event whose data is the JSON text data
// ("" for none).
func hashOf(t *testing.T, typ, subject string, version int64, data string) [32]byte {
	t.Helper()
	if data == "" {
		return payloadHash(typ, subject, version, nil, -1, "")
	}
	doc := mustParse(t, data)
	return payloadHash(typ, subject, version, doc, doc.root, "")
}

func TestPointer(t *testing.T) {
	t.Parallel()
	// The example document of RFC 6901, section 5.
	doc := `{"foo":["bar","baz"],"":0,"a/b":1,"c%d":2,"e^f":3,"g|h":4,"i\\j":5,"k\"l":6," ":7,"m~n":8}`
	tests := []struct {
		ptr  string
		want string // raw JSON, "" for not found
	}{
		{"", doc},
		{"/foo", `["bar","baz"]`},
		{"/foo/0", `"bar"`},
		{"/foo/1", `"baz"`},
		{"/", "0"},
		{"/a~1b", "1"},
		{"/c%d", "2"},
		{"/e^f", "3"},
		{"/g|h", "4"},
		{"/i\\j", "5"},
		{"/k\"l", "6"},
		{"/ ", "7"},
		{"/m~0n", "8"},
		{"/foo/2", ""},
		{"/foo/-", ""},
		{"/foo/01", ""},
		{"/foo/x", ""},
		{"/foo/0/x", ""},
		{"/missing", ""},
		{"/a/b", ""},
	}
	root := mustParse(t, doc)
	for _, tc := range tests {
		t.Run(tc.ptr, func(t *testing.T) {
			t.Parallel()
			p, err := parsePointer(tc.ptr)
			require.NoError(t, err)
			v, found := root.resolve(p, root.root)
			if tc.want == "" {
				require.False(t, found)
				return
			}
			require.True(t, found)
			require.Equal(t, tc.want, string(root.raw(v)))
		})
	}
}

func TestParsePointerErrors(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"a", "a/b", "/~", "/~2", "/a~", "/~a", "/\xff"} {
		_, err := parsePointer(s)
		require.Error(t, err, "%q", s)
	}
	// "~01" is "~1" literally: ~1 is unescaped before ~0.
	p, err := parsePointer("/~01")
	require.NoError(t, err)
	require.Equal(t, []string{"~1"}, p.tokens)
}

func TestScopedKeyIsUnambiguous(t *testing.T) {
	t.Parallel()
	// Without the length prefix both pairs would spell "ce:a:b:c".
	require.NotEqual(t, scopedKey("ce", "a:b", "c"), scopedKey("ce", "a", "b:c"))
	require.Equal(t, "ce:3:a:b:c", scopedKey("ce", "a:b", "c"))
	require.Equal(t, "ce:1:a:b:c", scopedKey("ce", "a", "b:c"))
}

func TestBoundKey(t *testing.T) {
	t.Parallel()
	exact := "ce:1:s:" + strings.Repeat("x", MaxKeyBytes-len("ce:1:s:"))
	require.Len(t, exact, MaxKeyBytes)
	require.Equal(t, exact, boundKey(exact))

	over := exact + "x"
	got := boundKey(over)
	require.Equal(t, "sha256:"+sha256Hex(over), got)
	require.Len(t, got, 71)

	withNUL := "field:1:s:a\x00b"
	require.Equal(t, "sha256:"+sha256Hex(withNUL), boundKey(withNUL))
	withNewline := "field:1:s:a\nb"
	require.Equal(t, "sha256:"+sha256Hex(withNewline), boundKey(withNewline))
	require.Equal(t, "field:1:s:é", boundKey("field:1:s:é"))
}

func TestKeyFieldControlCharactersAreHashed(t *testing.T) {
	t.Parallel()
	d, err := NewDecoder(DecoderConfig{Topic: testTopic, KeyStrategy: StrategyField, KeyPointer: "/id"})
	require.NoError(t, err)
	ev, err := d.Decode(binary(binaryHeaders(nil), `{"id":"a\u0000b"}`))
	require.NoError(t, err)
	require.Equal(t, "sha256:"+sha256Hex("field:25:https://invoices.example/:a\x00b"), ev.Key)
}

func TestKeyFieldStringAndIntegerAgree(t *testing.T) {
	t.Parallel()
	d, err := NewDecoder(DecoderConfig{Topic: testTopic, KeyStrategy: StrategyField, KeyPointer: "/id"})
	require.NoError(t, err)
	s, err := d.Decode(binary(binaryHeaders(nil), `{"id":"42"}`))
	require.NoError(t, err)
	n, err := d.Decode(binary(binaryHeaders(nil), `{"id":42}`))
	require.NoError(t, err)
	require.Equal(t, "field:25:https://invoices.example/:42", s.Key)
	require.Equal(t, s.Key, n.Key)

	// Large integer IDs keep every digit: neighbours never collide.
	a, err := d.Decode(binary(binaryHeaders(nil), `{"id":9007199254740993}`))
	require.NoError(t, err)
	b, err := d.Decode(binary(binaryHeaders(nil), `{"id":9007199254740992}`))
	require.NoError(t, err)
	require.NotEqual(t, a.Key, b.Key)
}

func TestNaturalKeyTypesMatter(t *testing.T) {
	t.Parallel()
	d, err := NewDecoder(DecoderConfig{Topic: testTopic, KeyStrategy: StrategyNatural, NaturalKey: []string{"/a", "/b"}})
	require.NoError(t, err)
	keys := map[string]string{}
	for _, data := range []string{`{"a":"1","b":"2"}`, `{"a":1,"b":"2"}`, `{"a":"1,2","b":""}`, `{"b":"2","a":"1"}`} {
		ev, err := d.Decode(binary(binaryHeaders(nil), data))
		if err != nil {
			require.Equal(t, ReasonMissingKeyField, ReasonOf(err)) // the empty string
			continue
		}
		keys[data] = ev.Key
	}
	require.Len(t, keys, 3)
	require.NotEqual(t, keys[`{"a":"1","b":"2"}`], keys[`{"a":1,"b":"2"}`])
	require.Equal(t, keys[`{"a":"1","b":"2"}`], keys[`{"b":"2","a":"1"}`])
}

func TestKeysAreScopedBySource(t *testing.T) {
	t.Parallel()
	for _, cfg := range []DecoderConfig{
		{Format: FormatJSON, KeyStrategy: StrategyField, KeyPointer: "/id", TypePointer: "/type", SubjectPointer: "/sub"},
		{Format: FormatJSON, KeyStrategy: StrategyNatural, NaturalKey: []string{"/id"}, TypePointer: "/type", SubjectPointer: "/sub"},
		{Format: FormatJSON, KeyStrategy: StrategyContentHash, TypePointer: "/type", SubjectPointer: "/sub"},
	} {
		rec := Record{Key: []byte("r1"), Value: []byte(`{"id":1,"type":"t","sub":"r1"}`)}
		cfg.Topic = "stripe"
		a, err := NewDecoder(cfg)
		require.NoError(t, err)
		cfg.Topic = "github"
		b, err := NewDecoder(cfg)
		require.NoError(t, err)
		ea, err := a.Decode(rec)
		require.NoError(t, err)
		eb, err := b.Decode(rec)
		require.NoError(t, err)
		require.NotEqual(t, ea.Key, eb.Key, cfg.KeyStrategy)
		require.Equal(t, ea.PayloadHash, eb.PayloadHash)
	}
}

func TestPayloadHashDefinition(t *testing.T) {
	t.Parallel()
	// The documented definition, spelled out: canonical JSON of the four
	// members, version 0 when absent, data null when absent.
	got := hashOf(t, "charge.credited", "acc-1", 0, `{ "currency":"EUR", "amount_cents":1250 }`)
	want := sha256.Sum256([]byte(`{"data":{"amount_cents":1250,"currency":"EUR"},"resourceversion":0,"subject":"acc-1","type":"charge.credited"}`))
	require.Equal(t, want, got)

	got = hashOf(t, "t", "s\n", 5, "")
	want = sha256.Sum256([]byte(`{"data":null,"resourceversion":5,"subject":"s\n","type":"t"}`))
	require.Equal(t, want, got)
}
