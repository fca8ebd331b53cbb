package service_test

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/schema"
	"github.com/effectively-io/effectively/service"
)

var migrations embed.FS // in a real build: //go:embed migrations/*.sql

// A build of one's own: handlers for a team's event types, its migrations,
// the prerequisite that order lines wait for, and a side effect to a named
// target. app.Main() then runs the whole command line.
func Example() {
	app := service.New("orders")

	// The tables typed effects write; checked against the database at start-up.
	orders := app.Table(&handlers.Table{Name: "orders", Key: []string{"id"}, Version: "version", Columns: []string{"customer"}})
	lines := app.Table(&handlers.Table{Name: "order_lines", Key: []string{"event_key"}, Columns: []string{"order_id", "line"}})

	// Absolute state, version-gated: applied when newer, stale otherwise.
	app.HandleFunc("order.placed", func(ctx context.Context, fx *handlers.Effects, ev event.Event) error {
		var o struct {
			Customer string `json:"customer"`
		}
		if err := json.Unmarshal(ev.Data, &o); err != nil || o.Customer == "" {
			return event.PermanentWithReason("invalid_order", err) // dead-lettered, the partition moves on
		}
		body, _ := json.Marshal(map[string]string{"order": ev.Subject})
		// Recorded with the effect, sent after the commit, with an
		// idempotency key derived from the event. Without
		// targets.warehouse.url it returns ErrTargetOff, which is not
		// permanent: returned, it would retry the batch for ever.
		err := fx.Send(handlers.Request{Target: "warehouse", Operation: "warehouse.reserve",
			Resource: "order:" + ev.Subject, Method: http.MethodPost, Path: "/reservations", Body: body})
		if err != nil && !errors.Is(err, handlers.ErrTargetOff) {
			return err
		}
		// The batch's upserts of orders are one statement; the newest
		// version of each order is written.
		return fx.Upsert(orders, ev.Version, ev.Subject, o.Customer)
	})

	// Relative facts, one row per event: waits (parked) until its order exists.
	app.HandleFunc("order.line_added", func(ctx context.Context, fx *handlers.Effects, ev event.Event) error {
		return fx.InsertOnce(lines, ev.Key, ev.Subject, string(ev.Data))
	})
	app.Require(handlers.Prerequisite{
		Name:      "order",
		ExistsSQL: `SELECT id FROM orders WHERE id = ANY($1)`,
		CreatedBy: []string{"order.placed"},
		Waiting:   []string{"order.line_added"},
	})
	app.Target("warehouse", handlers.Idempotent) // honours Idempotency-Key; URL from targets.warehouse.url

	sub, _ := fs.Sub(migrations, "migrations")
	app.Migrations(schema.Set{Name: "orders", Table: "orders_schema_version", FS: sub})
	app.Defaults(func(c *config.Config) { c.Kafka.Topics = []string{"orders"} })

	_ = app // app.Main() in func main
}
