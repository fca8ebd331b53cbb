package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/event"
)

func TestParseOrder(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		typ     string
		version int64
		data    string
		want    orderState
		reason  event.Reason
	}{
		{name: "placed", typ: TypePlaced, version: 1, data: `{"customer":"c1","total_cents":1250}`, want: orderState{"c1", 1250, "open"}},
		{name: "cancelled", typ: TypeCancelled, version: 3, data: `{"customer":"c1","total_cents":0}`, want: orderState{"c1", 0, "cancelled"}},
		{name: "unknown fields are ignored", typ: TypeUpdated, version: 2, data: `{"customer":"c1","total_cents":5,"note":"x"}`, want: orderState{"c1", 5, "open"}},
		{name: "no version", typ: TypePlaced, data: `{"customer":"c1","total_cents":1}`, reason: ReasonMissingVersion},
		{name: "null", typ: TypePlaced, version: 1, data: `null`, reason: ReasonInvalidOrder},
		{name: "not an object", typ: TypePlaced, version: 1, data: `[1]`, reason: ReasonInvalidOrder},
		{name: "empty customer", typ: TypePlaced, version: 1, data: `{"customer":" ","total_cents":1}`, reason: ReasonInvalidOrder},
		{name: "no total", typ: TypePlaced, version: 1, data: `{"customer":"c1"}`, reason: ReasonInvalidOrder},
		{name: "negative total", typ: TypePlaced, version: 1, data: `{"customer":"c1","total_cents":-1}`, reason: ReasonInvalidOrder},
		{name: "fractional total", typ: TypePlaced, version: 1, data: `{"customer":"c1","total_cents":1.5}`, reason: ReasonInvalidOrder},
		{name: "total as a string", typ: TypePlaced, version: 1, data: `{"customer":"c1","total_cents":"1"}`, reason: ReasonInvalidOrder},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := parseOrder(event.Event{Type: c.typ, Version: c.version, Data: []byte(c.data)})
			if c.reason != "" {
				require.True(t, event.IsPermanent(err), "%v", err)
				require.Equal(t, c.reason, event.ReasonOf(err))
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, s)
		})
	}
}

func TestParseLine(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		data  string
		want  line
		valid bool
	}{
		{name: "line", data: `{"line_id":"l1","sku":"SKU-1","quantity":2,"unit_price_cents":300}`, want: line{"l1", "SKU-1", 2, 300}, valid: true},
		{name: "free", data: `{"line_id":"l1","sku":"SKU-1","quantity":1,"unit_price_cents":0}`, want: line{"l1", "SKU-1", 1, 0}, valid: true},
		{name: "zero quantity", data: `{"line_id":"l1","sku":"SKU-1","quantity":0,"unit_price_cents":300}`},
		{name: "huge quantity", data: `{"line_id":"l1","sku":"SKU-1","quantity":4294967296,"unit_price_cents":300}`},
		{name: "negative price", data: `{"line_id":"l1","sku":"SKU-1","quantity":1,"unit_price_cents":-3}`},
		{name: "no sku", data: `{"line_id":"l1","quantity":1,"unit_price_cents":3}`},
		{name: "no line id", data: `{"sku":"SKU-1","quantity":1,"unit_price_cents":3}`},
		{name: "no price", data: `{"line_id":"l1","sku":"SKU-1","quantity":1}`},
		{name: "null", data: `null`},
		{name: "a string", data: `"line"`},
		{name: "quantity as a string", data: `{"line_id":"l1","sku":"SKU-1","quantity":"2","unit_price_cents":300}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := parseLine(event.Event{Type: TypeLineAdded, Data: []byte(c.data)})
			if !c.valid {
				require.True(t, event.IsPermanent(err), "%v", err)
				require.Equal(t, ReasonInvalidLine, event.ReasonOf(err))
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, l)
		})
	}
}
