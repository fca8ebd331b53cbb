package sink_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/handling"
	"github.com/effectively-io/effectively/internal/outbox"
	"github.com/effectively-io/effectively/internal/sink"
)

// What a record costs on its way through a config-only sink: the decoder
// (format json, as a provider's webhooks arrive) and the sink's handler,
// which reads every column of two sinks (an upsert with a jsonb column and
// an insert) and queues their rows. bytes/op over the record's size is
// the allocation per input byte. No database: the rows are queued, not
// sent.
//
//	go test -run '^$' -bench SinkHandle -benchmem ./sink/
func BenchmarkSinkHandle(b *testing.B) {
	for _, c := range []struct {
		name  string
		items int
	}{
		{"typical", 3},
		{"items-1MB", 15_400},
	} {
		b.Run(c.name, func(b *testing.B) {
			value := webhook(c.items)
			dec, err := event.NewDecoder(event.DecoderConfig{
				Topic: "shop", Format: event.FormatJSON, KeyStrategy: event.StrategyField, KeyPointer: "/id",
				IDPointer: "/id", TypePointer: "/type", SubjectPointer: "/data/order/id", VersionPointer: "/data/order/version",
			})
			if err != nil {
				b.Fatal(err)
			}
			var reg handlers.Registry
			if _, err := sink.Register(&reg, webhookSinks()); err != nil {
				b.Fatal(err)
			}
			env := handling.Of(&reg).Env(nil, outbox.Expiry{}, nil, 0)
			h, _ := handling.Of(&reg).Handler("order.created")
			rec := event.Record{Topic: "shop", Key: []byte("ord_0007"), Value: value}
			ctx := context.Background()
			b.SetBytes(int64(len(value)))
			b.ReportAllocs()
			for b.Loop() {
				ev, err := dec.Decode(rec)
				if err != nil {
					b.Fatal(err)
				}
				e := handling.NewEffects(env)
				e.Begin(handlers.Origin{Topic: "shop"}, ev)
				if err := h.Handle(ctx, e.Effects(), ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// webhook renders an order webhook as the orders example's provider sends
// it, with n items (about 65 bytes each).
func webhook(n int) []byte {
	b := []byte(`{"id":"evt_0042","type":"order.created","created_at":"2026-01-05T10:00:00Z","data":{"order":{"id":"ord_0007","version":3,` +
		`"status":"paid","customer":{"id":"cus_0001","email":"ada@example.com"},"total":"1234.50","currency":"EUR","items":[`)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"sku":"sku-`...)
		b = strconv.AppendInt(b, int64(100000+i), 10)
		b = append(b, `","name":"Item `...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `","qty":`...)
		b = strconv.AppendInt(b, int64(1+i%5), 10)
		b = append(b, `,"price":"9.99"}`...)
	}
	return append(b, `],"gift":false,"placed_at":"2026-01-05T09:59:00Z"}}}`...)
}

// webhookSinks are the orders example's sinks of order.created
// (examples/orders/effectively.yaml).
func webhookSinks() []config.Sink {
	return []config.Sink{{
		Name: "orders", Topic: "shop", Types: []string{"order.created"}, Table: "orders", Mode: config.SinkUpsert,
		Key: []string{"id"}, Version: "version", Touch: []string{"updated_at"},
		Columns: []config.SinkColumn{
			{Name: "id", From: "subject"},
			{Name: "version", From: "resourceversion"},
			{Name: "status", From: "/data/order/status"},
			{Name: "customer_id", From: "/data/order/customer/id"},
			{Name: "email", From: "/data/order/customer/email", Optional: true},
			{Name: "total", From: "/data/order/total", Type: "numeric"},
			{Name: "currency", From: "/data/order/currency"},
			{Name: "items", From: "/data/order/items", Type: "jsonb"},
			{Name: "gift", From: "/data/order/gift", Type: "boolean", Optional: true},
			{Name: "placed_at", From: "/data/order/placed_at", Type: "timestamptz"},
		},
	}, {
		Name: "order_events", Topic: "shop", Types: []string{"order.created"}, Table: "order_events", Mode: config.SinkInsert,
		Key: []string{"event_key"}, Touch: []string{"received_at"},
		Columns: []config.SinkColumn{
			{Name: "event_key", From: "key"},
			{Name: "event_id", From: "id"},
			{Name: "order_id", From: "subject"},
			{Name: "type", From: "type"},
			{Name: "order_version", From: "resourceversion"},
			{Name: "occurred_at", From: "/created_at", Type: "timestamptz"},
		},
	}}
}
