package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
)

// An absolute-state event: the row changes only when the event's version
// is newer than the stored one; otherwise the event is stale.
func ExampleAppliedOrStale() {
	var reg handlers.Registry
	reg.HandleFunc("price.changed", func(_ context.Context, fx *handlers.Effects, ev event.Event) error {
		var p struct {
			Cents int64 `json:"cents"`
		}
		if err := json.Unmarshal(ev.Data, &p); err != nil || p.Cents <= 0 {
			return event.PermanentWithReason("invalid_price", fmt.Errorf("price.changed needs cents > 0"))
		}
		fx.Exec(handlers.AppliedOrStale, `
INSERT INTO prices (sku, version, cents) VALUES ($1, $2, $3)
ON CONFLICT (sku) DO UPDATE SET version = excluded.version, cents = excluded.cents
WHERE prices.version < excluded.version`, ev.Subject, ev.Version, p.Cents)
		return nil
	})
}

// Relative facts wait for their resource: a payment for an invoice not yet
// issued is parked, in offset order, and applied in the transaction that
// issues the invoice.
func ExampleRegistry_Require() {
	var reg handlers.Registry
	reg.HandleFunc("invoice.issued", func(_ context.Context, fx *handlers.Effects, ev event.Event) error {
		fx.Exec(nil, `INSERT INTO invoices (id) VALUES ($1) ON CONFLICT DO NOTHING`, ev.Subject)
		return nil
	})
	reg.HandleFunc("payment.received", func(_ context.Context, fx *handlers.Effects, ev event.Event) error {
		// One row per event key: a replay writes nothing twice.
		fx.Exec(nil, `INSERT INTO payments (event_key, invoice_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, ev.Key, ev.Subject)
		return nil
	})
	reg.Require(handlers.Prerequisite{
		Name:      "invoice",
		ExistsSQL: `SELECT id FROM invoices WHERE id = ANY($1)`,
		CreatedBy: []string{"invoice.issued"},
		Waiting:   []string{"payment.received"},
	})
}

// A side effect leaves through the outbox: recorded with the effect, sent
// after the commit, to a target whose URL is configuration
// (targets.notify.url).
func ExampleEffects_Send() {
	var reg handlers.Registry
	reg.Target("notify", handlers.RecordedIntent) // no idempotency support: at most once, recorded intent
	reg.HandleFunc("invoice.issued", func(_ context.Context, fx *handlers.Effects, ev event.Event) error {
		body, _ := json.Marshal(map[string]string{"invoice": ev.Subject})
		return fx.Send(handlers.Request{Target: "notify", Operation: "notify.invoice_issued",
			Resource: "invoice:" + ev.Subject, Method: http.MethodPost, Path: "/messages", Body: body})
	})
}
