// Command customers-go is a Go build over Debezium change events of a
// source table public.customers (id, name, status): the replica and its
// history that examples/customers keeps by configuration alone, plus what
// configuration cannot do — a side effect once per status transition. When
// a change moves a customer's status to "shipped" (before.status differs
// from after.status), the handler records a call to the notify target in
// the outbox, in the same transaction as the change's claim: once per
// transition, however often Debezium re-sends the change and however often
// the worker is killed, and sent after the commit with an Idempotency-Key.
//
// The source table needs REPLICA IDENTITY FULL, so that an update's change
// event carries the row's previous state (before); without it before is
// null and a transition cannot be told from a repeat of the same status:
// the handler then notifies for every update that leaves a row shipped.
//
// Configuration, as for the stock binary:
//
//	kafka:
//	  topics: [src.public.customers]   # Debezium's topic.prefix src
//	topics:
//	  - name: src.public.customers
//	    format: debezium
//	targets:
//	  notify:
//	    url: https://notify.example.com   # honours Idempotency-Key
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/examples/customers"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/service"
)

func main() { newApp().Main() }

// The change events' types: <schema>.<table>.<operation>, read being a
// snapshot row.
const (
	TypeRead   = "public.customers.read"
	TypeCreate = "public.customers.create"
	TypeUpdate = "public.customers.update"
	TypeDelete = "public.customers.delete"
)

// TargetNotify is the notification API (targets.notify.url, env
// EFFECTIVELY_TARGETS_NOTIFY_URL). It honours Idempotency-Key, so the
// outbox may repeat a call caught by a crash.
const TargetNotify = "notify"

// OpShipped is the notification of a transition to "shipped": one outbox
// intent per change event that makes it (the intent's identity is the
// event's key — the change's log position and the row's key — and this
// name).
const OpShipped = "customer.shipped"

// StatusShipped is the status whose arrival is notified.
const StatusShipped = "shipped"

func newApp() *service.App {
	app := service.New("customers")
	for _, typ := range []string{TypeRead, TypeCreate, TypeUpdate, TypeDelete} {
		app.HandleFunc(typ, handleChange)
	}
	app.Table(customersTable)
	app.Table(changesTable)
	app.Target(TargetNotify, handlers.Idempotent)
	app.Migrations(customers.Migrations("customers"))
	app.Defaults(func(c *config.Config) {
		c.Kafka.Topics = []string{"src.public.customers"}
		c.Kafka.Group = "customers-go"
		c.Kafka.ClientID = "customers-go"
		c.Topics = []config.Topic{{Name: "src.public.customers", Format: config.FormatDebezium}}
	})
	return app
}

// customersTable is the replica: a row's newest state in the source's
// commit order (a numeric version column: the event's Version, then its
// Sequence); a delete leaves a tombstone, so an older change cannot bring
// a row back.
var customersTable = &handlers.Table{
	Name:    "customers",
	Key:     []string{"id"},
	Version: "version",
	Columns: []string{"name", "status"},
	Touch:   []string{"updated_at"},
	Deletes: true,
}

// changesTable is the history: one row per change, keyed by its event key,
// and from it each customer's number of changes (each row adds its 1 once).
var changesTable = &handlers.Table{
	Name:    "customer_changes",
	Key:     []string{"event_key"},
	Columns: []string{"id", "lsn", "op", "status", "changes"},
	Totals: []*handlers.Total{{Name: "customer_change_counts", Key: []string{"id"},
		Column: "changes", Delta: "changes", Touch: []string{"updated_at"}}},
}

// customer is a row image of the source table.
type customer struct {
	ID     int64  `json:"id"`
	Name   string `json:"name"`
	Status string `json:"status"`
}

// handleChange applies one change event: the replica's row (gated by the
// change's place in the commit order: Upsert and Delete with the event's
// own Version gate on its Sequence too), its history row once, and the
// notification of a transition to shipped.
func handleChange(_ context.Context, fx *handlers.Effects, ev event.Event) error {
	ch, err := ev.Change()
	if err != nil {
		return event.Permanent(err)
	}
	before, err := image(ch.Before)
	if err != nil {
		return err
	}
	after, err := image(ch.After)
	if err != nil {
		return err
	}
	var status any // a delete's history row has none
	if ch.Op == "d" {
		if before == nil {
			return event.Permanent(errors.New("a delete without the deleted row's key"))
		}
		err = fx.Delete(customersTable, ev.Version, before.ID)
	} else {
		if after == nil {
			return event.Permanent(fmt.Errorf("a change (op %s) without the row's new state", ch.Op))
		}
		status = after.Status
		err = fx.Upsert(customersTable, ev.Version, after.ID, after.Name, after.Status)
	}
	if err != nil {
		return err
	}
	id := after
	if id == nil {
		id = before
	}
	if err := fx.InsertOnce(changesTable, ev.Key, id.ID, ch.LSN, ch.Op, status, 1); err != nil {
		return err
	}
	if ch.Op == "u" && after.Status == StatusShipped && (before == nil || before.Status != StatusShipped) {
		return notifyShipped(fx, *after)
	}
	return nil
}

// image decodes a row image; nil for a null one (before of an insert,
// after of a delete).
func image(v event.Value) (*customer, error) {
	if v.Kind() == event.KindNull {
		return nil, nil
	}
	var c customer
	if err := json.Unmarshal(v.Raw(), &c); err != nil {
		return nil, event.Permanent(fmt.Errorf("a row image of public.customers: %w", err))
	}
	return &c, nil
}

// notification is the notify API's request body.
type notification struct {
	CustomerID int64  `json:"customer_id"`
	Name       string `json:"name"`
	Status     string `json:"status"`
}

// notifyShipped records the notification as an outbox intent. A
// deployment without targets.notify.url sends none.
func notifyShipped(fx *handlers.Effects, c customer) error {
	body, err := json.Marshal(notification{CustomerID: c.ID, Name: c.Name, Status: c.Status})
	if err != nil {
		return event.Permanent(err)
	}
	err = fx.Send(handlers.Request{
		Target:    TargetNotify,
		Operation: OpShipped,
		Resource:  fmt.Sprintf("customer:%d", c.ID),
		Method:    http.MethodPost,
		Path:      "/notifications",
		Body:      body,
	})
	if errors.Is(err, handlers.ErrTargetOff) {
		return nil // an optional side effect: not configured, not made
	}
	return err
}
