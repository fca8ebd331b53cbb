package event

import (
	"strconv"
	"strings"
	"testing"

	"github.com/effectively-io/effectively/internal/canonicaltree"
)

// The canonical hash benchmarks: bytes allocated and time per payload hash
// (parse and canonicalise data, hash the canonical form) for the shapes
// below, and per Decode of a typical reference event (the hot path: every
// record goes through it). Run them with
//
//	go test -run '^$' -bench 'PayloadHash|Decode|ParseWorst' -benchmem ./event/
//
// docs/explanation/benchmarks.md ("Canonical hash") has the figures.

// typicalEvent is shaped like a record of the reference workload: an
// item.created, 300 bytes.
const typicalEvent = `{"specversion":"1.0","id":"evt-7-000000000042","source":"urn:effectively:workload",` +
	`"type":"item.created","subject":"item-000042","time":"2026-03-01T12:00:02.520Z",` +
	`"datacontenttype":"application/json","resourceversion":1,` +
	`"data":{"name":"Ada Lovelace","email":"ada.lovelace.42@example.com","plan":"pro"}}`

type benchInput struct {
	name string
	data []byte
}

func benchInputs() []benchInput {
	// A deep-ish object: 32 levels, each with a handful of members of
	// every kind and the next level under "child".
	var deep strings.Builder
	for i := range 32 {
		deep.WriteString(`{"name":"level ` + strconv.Itoa(i) + `","n":` + strconv.Itoa(i*37) + `,"ratio":0.` + strconv.Itoa(i+1) +
			`,"tags":["a","b\u00e9",true,null],"z":{"k":1,"j":[1.5e3,-0]},"child":`)
	}
	deep.WriteString(`null`)
	deep.WriteString(strings.Repeat("}", 32))
	return []benchInput{
		{"zeros-1MiB", []byte("[" + strings.Repeat("0,", 512*1024-1) + "0]")},
		{"nested-object", []byte(deep.String())},
		{"typical-data", []byte(`{"name":"Ada Lovelace","email":"ada.lovelace.42@example.com","plan":"pro"}`)},
		{"typical-event", []byte(typicalEvent)},
		{"array-400kB", []byte("[" + strings.Repeat("1,", 200_000) + "1]")},
	}
}

// worstInputs are the densest texts for the index (containers, members,
// issues per byte) and for its presizing (brackets and colons in strings).
func worstInputs() []benchInput {
	var names strings.Builder
	names.WriteByte('{')
	for i := range 100_000 {
		if i > 0 {
			names.WriteByte(',')
		}
		names.WriteString(`"` + strconv.Itoa(i) + `":0`)
	}
	names.WriteByte('}')
	return []benchInput{
		{"empty-arrays-1MiB", []byte("[" + strings.Repeat("[],", 350_000) + "[]]")},
		{"members-1MiB", []byte(names.String())},
		{"repeated-names-1MiB", []byte("{" + strings.Repeat(`"":0,`, 200_000) + `"":0}`)},
		{"lone-surrogates-1MiB", []byte("[" + strings.Repeat(`"\ud800",`, 110_000) + "0]")},
		{"brackets-in-a-string-1MiB", []byte(`"` + strings.Repeat("[{:", 350_000) + `"`)},
	}
}

func BenchmarkDecodeTypical(b *testing.B) {
	benchmarkDecode(b, []byte(typicalEvent))
}

// BenchmarkDecodeLarge decodes a record of 1 MiB: an event whose data is
// [0,0,…].
func BenchmarkDecodeLarge(b *testing.B) {
	value := strings.Replace(typicalEvent, `{"name":"Ada Lovelace","email":"ada.lovelace.42@example.com","plan":"pro"}`,
		"["+strings.Repeat("0,", 512*1024-200)+"0]", 1)
	benchmarkDecode(b, []byte(value))
}

func benchmarkDecode(b *testing.B, value []byte) {
	d, err := NewDecoder(DecoderConfig{Topic: "items"})
	if err != nil {
		b.Fatal(err)
	}
	rec := Record{Topic: "items", Key: []byte("item-000042"), Value: value,
		Headers: []Header{{Key: "content-type", Value: []byte("application/cloudevents+json")}}}
	b.SetBytes(int64(len(rec.Value)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Decode(rec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPayloadHash reports the payload hash of each input (parse,
// canonicalise, hash), streaming and with the tree it replaced: bytes/op
// divided by the input's size is the allocation per input byte.
func BenchmarkPayloadHash(b *testing.B) {
	for _, in := range benchInputs() {
		b.Run(in.name+"/tree", func(b *testing.B) {
			b.SetBytes(int64(len(in.data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := canonicaltree.PayloadHash("item.created", "item-000042", 1, in.data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(in.name+"/stream", func(b *testing.B) {
			b.SetBytes(int64(len(in.data)))
			b.ReportAllocs()
			for b.Loop() {
				doc, err := parseJSON(in.data, MaxNesting)
				if err != nil || len(doc.issues) > 0 {
					b.Fatal(err)
				}
				_ = payloadHash("item.created", "item-000042", 1, doc, doc.root, "")
			}
		})
	}
}

// BenchmarkParseWorst reports what parseJSON allocates for the densest
// texts.
func BenchmarkParseWorst(b *testing.B) {
	for _, in := range worstInputs() {
		b.Run(in.name, func(b *testing.B) {
			b.SetBytes(int64(len(in.data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := parseJSON(in.data, MaxNesting); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
