package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
)

// The orders domain's event types.
const (
	TypePlaced    = "order.placed"
	TypeUpdated   = "order.updated"
	TypeCancelled = "order.cancelled"
	TypeLineAdded = "order.line_added"
)

// Dead-letter reasons of the orders domain: one per kind of bad input.
const (
	// ReasonInvalidOrder: an order event's data is not {customer: a
	// non-empty string, total_cents: an integer ≥ 0}.
	ReasonInvalidOrder event.Reason = "invalid_order"
	// ReasonMissingVersion: an order event without resourceversion.
	ReasonMissingVersion event.Reason = "missing_version"
)

// orderState is an order's whole state: order events are absolute (an
// update is not a patch), so applying the newest one is all it takes.
type orderState struct {
	Customer   string
	TotalCents int64
	Status     string
}

// parseOrder validates an order event. It runs before anything is queued:
// a handler that queued statements must not fail afterwards.
func parseOrder(ev event.Event) (orderState, error) {
	if ev.Version < 1 {
		return orderState{}, event.PermanentWithReason(ReasonMissingVersion,
			fmt.Errorf("%s needs the resourceversion extension (an integer ≥ 1)", ev.Type))
	}
	var raw struct {
		Customer   *string         `json:"customer"`
		TotalCents json.RawMessage `json:"total_cents"`
	}
	if err := json.Unmarshal(ev.Data, &raw); err != nil || bytes.Equal(bytes.TrimSpace(ev.Data), []byte("null")) {
		return orderState{}, invalidOrder("%s data must be an object with customer and total_cents", ev.Type)
	}
	if raw.Customer == nil || strings.TrimSpace(*raw.Customer) == "" {
		return orderState{}, invalidOrder("%s data.customer must be a non-empty string", ev.Type)
	}
	if raw.TotalCents == nil {
		return orderState{}, invalidOrder("%s data lacks total_cents", ev.Type)
	}
	total, ok := integer(raw.TotalCents)
	if !ok || total < 0 {
		return orderState{}, invalidOrder("%s data.total_cents must be an integer ≥ 0, got %s", ev.Type, event.Excerpt(string(raw.TotalCents)))
	}
	s := orderState{Customer: *raw.Customer, TotalCents: total, Status: "open"}
	if ev.Type == TypeCancelled {
		s.Status = "cancelled"
	}
	return s, nil
}

// integer parses a JSON number that is an integer within 64 bits (not a
// string, not 1.5, not 1e3).
func integer(raw json.RawMessage) (int64, bool) {
	n, err := strconv.ParseInt(string(raw), 10, 64)
	return n, err == nil
}

func invalidOrder(format string, args ...any) error {
	return event.PermanentWithReason(ReasonInvalidOrder, fmt.Errorf(format, args...))
}

// ordersTable is the orders' state, written through the version gate:
// the row changes only when the event's version is newer than the stored
// one; several versions in one batch resolve as if applied one by one.
var ordersTable = &handlers.Table{
	Name:    "orders",
	Key:     []string{"id"},
	Version: "version",
	Columns: []string{"customer", "total_cents", "status"},
	Touch:   []string{"updated_at"},
}

// handleOrder applies order.placed, order.updated and order.cancelled: the
// event's state if it is newer than the stored one (applied), nothing
// otherwise (stale). A newly claimed order.placed also reserves stock at
// the warehouse, even when its state arrives stale: the order was placed.
func handleOrder(_ context.Context, fx *handlers.Effects, ev event.Event) error {
	s, err := parseOrder(ev)
	if err != nil {
		return err
	}
	if ev.Type == TypePlaced {
		// Before the upsert: Send may fail, and a failing handler's
		// effects are discarded anyway, but there is nothing to discard.
		if err := reserve(fx, ev, s); err != nil {
			return err
		}
	}
	return fx.Upsert(ordersTable, ev.Version, ev.Subject, s.Customer, s.TotalCents, s.Status)
}

// orderExists is the prerequisite of order lines: a line waits, parked,
// until its order exists. Any order event creates it (an order.updated may
// arrive before its order.placed).
var orderExists = handlers.Prerequisite{
	Name:      "order",
	ExistsSQL: `SELECT id FROM orders WHERE id = ANY($1)`,
	CreatedBy: []string{TypePlaced, TypeUpdated, TypeCancelled},
	Waiting:   []string{TypeLineAdded},
}
