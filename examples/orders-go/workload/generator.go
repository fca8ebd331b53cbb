package workload

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"
)

// The event types of the orders domain, as a producer spells them. They are
// written out here rather than imported from the worker: the generator is
// the producer's side of the contract.
const (
	TypePlaced    = "order.placed"
	TypeUpdated   = "order.updated"
	TypeCancelled = "order.cancelled"
	TypeLineAdded = "order.line_added"
)

// ContentType is the content-type header of every generated record:
// CloudEvents in JSON structured mode.
const ContentType = "application/cloudevents+json"

// DefaultSource is the CloudEvents source of generated events.
const DefaultSource = "urn:orders:workload"

// resendWindow is how many of the latest originals a re-send picks from.
const resendWindow = 512

// The shape of an order's life. Not configurable: the verifier does not
// depend on them.
const (
	lineChance   = 0.55 // a change to a placed order adds a line
	cancelChance = 0.05 // ... or cancels it; otherwise it updates it
)

// Config describes a workload.
type Config struct {
	// Orders is how many orders the stream places (≥ 1); placements are
	// spread over the first half of the events.
	Orders int
	// Events is the number of records, re-sends included (≥ 0).
	Events int
	// Duplicates is the fraction of records that re-send an earlier one,
	// from 0 up to (not including) 1.
	Duplicates float64
	// OutOfOrder is the fraction of events swapped with their order's next
	// event, from 0 to 0.5.
	OutOfOrder float64
	// Orphans is how many of the events are lines of orders that never
	// arrive (each its own order): the worker keeps them parked.
	Orphans int
	// Seed selects the stream; it is part of every event and order ID, so
	// streams of different seeds never share one.
	Seed uint64
	// Source is the CloudEvents source; empty selects DefaultSource.
	Source string
	// StartTime is the first record's timestamp; the others follow a
	// millisecond apart. Zero selects the time of the call.
	StartTime time.Time
}

// Validate reports the first field out of range, named as the produce
// command's flag.
func (c Config) Validate() error {
	switch {
	case c.Orders < 1:
		return fmt.Errorf("orders %d: want at least 1", c.Orders)
	case c.Events < 0:
		return fmt.Errorf("events %d: want 0 or more", c.Events)
	case !(c.Duplicates >= 0 && c.Duplicates < 1):
		return fmt.Errorf("duplicates %v: want a fraction from 0 up to (not including) 1", c.Duplicates)
	case !(c.OutOfOrder >= 0 && c.OutOfOrder <= 0.5):
		return fmt.Errorf("out-of-order %v: want a fraction from 0 to 0.5 (a swap moves two events)", c.OutOfOrder)
	case c.Orphans < 0:
		return fmt.Errorf("orphans %d: want 0 or more", c.Orphans)
	}
	return nil
}

// Record is one generated Kafka record.
type Record struct {
	// Key is the order ID, equal to the event's subject.
	Key []byte
	// Value is the CloudEvent, JSON structured mode.
	Value []byte
	// Timestamp is the record timestamp.
	Timestamp time.Time
	// Type is the event type (for tests that pick records by type).
	Type string
	// Resend marks a re-send of an earlier record.
	Resend bool
}

// kind is what a logical event does.
type kind uint8

const (
	kindPlaced kind = iota
	kindUpdated
	kindCancelled
	kindLine
)

var typeOf = [...]string{TypePlaced, TypeUpdated, TypeCancelled, TypeLineAdded}

func (k kind) absolute() bool { return k != kindLine }

// logical is one distinct event before it becomes bytes.
type logical struct {
	seq     int // its number in the stream as generated; part of its id
	order   string
	kind    kind
	orphan  bool
	version int64 // absolute events only
	state   Order // absolute events only
	line    Line  // lines only
	lineID  string
}

// ceEvent is a CloudEvent in JSON structured mode.
type ceEvent struct {
	SpecVersion     string `json:"specversion"`
	ID              string `json:"id"`
	Source          string `json:"source"`
	Type            string `json:"type"`
	Subject         string `json:"subject"`
	Time            string `json:"time"`
	DataContentType string `json:"datacontenttype"`
	ResourceVersion int64  `json:"resourceversion,omitempty"`
	Data            any    `json:"data"`
}

// orderData is the data of order.placed, order.updated and order.cancelled:
// the order's whole state (absolute: an update is not a patch).
type orderData struct {
	Customer   string `json:"customer"`
	TotalCents int64  `json:"total_cents"`
}

// lineData is the data of order.line_added.
type lineData struct {
	LineID         string `json:"line_id"`
	SKU            string `json:"sku"`
	Quantity       int    `json:"quantity"`
	UnitPriceCents int64  `json:"unit_price_cents"`
}

// Generate returns cfg's records in the order to produce them, and the end
// state a correct worker reaches after applying them all.
func Generate(cfg Config) ([]Record, Expected, error) {
	if err := cfg.Validate(); err != nil {
		return nil, Expected{}, err
	}
	if cfg.Source == "" {
		cfg.Source = DefaultSource
	}
	if cfg.StartTime.IsZero() {
		cfg.StartTime = time.Now()
	}
	start := cfg.StartTime.UTC().Truncate(time.Millisecond)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6f7264657273)) // "orders"

	resends := int(math.Round(float64(cfg.Events) * cfg.Duplicates))
	if cfg.Events > 0 {
		resends = min(resends, cfg.Events-1) // the first record is an original
	}
	distinct := cfg.Events - resends
	evs := logicalStream(rng, cfg, distinct)
	swaps := disorder(rng, evs, cfg.OutOfOrder)

	exp := newExpected()
	exp.OutOfOrder = swaps
	recs := make([]Record, 0, cfg.Events)
	var window []int // indexes in recs of recent originals
	next := 0
	for left := cfg.Events; left > 0; left-- {
		ts := start.Add(time.Duration(len(recs)) * time.Millisecond)
		if len(window) > 0 && rng.IntN(left) < resends {
			orig := recs[window[rng.IntN(len(window))]]
			recs = append(recs, Record{Key: orig.Key, Value: orig.Value, Timestamp: ts, Type: orig.Type, Resend: true})
			resends--
			exp.Duplicates++
			continue
		}
		ev := evs[next]
		next++
		value, err := ev.encode(cfg.Seed, cfg.Source, ts)
		if err != nil {
			return nil, Expected{}, err
		}
		recs = append(recs, Record{Key: []byte(ev.order), Value: value, Timestamp: ts, Type: typeOf[ev.kind]})
		exp.add(ev)
		window = append(window, len(recs)-1)
		if len(window) > resendWindow {
			window = window[1:]
		}
	}
	if next != len(evs) {
		return nil, Expected{}, errors.New("workload: internal error: not every event was emitted")
	}
	exp.Records = len(recs)
	return recs, exp, nil
}

// logicalStream makes n distinct events: orders placed evenly over the
// first half, each change picking a placed order at random; orphans at
// random places.
func logicalStream(rng *rand.Rand, cfg Config, n int) []logical {
	orphans := min(cfg.Orphans, n)
	regular := n - orphans
	orders := min(cfg.Orders, regular)
	span := max(regular/2, 1)
	type orderGen struct {
		id      string
		version int64
		state   Order
	}
	var placed []*orderGen
	evs := make([]logical, 0, n)
	for i := 0; i < regular; i++ {
		ev := logical{seq: i}
		if len(placed) < orders && (len(placed) == 0 || i >= len(placed)*span/orders) {
			o := &orderGen{id: fmt.Sprintf("ord-%d-%d", cfg.Seed, len(placed)), version: 1}
			o.state = Order{Version: 1, Customer: customer(rng), TotalCents: 100 + rng.Int64N(99_900), Status: StatusOpen}
			placed = append(placed, o)
			ev.order, ev.kind, ev.version, ev.state = o.id, kindPlaced, 1, o.state
			evs = append(evs, ev)
			continue
		}
		o := placed[rng.IntN(len(placed))]
		ev.order = o.id
		switch r := rng.Float64(); {
		case r < lineChance:
			ev.kind = kindLine
			ev.lineID = fmt.Sprintf("line-%d-%d", cfg.Seed, i)
			ev.line = Line{OrderID: o.id, SKU: "SKU-" + strconv.Itoa(1+rng.IntN(200)), Quantity: 1 + rng.IntN(5), UnitPriceCents: 100 + rng.Int64N(19_900)}
		default:
			ev.kind = kindUpdated
			status := StatusOpen
			if r >= 1-cancelChance {
				ev.kind, status = kindCancelled, StatusCancelled
			}
			o.version++
			// The whole state: a new total, sometimes a new customer.
			c := o.state.Customer
			if rng.IntN(4) == 0 {
				c = customer(rng)
			}
			o.state = Order{Version: o.version, Customer: c, TotalCents: 100 + rng.Int64N(99_900), Status: status}
			ev.version, ev.state = o.version, o.state
		}
		evs = append(evs, ev)
	}
	for j := range orphans {
		id := fmt.Sprintf("ord-%d-lost-%d", cfg.Seed, j)
		ev := logical{seq: regular + j, order: id, kind: kindLine, orphan: true,
			lineID: fmt.Sprintf("line-%d-lost-%d", cfg.Seed, j),
			line:   Line{OrderID: id, SKU: "SKU-0", Quantity: 1, UnitPriceCents: 100}}
		at := rng.IntN(len(evs) + 1)
		evs = append(evs, logical{})
		copy(evs[at+1:], evs[at:])
		evs[at] = ev
	}
	return evs
}

// disorder swaps a fraction p of the events with their order's next event
// (a swapped pair is not swapped again) and returns the number of swaps.
// Swapping order.placed with a line makes the line arrive before its order
// exists; swapping two versions makes the older one stale.
func disorder(rng *rand.Rand, evs []logical, p float64) int {
	if p == 0 {
		return 0
	}
	positions := map[string][]int{}
	for i, ev := range evs {
		positions[ev.order] = append(positions[ev.order], i)
	}
	cursor := map[string]int{} // per order: the index in positions of the next event
	moved := make([]bool, len(evs))
	swaps := 0
	for i := range evs {
		o := evs[i].order
		k := cursor[o]
		cursor[o] = k + 1
		if moved[i] || k+1 >= len(positions[o]) || rng.Float64() >= p {
			continue
		}
		j := positions[o][k+1]
		evs[i], evs[j] = evs[j], evs[i]
		moved[j] = true
		swaps++
	}
	return swaps
}

func customer(rng *rand.Rand) string { return "cust-" + strconv.Itoa(1+rng.IntN(500)) }

// encode renders ev as a CloudEvent with the given record time.
func (ev logical) encode(seed uint64, source string, t time.Time) ([]byte, error) {
	ce := ceEvent{
		SpecVersion: "1.0", ID: fmt.Sprintf("oe-%d-%d", seed, ev.seq), Source: source,
		Type: typeOf[ev.kind], Subject: ev.order, Time: t.Format("2006-01-02T15:04:05.000Z07:00"),
		DataContentType: "application/json",
	}
	if ev.kind.absolute() {
		ce.ResourceVersion = ev.version
		ce.Data = orderData{Customer: ev.state.Customer, TotalCents: ev.state.TotalCents}
	} else {
		ce.Data = lineData{LineID: ev.lineID, SKU: ev.line.SKU, Quantity: ev.line.Quantity, UnitPriceCents: ev.line.UnitPriceCents}
	}
	b, err := json.Marshal(ce)
	if err != nil {
		return nil, fmt.Errorf("encoding event %s: %w", ce.ID, err)
	}
	return b, nil
}
