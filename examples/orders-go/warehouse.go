package main

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
)

// TargetWarehouse is the warehouse API (targets.warehouse.url, env
// EFFECTIVELY_TARGETS_WAREHOUSE_URL). It honours Idempotency-Key, so the
// outbox may repeat a call after a crash.
const TargetWarehouse = "warehouse"

// OpReserve is the reservation of an order's stock: once per order.placed
// event (the idempotency key derives from the event key and this name).
const OpReserve = "warehouse.reserve"

// reservation is the warehouse's request body.
type reservation struct {
	OrderID    string `json:"order_id"`
	Customer   string `json:"customer"`
	TotalCents int64  `json:"total_cents"`
}

// reserve records the reservation of an order.placed as an outbox intent,
// committed with the event's claim and sent by the dispatcher after the
// commit. A deployment without targets.warehouse.url makes none.
func reserve(fx *handlers.Effects, ev event.Event, s orderState) error {
	body, err := json.Marshal(reservation{OrderID: ev.Subject, Customer: s.Customer, TotalCents: s.TotalCents})
	if err != nil {
		return event.Permanent(err)
	}
	err = fx.Send(handlers.Request{
		Target:    TargetWarehouse,
		Operation: OpReserve,
		Resource:  "warehouse:order:" + ev.Subject,
		Method:    http.MethodPost,
		Path:      "/reservations",
		Body:      body,
	})
	if errors.Is(err, handlers.ErrTargetOff) {
		return nil // an optional side effect: not configured, not made
	}
	return err
}
