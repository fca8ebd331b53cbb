package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
)

// ReasonInvalidLine: an order.line_added's data is not {line_id, sku:
// non-empty strings, quantity: an integer > 0, unit_price_cents: an
// integer ≥ 0}.
const ReasonInvalidLine event.Reason = "invalid_line"

// line is a validated order.line_added.
type line struct {
	ID             string
	SKU            string
	Quantity       int64
	UnitPriceCents int64
}

func parseLine(ev event.Event) (line, error) {
	var raw struct {
		LineID         *string         `json:"line_id"`
		SKU            *string         `json:"sku"`
		Quantity       json.RawMessage `json:"quantity"`
		UnitPriceCents json.RawMessage `json:"unit_price_cents"`
	}
	if err := json.Unmarshal(ev.Data, &raw); err != nil || bytes.Equal(bytes.TrimSpace(ev.Data), []byte("null")) {
		return line{}, invalidLine("%s data must be an object with line_id, sku, quantity and unit_price_cents", ev.Type)
	}
	var l line
	for _, f := range []struct {
		name string
		v    *string
		dst  *string
	}{{"line_id", raw.LineID, &l.ID}, {"sku", raw.SKU, &l.SKU}} {
		if f.v == nil || strings.TrimSpace(*f.v) == "" {
			return line{}, invalidLine("%s data.%s must be a non-empty string", ev.Type, f.name)
		}
		*f.dst = *f.v
	}
	for _, f := range []struct {
		name string
		v    json.RawMessage
		min  int64
		dst  *int64
	}{{"quantity", raw.Quantity, 1, &l.Quantity}, {"unit_price_cents", raw.UnitPriceCents, 0, &l.UnitPriceCents}} {
		if f.v == nil {
			return line{}, invalidLine("%s data lacks %s", ev.Type, f.name)
		}
		n, ok := integer(f.v)
		if !ok || n < f.min || (f.name == "quantity" && n > 1<<31-1) {
			return line{}, invalidLine("%s data.%s must be an integer ≥ %d, got %s", ev.Type, f.name, f.min, event.Excerpt(string(f.v)))
		}
		*f.dst = n
	}
	return l, nil
}

func invalidLine(format string, args ...any) error {
	return event.PermanentWithReason(ReasonInvalidLine, fmt.Errorf(format, args...))
}

// linesTable is the ledger pattern: one row per event key, so a line is
// never written twice (a replay after the claim expired inserts nothing).
// The order exists: the engine parks lines until it does, and writes
// orders before lines (the foreign key orders the tables).
var linesTable = &handlers.Table{
	Name:    "order_lines",
	Key:     []string{"event_key"},
	Columns: []string{"order_id", "line_id", "sku", "quantity", "unit_price_cents"},
}

// validateLine dead-letters an invalid line at once, before the gate, even
// while its order does not exist yet (it would never apply).
func validateLine(ev event.Event) error {
	_, err := parseLine(ev)
	return err
}

// handleLine applies order.line_added: a relative fact, one row per event.
func handleLine(_ context.Context, fx *handlers.Effects, ev event.Event) error {
	l, err := parseLine(ev)
	if err != nil {
		return err
	}
	return fx.InsertOnce(linesTable, ev.Key, ev.Subject, l.ID, l.SKU, l.Quantity, l.UnitPriceCents)
}
