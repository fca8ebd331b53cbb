package event

import (
	"strconv"
	"strings"
	"testing"
)

// The canonical hash benchmarks: bytes allocated and time per payload hash
// (parse and canonicalise data, hash the canonical form) for the shapes
// below, and per Decode of a typical reference event (the hot path: every
// record goes through it). Run them with
//
//	go test -run '^$' -bench 'PayloadHash|DecodeTypical' -benchmem ./event/
//
// docs/explanation/benchmarks.md ("Canonical hash") has the figures.

// typicalEvent is a record of the reference workload
// (examples/accounts/workload): an account.opened, 300 bytes.
const typicalEvent = `{"specversion":"1.0","id":"evt-7-000000000042","source":"urn:effectively:workload",` +
	`"type":"account.opened","subject":"acct-000042","time":"2026-03-01T12:00:02.520Z",` +
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

func BenchmarkDecodeTypical(b *testing.B) {
	d, err := NewDecoder(DecoderConfig{Topic: "accounts"})
	if err != nil {
		b.Fatal(err)
	}
	rec := Record{Topic: "accounts", Key: []byte("acct-000042"), Value: []byte(typicalEvent),
		Headers: []Header{{Key: "content-type", Value: []byte("application/cloudevents+json")}}}
	b.SetBytes(int64(len(rec.Value)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Decode(rec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPayloadHash reports the payload hash of each input: bytes/op
// divided by the input's size is the allocation per input byte.
func BenchmarkPayloadHash(b *testing.B) {
	for _, in := range benchInputs() {
		b.Run(in.name, func(b *testing.B) {
			b.SetBytes(int64(len(in.data)))
			b.ReportAllocs()
			for b.Loop() {
				doc, err := parseJSON(in.data, MaxNesting+1)
				if err != nil || len(doc.issues) > 0 {
					b.Fatal(err)
				}
				_ = payloadHash("account.opened", "acct-000042", 1, doc, doc.root)
			}
		})
	}
}
