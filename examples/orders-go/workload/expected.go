package workload

import (
	"encoding/json"
	"fmt"
	"os"
)

// Order statuses: open after order.placed or order.updated, cancelled after
// order.cancelled — whichever has the highest version.
const (
	StatusOpen      = "open"
	StatusCancelled = "cancelled"
)

// Order is an order's expected row.
type Order struct {
	Version    int64  `json:"version"`
	Customer   string `json:"customer"`
	TotalCents int64  `json:"total_cents"`
	Status     string `json:"status"`
}

// Line is an order line's expected row.
type Line struct {
	OrderID        string `json:"order_id"`
	SKU            string `json:"sku"`
	Quantity       int    `json:"quantity"`
	UnitPriceCents int64  `json:"unit_price_cents"`
}

// Expected is the end state of a workload, computed from its events alone.
type Expected struct {
	// Records is the number of records, re-sends included.
	Records int `json:"records"`
	// Distinct is the number of distinct events: one claim each.
	Distinct int `json:"distinct"`
	// Duplicates is the number of re-sent records.
	Duplicates int `json:"duplicates"`
	// OutOfOrder is the number of swaps.
	OutOfOrder int `json:"out_of_order"`
	// Placed is the number of distinct order.placed events: one warehouse
	// reservation each, even when its state arrives stale (the order was
	// placed).
	Placed int `json:"placed"`
	// Stale is the number of order events that arrive after a newer
	// version of their order: claimed as stale, no effect.
	Stale int `json:"stale"`
	// LinesEarly is the number of lines that arrive before any event of
	// their order: parked, then released when the order arrives.
	LinesEarly int `json:"lines_early"`
	// Orders are the expected order rows by ID.
	Orders map[string]Order `json:"orders"`
	// Lines are the expected order_lines rows by line ID.
	Lines map[string]Line `json:"lines"`
	// Parked are the orphan lines by line ID: their order never arrives,
	// so they stay parked and make no row.
	Parked map[string]Line `json:"parked"`
}

func newExpected() Expected {
	return Expected{Orders: map[string]Order{}, Lines: map[string]Line{}, Parked: map[string]Line{}}
}

// Applied is the number of claims that end applied: every distinct event
// but the stale and the parked ones.
func (e Expected) Applied() int { return e.Distinct - e.Stale - len(e.Parked) }

// add applies one original (not a re-send) in arrival order, as the worker
// must: the highest version of an order wins, lines accumulate.
func (e *Expected) add(ev logical) {
	e.Distinct++
	switch {
	case ev.orphan:
		e.Parked[ev.lineID] = ev.line
	case ev.kind == kindLine:
		if _, ok := e.Orders[ev.order]; !ok {
			e.LinesEarly++
		}
		e.Lines[ev.lineID] = ev.line
	default:
		if ev.kind == kindPlaced {
			e.Placed++
		}
		if cur, ok := e.Orders[ev.order]; ok && cur.Version > ev.version {
			e.Stale++
			return
		}
		e.Orders[ev.order] = ev.state
	}
}

// WriteFile writes e as JSON to path.
func (e Expected) WriteFile(path string) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// ReadExpected reads what WriteFile wrote.
func ReadExpected(path string) (Expected, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Expected{}, err
	}
	var e Expected
	if err := json.Unmarshal(b, &e); err != nil {
		return Expected{}, fmt.Errorf("%s: %w", path, err)
	}
	return e, nil
}
