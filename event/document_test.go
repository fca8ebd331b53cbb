package event

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
	"unsafe"

	"github.com/stretchr/testify/require"
)

const documentText = `{"order": {"id": "o-1", "total": 12.50, "paid": true, "note": null,
  "lines": [{"sku": "a", "qty": 3}, {"sku": "b\u00e9\n", "qty": -1e3}], "empty": {}, "none": [],
  "a\/b": 1, "m~n": 2, "dup": "first", "dup": "second", "\u0061b": "escaped name"}, "n": 0}`

func TestDocumentReadsByPointer(t *testing.T) {
	t.Parallel()
	doc, err := ParseDocument([]byte(documentText))
	require.NoError(t, err)
	require.Equal(t, KindObject, doc.Root().Kind())
	for _, c := range []struct {
		tokens []string
		kind   Kind
		text   string
		raw    string
	}{
		{nil, KindObject, "", documentText},
		{[]string{"order", "id"}, KindString, "o-1", `"o-1"`},
		{[]string{"order", "total"}, KindNumber, "12.50", "12.50"},
		{[]string{"order", "paid"}, KindBool, "true", "true"},
		{[]string{"order", "note"}, KindNull, "", "null"},
		{[]string{"order", "lines", "1", "sku"}, KindString, "bé\n", `"b\u00e9\n"`},
		{[]string{"order", "lines", "1", "qty"}, KindNumber, "-1e3", "-1e3"},
		{[]string{"order", "lines", "0"}, KindObject, "", `{"sku": "a", "qty": 3}`},
		{[]string{"order", "empty"}, KindObject, "", "{}"},
		{[]string{"order", "none"}, KindArray, "", "[]"},
		{[]string{"order", "a/b"}, KindNumber, "1", "1"},           // a name with an escaped solidus
		{[]string{"order", "m~n"}, KindNumber, "2", "2"},           // tokens are unescaped already
		{[]string{"order", "dup"}, KindString, "first", `"first"`}, // the first of repeated names
		{[]string{"order", "ab"}, KindString, "escaped name", `"escaped name"`},
		{[]string{"n"}, KindNumber, "0", "0"},
	} {
		v, ok := doc.Get(c.tokens...)
		require.True(t, ok, "%q", c.tokens)
		require.Equal(t, c.kind, v.Kind(), "%q", c.tokens)
		require.Equal(t, c.text, v.Text(), "%q", c.tokens)
		require.Equal(t, c.raw, string(v.Raw()), "%q", c.tokens)
	}
	for _, tokens := range [][]string{
		{"missing"}, {"order", "lines", "2"}, {"order", "lines", "01"}, {"order", "lines", "-"}, {"order", "lines", "x"},
		{"order", "id", "x"}, {"order", "empty", "x"}, {"order", "none", "0"}, {"n", "0"}, {"order", "lines", "99999999999"},
	} {
		v, ok := doc.Get(tokens...)
		require.False(t, ok, "%q", tokens)
		require.Equal(t, Value{}, v)
	}
	// A value reads on from itself as the document does from its root.
	lines, ok := doc.Get("order", "lines")
	require.True(t, ok)
	qty, ok := lines.Get("0", "qty")
	require.True(t, ok)
	require.Equal(t, "3", qty.Text())
}

// Raw is the data's own bytes, never a copy: a jsonb column of a
// megabyte costs nothing to read.
func TestDocumentRawAliasesTheData(t *testing.T) {
	data := []byte(`{"items": [` + strings.Repeat(`{"sku": "x"},`, 1000) + `{"sku": "y"}]}`)
	doc, err := ParseDocument(data)
	require.NoError(t, err)
	items, ok := doc.Get("items")
	require.True(t, ok)
	raw := items.Raw()
	start := uintptr(unsafe.Pointer(unsafe.SliceData(raw))) - uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	require.Equal(t, uintptr(bytes.Index(data, []byte("["))), start, "a sub-slice of the data")
	require.True(t, json.Valid(raw))
	allocs := testing.AllocsPerRun(100, func() {
		v, _ := doc.Get("items", "1000", "sku")
		_ = v.Raw()
	})
	require.Zero(t, allocs, "reading a value allocates nothing")
}

// The zero Value is an absent value.
func TestDocumentZeroValue(t *testing.T) {
	t.Parallel()
	var v Value
	require.Equal(t, KindNull, v.Kind())
	require.Nil(t, v.Raw())
	require.Empty(t, v.Text())
	_, ok := v.Get()
	require.False(t, ok)
}

func TestParseDocumentRefusesWhatIsNotJSON(t *testing.T) {
	t.Parallel()
	for _, data := range []string{"", "[1,2", `{"a":}`, "{\"a\":\"\xff\"}", `{"a":1} x`, strings.Repeat("[", MaxNesting+1) + strings.Repeat("]", MaxNesting+1)} {
		_, err := ParseDocument([]byte(data))
		require.Error(t, err, "%q", data)
	}
	_, err := ParseDocument(nil) // an event without data
	require.Error(t, err)
	doc, err := ParseDocument([]byte(strings.Repeat("[", MaxNesting) + strings.Repeat("]", MaxNesting)))
	require.NoError(t, err, "MaxNesting levels are allowed")
	require.Equal(t, KindArray, doc.Root().Kind())
}

// What a Document reads is what encoding/json reads, for every value of
// any text both accept.
func FuzzDocument(f *testing.F) {
	for _, tc := range decodeCases() {
		f.Add(tc.rec.Value)
	}
	f.Add([]byte(documentText))
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := ParseDocument(data)
		if !utf8.Valid(data) || !json.Valid(data) {
			require.Error(t, err, "accepted text that is not JSON")
			return
		}
		if err != nil {
			require.Greater(t, jsonDepth(data), MaxNesting, "valid JSON refused: %v", err)
			return
		}
		if len(doc.d.issues) > 0 {
			return // repeated names, lone surrogates: encoding/json reads them otherwise
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var tree any
		require.NoError(t, dec.Decode(&tree))
		budget := 2000
		compareDocument(t, doc.Root(), tree, nil, &budget)
	})
}

// compareDocument compares v, reached by path, with encoding/json's value
// of it, and their members and elements, up to budget values.
func compareDocument(t *testing.T, v Value, want any, path []string, budget *int) {
	if *budget--; *budget < 0 {
		return
	}
	switch w := want.(type) {
	case nil:
		require.Equal(t, KindNull, v.Kind(), "%q", path)
	case bool:
		require.Equal(t, KindBool, v.Kind(), "%q", path)
		require.Equal(t, strconv.FormatBool(w), v.Text(), "%q", path)
	case json.Number:
		require.Equal(t, KindNumber, v.Kind(), "%q", path)
		require.Equal(t, w.String(), v.Text(), "%q", path)
	case string:
		require.Equal(t, KindString, v.Kind(), "%q", path)
		require.Equal(t, w, v.Text(), "%q", path)
	case []any:
		require.Equal(t, KindArray, v.Kind(), "%q", path)
		for i, e := range w {
			if *budget < 0 {
				return
			}
			ev, ok := v.Get(strconv.Itoa(i))
			require.True(t, ok, "%q[%d]", path, i)
			compareDocument(t, ev, e, append(path, strconv.Itoa(i)), budget)
		}
		_, ok := v.Get(strconv.Itoa(len(w)))
		require.False(t, ok, "%q has an element past its end", path)
	case map[string]any:
		require.Equal(t, KindObject, v.Kind(), "%q", path)
		for name, m := range w {
			if *budget < 0 {
				return
			}
			mv, ok := v.Get(name)
			require.True(t, ok, "%q.%q", path, name)
			compareDocument(t, mv, m, append(path, name), budget)
		}
	}
	if len(path) < 3 {
		require.True(t, json.Valid(v.Raw()), "%q: raw %q", path, v.Raw())
	}
}

// requireDocumentOfData checks that ev.Document — the decoder's index,
// rebased to Data when it was kept — reads what encoding/json reads from
// ev.Data.
func requireDocumentOfData(t *testing.T, ev Event) {
	t.Helper()
	doc, err := ev.Document()
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(ev.Data))
	dec.UseNumber()
	var tree any
	require.NoError(t, dec.Decode(&tree))
	budget := 2000
	compareDocument(t, doc.Root(), tree, nil, &budget)
	require.Equal(t, string(bytes.TrimSpace(ev.Data)), string(doc.Root().Raw()))
}

// The decoder keeps its index of a small event's data with the event, in
// every mode: Document then parses nothing and allocates nothing, and
// reads what a parse of Data reads. A large payload, or one whose index
// would outweigh it, is parsed when asked for; so is a Data replaced
// since (a prefetcher's).
func TestEventDocumentIsTheDecodersIndex(t *testing.T) {
	data := `{"order": {"id": "o-1", "lines": [{"sku": "a", "qty": 3}, {"sku": "b", "qty": 1}], "total": "12.50"}, "tags": ["x"]}`
	structured, err := NewDecoder(DecoderConfig{Topic: "t"})
	require.NoError(t, err)
	webhook, err := NewDecoder(DecoderConfig{Topic: "t", Format: FormatJSON, KeyStrategy: StrategyField, KeyPointer: "/order/id",
		TypePointer: "/tags/0", SubjectPointer: "/order/id"})
	require.NoError(t, err)
	envelope := func(data string) Record {
		return Record{Topic: "t", Key: []byte("o-1"), Value: []byte(`{"specversion": "1.0", "id": "e1", "source": "s", "type": "x",
		  "subject": "o-1", "time": "2026-01-02T03:04:05Z", "data": ` + data + `, "ext": "after the data"}`)}
	}
	binary := func(data string) Record {
		return Record{Topic: "t", Key: []byte("o-1"), Value: []byte(data), Headers: []Header{{Key: "ce_specversion", Value: []byte("1.0")},
			{Key: "ce_id", Value: []byte("e1")}, {Key: "ce_source", Value: []byte("s")}, {Key: "ce_type", Value: []byte("x")}}}
	}
	for _, c := range []struct {
		name string
		dec  *Decoder
		rec  Record
		kept bool
	}{
		{"structured", structured, envelope(data), true},
		{"structured, scalar data", structured, envelope(`"just a string"`), true},
		{"binary", structured, binary("  " + data + " "), true},
		{"format json", webhook, Record{Topic: "t", Key: []byte("o-1"), Value: []byte(data)}, true},
		{"structured, large", structured, envelope(`{"order": {"id": "o-1"}, "pad": "` + strings.Repeat("p", keepMaxData) + `"}`), false},
		{"binary, denser index than data", structured, binary(`[` + strings.Repeat(`{"":0},`, 100) + `{"":0}]`), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ev, err := c.dec.Decode(c.rec)
			require.NoError(t, err)
			require.Equal(t, c.kept, ev.doc != nil, "index kept")
			requireDocumentOfData(t, ev)
			doc, err := ev.Document()
			require.NoError(t, err)
			if c.kept {
				require.Same(t, ev.doc, doc)
				require.Zero(t, testing.AllocsPerRun(50, func() { _, _ = ev.Document() }))
			}
			// A replaced Data is parsed anew, never read through the old index.
			ev.Data = json.RawMessage(`{"order": {"id": "replaced"}}`)
			doc, err = ev.Document()
			require.NoError(t, err)
			id, ok := doc.Get("order", "id")
			require.True(t, ok)
			require.Equal(t, "replaced", id.Text())
		})
	}
}
