package accounts_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/examples/accounts"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/cetest"
	"github.com/effectively-io/effectively/internal/handling"
	"github.com/effectively-io/effectively/internal/outbox"
)

// What a record costs on its way through the reference handlers: the
// decoder (structured CloudEvents) and the type's handler, which reads its
// fields from the data and queues its row. Large: the data carries about 1
// MB of items beside those fields. bytes/op over the record's size is the
// allocation per input byte. No database: the rows are queued, not sent.
//
//	go test -run '^$' -bench Handle -benchmem ./examples/accounts/
func BenchmarkHandle(b *testing.B) {
	for _, c := range []struct {
		name, typ  string
		version    int64
		data       map[string]any
		itemsBytes int
	}{
		{"account.opened/typical", accounts.TypeAccountOpened, 1, map[string]any{"name": "Ada Lovelace", "email": "ada@example.com", "plan": "pro"}, 0},
		{"ledger.credited/typical", accounts.TypeLedgerCredited, 0, map[string]any{"amount_cents": 1250, "currency": "EUR"}, 0},
		{"account.opened/items-1MB", accounts.TypeAccountOpened, 1, map[string]any{"name": "Ada Lovelace", "email": "ada@example.com", "plan": "pro"}, 1_000_000},
		{"ledger.credited/items-1MB", accounts.TypeLedgerCredited, 0, map[string]any{"amount_cents": 1250, "currency": "EUR"}, 1_000_000},
	} {
		b.Run(c.name, func(b *testing.B) {
			if c.itemsBytes > 0 {
				const line = `{"sku":"SKU-12","quantity":2,"price":"19.99"},`
				c.data["items"] = json.RawMessage("[" + strings.Repeat(line, c.itemsBytes/len(line)) + "{}]")
			}
			rec := cetest.Record("accounts", "evt-42", c.typ, "acct-42", c.version, c.data)
			dec, err := event.NewDecoder(event.DecoderConfig{Topic: "accounts"})
			if err != nil {
				b.Fatal(err)
			}
			var reg handlers.Registry
			accounts.Register(&reg)
			env := handling.Of(&reg).Env(nil, outbox.Expiry{}, nil, 0)
			h, _ := handling.Of(&reg).Handler(c.typ)
			r := event.Record{Topic: "accounts", Key: rec.Key, Value: rec.Value,
				Headers: []event.Header{{Key: "content-type", Value: []byte("application/cloudevents+json")}}}
			ctx := context.Background()
			b.SetBytes(int64(len(rec.Value)))
			b.ReportAllocs()
			for b.Loop() {
				ev, err := dec.Decode(r)
				if err != nil {
					b.Fatal(err)
				}
				e := handling.NewEffects(env)
				e.Begin(handlers.Origin{Topic: "accounts"}, ev)
				if err := h.Handle(ctx, e.Effects(), ev); err != nil {
					b.Fatal(fmt.Errorf("%s: %w", c.name, err))
				}
			}
		})
	}
}
