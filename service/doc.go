// Package service is effectively's public API for a build of its own: the
// composition root that wires the engine (consumer group, one transaction
// per batch, parking, dead letters, outbox, retention) and the command
// line every build shares.
//
// A team writes a short main in its own module:
//
//	app := service.New("orders")
//	app.HandleFunc("order.placed", placeOrder)    // handlers.Registry, embedded
//	app.Require(handlers.Prerequisite{...})       // parking: which events wait for what
//	app.Target("warehouse", handlers.Idempotent)  // a named outbound target (targets.warehouse.url)
//	app.Migrations(schema.Set{Name: "orders", Table: "orders_schema_version", FS: migrations})
//	app.Defaults(func(c *config.Config) { c.Kafka.Topics = []string{"orders"} })
//	app.Main()
//
// and gets the whole product: run, migrate, replay, dlq, parked, outbox,
// audit, prune, produce, config and version, with the same flags,
// configuration keys (EFFECTIVELY_… environment variables), metrics and exit
// codes as the reference build (cmd/effectively, which is the engine plus
// the reference example, wired through this package and nothing else).
//
// Handlers receive newly claimed events only, in offset order, inside the
// batch's transaction; they queue statements on handlers.Effects and never
// call the outside world. Side effects leave through the outbox
// (Effects.Send to a named target); reads of the outside world happen in a
// handlers.Prefetcher before the transaction begins.
package service
