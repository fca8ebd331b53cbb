// Package webhooks generates a shop's order webhooks for the orders example
// (examples/orders), as the JSON lines `effectively produce --file` sends,
// and computes — from the webhooks alone — the end state a correct worker
// reaches with the example's configuration. It never reads the worker's
// bookkeeping.
//
// Each order has a created event (version 1), updates with higher versions
// and, for some orders, a deleted event with the highest version. Every
// event carries the whole order, as providers' webhooks do. The stream has
// the trouble the worker must make harmless:
//
//   - duplicates: some webhooks are re-sent later (same id, same bytes);
//   - disorder: some events swap places with their order's next event, so a
//     newer version arrives before an older one (and sometimes an update
//     arrives after its order's deletion);
//   - bad values: some events carry a value that does not fit its column (a
//     total that is not a number, a missing status, a status longer than
//     varchar(20), a total too large for numeric(12,2), a four-letter
//     currency for char(3), a time that is not a time). Each is
//     dead-lettered, whole: neither table gets a row from it.
//
// Records are keyed by order ID, so one order's events share a partition.
package webhooks

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"
)

// Config shapes a generated stream.
type Config struct {
	// Orders is the number of orders.
	Orders int
	// MaxUpdates is the most updates an order gets after its creation
	// (each gets 0 to MaxUpdates); default 4.
	MaxUpdates int
	// Deleted is the share of orders deleted at the end (0–1).
	Deleted float64
	// Duplicates is the share of webhooks re-sent later (0–1).
	Duplicates float64
	// OutOfOrder is the share of events swapped with their order's next
	// event (0–1).
	OutOfOrder float64
	// Bad is the share of events with a bad value (0–1).
	Bad float64
	// Seed makes the stream reproducible.
	Seed uint64
}

// Line is one record, as `effectively produce --file` reads it.
type Line struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
}

// Order is an order's expected row in table orders.
type Order struct {
	ID         string          `json:"id"`
	Version    int64           `json:"version"`
	Status     string          `json:"status"`
	CustomerID string          `json:"customer_id"`
	Email      *string         `json:"email"`
	Total      string          `json:"total"`
	Currency   string          `json:"currency"`
	Items      json.RawMessage `json:"items"`
	Gift       *bool           `json:"gift"`
	PlacedAt   time.Time       `json:"placed_at"`
}

// Event is an expected row of table order_events.
type Event struct {
	ID           string    `json:"event_id"`
	OrderID      string    `json:"order_id"`
	Type         string    `json:"type"`
	OrderVersion int64     `json:"order_version"`
	OccurredAt   time.Time `json:"occurred_at"`
}

// Expected is the end state of a stream, computed from its webhooks alone.
type Expected struct {
	// Records is the number of records, re-sends included.
	Records int `json:"records"`
	// Duplicates is the number of re-sent records.
	Duplicates int `json:"duplicates"`
	// Swaps is the number of events swapped with their order's next one.
	Swaps int `json:"swaps"`
	// LateAfterDelete is the number of valid updates that arrive after
	// their order's deletion (the deletion's tombstone makes them stale).
	LateAfterDelete int `json:"late_after_delete"`
	// Orders are the rows of table orders, by ID: each order at its
	// newest valid version; deleted orders are absent.
	Orders map[string]Order `json:"orders"`
	// Deleted are the orders whose newest valid event is their deletion.
	Deleted []string `json:"deleted"`
	// Events are the rows of table order_events: one per distinct valid
	// webhook, by event ID.
	Events map[string]Event `json:"events"`
	// Bad maps each distinct bad webhook's ID to the column its dead
	// letter must name.
	Bad map[string]string `json:"bad"`
}

// The event types of the example.
const (
	TypeCreated = "order.created"
	TypeUpdated = "order.updated"
	TypeDeleted = "order.deleted"
)

// webhook is a webhook as the provider sends it.
type webhook struct {
	ID        string      `json:"id"`
	Type      string      `json:"type"`
	CreatedAt string      `json:"created_at"`
	Data      webhookData `json:"data"`
}

type webhookData struct {
	Order map[string]any `json:"order"`
}

// event is one generated event before it becomes a record.
type event struct {
	id      string
	orderID string
	typ     string
	version int64
	value   json.RawMessage
	bad     string // the column a bad value's dead letter names; "" when valid
	state   *Order // the row an upsert writes (valid created/updated)
	row     Event
}

var (
	statuses  = []string{"pending", "paid", "packed", "shipped", "delivered", "refunded"}
	currency  = []string{"EUR", "USD", "GBP", "CHF"}
	skus      = []string{"SKU-1", "SKU-7", "SKU-12", "SKU-40", "SKU-99"}
	startTime = time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
)

// badKinds are the bad values an event may carry, each with the column
// its dead letter names. Kinds only an upsert reads apply to created and
// updated events; the last applies to any.
var badKinds = []struct {
	column string
	upsert bool
	spoil  func(w *webhook)
}{
	{"total", true, func(w *webhook) { w.Data.Order["total"] = "12,50" }},
	{"total", true, func(w *webhook) { w.Data.Order["total"] = "123456789012.00" }}, // numeric(12,2)
	{"status", true, func(w *webhook) { delete(w.Data.Order, "status") }},
	{"status", true, func(w *webhook) { w.Data.Order["status"] = "awaiting_manual_fraud_review" }},
	{"currency", true, func(w *webhook) { w.Data.Order["currency"] = "EURO" }},
	{"placed_at", true, func(w *webhook) { w.Data.Order["placed_at"] = "yesterday" }},
	// order_events reads created_at: the orders sink takes the event, the
	// order_events sink refuses it, and the whole event is dead-lettered.
	{"occurred_at", false, func(w *webhook) { w.CreatedAt = "2026-13-45T25:00:00Z" }},
}

// Generate makes cfg's stream and its expected end state.
func Generate(cfg Config) ([]Line, Expected, error) {
	if cfg.Orders <= 0 {
		return nil, Expected{}, fmt.Errorf("webhooks: Orders must be positive, not %d", cfg.Orders)
	}
	if cfg.MaxUpdates == 0 {
		cfg.MaxUpdates = 4
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	exp := Expected{Orders: map[string]Order{}, Events: map[string]Event{}, Bad: map[string]string{}}
	nextID := 0
	clock := startTime

	// Each order's events, in version order.
	queues := make([][]*event, cfg.Orders)
	for o := range cfg.Orders {
		orderID := fmt.Sprintf("ord_%05d", o+1)
		state := Order{
			ID:         orderID,
			CustomerID: fmt.Sprintf("cus_%04d", rng.IntN(cfg.Orders/3+1)),
			Currency:   currency[rng.IntN(len(currency))],
		}
		if rng.IntN(3) > 0 {
			email := fmt.Sprintf("buyer%d@example.com", o+1)
			state.Email = &email
		}
		updates := rng.IntN(cfg.MaxUpdates + 1)
		deleted := rng.Float64() < cfg.Deleted
		n := 1 + updates
		if deleted {
			n++
		}
		for v := int64(1); v <= int64(n); v++ {
			nextID++
			clock = clock.Add(time.Duration(1+rng.IntN(60)) * time.Second)
			ev := &event{id: fmt.Sprintf("evt_%06d", nextID), orderID: orderID, version: v}
			w := webhook{ID: ev.id, CreatedAt: clock.Format(time.RFC3339)}
			switch {
			case v == 1:
				ev.typ = TypeCreated
				state.PlacedAt = clock
			case deleted && v == int64(n):
				ev.typ = TypeDeleted
			default:
				ev.typ = TypeUpdated
			}
			w.Type = ev.typ
			if ev.typ == TypeDeleted {
				w.Data.Order = map[string]any{"id": orderID, "version": v}
			} else {
				state.Version = v
				state.Status = statuses[min(int(v)-1+rng.IntN(2), len(statuses)-1)]
				state.Items, state.Total = items(rng)
				if rng.IntN(4) == 0 {
					gift := rng.IntN(2) == 0
					state.Gift = &gift
				} else {
					state.Gift = nil
				}
				w.Data.Order = orderJSON(state)
				s := state
				ev.state = &s
			}
			if rng.Float64() < cfg.Bad {
				kinds := badKinds
				if ev.typ == TypeDeleted {
					kinds = kinds[len(kinds)-1:]
				}
				k := kinds[rng.IntN(len(kinds))]
				k.spoil(&w)
				ev.bad = k.column
				ev.state = nil
			}
			occurred, _ := time.Parse(time.RFC3339, w.CreatedAt)
			ev.row = Event{ID: ev.id, OrderID: orderID, Type: ev.typ, OrderVersion: v, OccurredAt: occurred}
			b, err := json.Marshal(w)
			if err != nil {
				return nil, Expected{}, err
			}
			ev.value = b
			queues[o] = append(queues[o], ev)
		}
	}

	// The expected end state, from the valid events alone: each order at
	// its highest valid version (absent when that is its deletion).
	for _, q := range queues {
		var newest *event
		for _, ev := range q {
			if ev.bad != "" {
				exp.Bad[ev.id] = ev.bad
				continue
			}
			exp.Events[ev.id] = ev.row
			if newest == nil || ev.version > newest.version {
				newest = ev
			}
		}
		switch {
		case newest == nil:
		case newest.typ == TypeDeleted:
			exp.Deleted = append(exp.Deleted, newest.orderID)
		default:
			exp.Orders[newest.orderID] = *newest.state
		}
	}

	// Interleave the orders; swap some events with their order's next
	// one; re-send some webhooks a little later.
	var stream []*event
	var resend []struct {
		at int
		ev *event
	}
	deletedAt := map[string]bool{}
	for live := cfg.Orders; live > 0; {
		o := rng.IntN(cfg.Orders)
		q := queues[o]
		if len(q) == 0 {
			continue
		}
		if len(q) > 1 && rng.Float64() < cfg.OutOfOrder {
			q[0], q[1] = q[1], q[0]
			exp.Swaps++
		}
		ev := q[0]
		queues[o] = q[1:]
		if len(queues[o]) == 0 {
			live--
		}
		stream = append(stream, ev)
		if ev.typ == TypeDeleted && ev.bad == "" {
			deletedAt[ev.orderID] = true
		} else if deletedAt[ev.orderID] && ev.bad == "" && ev.typ != TypeDeleted {
			exp.LateAfterDelete++
		}
		if rng.Float64() < cfg.Duplicates {
			resend = append(resend, struct {
				at int
				ev *event
			}{len(stream) + 1 + rng.IntN(50), ev})
		}
		for i := 0; i < len(resend); {
			if resend[i].at <= len(stream) {
				stream = append(stream, resend[i].ev)
				exp.Duplicates++
				resend = append(resend[:i], resend[i+1:]...)
				continue
			}
			i++
		}
	}
	for _, r := range resend {
		stream = append(stream, r.ev)
		exp.Duplicates++
	}

	lines := make([]Line, len(stream))
	for i, ev := range stream {
		lines[i] = Line{Key: ev.orderID, Value: ev.value}
	}
	exp.Records = len(lines)
	return lines, exp, nil
}

// orderJSON is the order as the provider's webhook carries it.
func orderJSON(s Order) map[string]any {
	customer := map[string]any{"id": s.CustomerID}
	if s.Email != nil {
		customer["email"] = *s.Email
	}
	m := map[string]any{
		"id":        s.ID,
		"version":   s.Version,
		"status":    s.Status,
		"customer":  customer,
		"total":     s.Total,
		"currency":  s.Currency,
		"items":     s.Items,
		"placed_at": s.PlacedAt.Format(time.RFC3339),
	}
	if s.Gift != nil {
		m["gift"] = *s.Gift
	}
	return m
}

// items makes an order's lines and their total, as a decimal string.
func items(rng *rand.Rand) (json.RawMessage, string) {
	type item struct {
		SKU      string `json:"sku"`
		Quantity int    `json:"quantity"`
		Price    string `json:"price"`
	}
	var lines []item
	var cents int64
	for range 1 + rng.IntN(3) {
		q, p := 1+rng.IntN(4), int64(199+rng.IntN(9800))
		lines = append(lines, item{SKU: skus[rng.IntN(len(skus))], Quantity: q, Price: money(p)})
		cents += int64(q) * p
	}
	b, _ := json.Marshal(lines)
	return b, money(cents)
}

func money(cents int64) string { return fmt.Sprintf("%d.%02d", cents/100, cents%100) }

// Large returns webhook n: the order.created of order id whose items — a
// great many lines — make its record about size bytes, as a provider's
// webhook of a very large order is. It returns the record and the rows it
// leaves: the order at version 1 and its order_events row. The memory
// benchmark (go run ./test/bench -memory) and the large-record tests send
// such webhooks.
func Large(n int, id string, size int) (Line, Order, Event) {
	email := fmt.Sprintf("buyer%d@example.com", n)
	gift := false
	placed := startTime.Add(time.Duration(n) * time.Minute)
	o := Order{ID: id, Version: 1, Status: "paid", CustomerID: fmt.Sprintf("cus_%06d", n), Email: &email,
		Total: money(100_000 + int64(n)), Currency: "EUR", Items: json.RawMessage("[]"), Gift: &gift, PlacedAt: placed}
	w := webhook{ID: fmt.Sprintf("evt_large_%06d", n), Type: TypeCreated, CreatedAt: placed.Add(time.Second).Format(time.RFC3339)}
	w.Data.Order = orderJSON(o)
	empty, _ := json.Marshal(w) // strings, numbers and a raw array: cannot fail
	o.Items = Items(n, size-len(empty)+len("[]"))
	w.Data.Order["items"] = o.Items
	b, _ := json.Marshal(w)
	return Line{Key: id, Value: b}, o, Event{ID: w.ID, OrderID: id, Type: TypeCreated, OrderVersion: 1, OccurredAt: placed.Add(time.Second)}
}

// Items renders the lines of order n as a JSON array of about size bytes
// (one line at least), each shaped as the generated orders' lines are.
func Items(n, size int) json.RawMessage {
	b := make([]byte, 0, size+64)
	b = append(b, '[')
	for i := 0; i == 0 || len(b) < size-64; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"sku":"SKU-%d-%d","quantity":%d,"price":"%s"}`, n, i, 1+i%4, money(199+int64(i%9800)))
	}
	return append(b, ']')
}
