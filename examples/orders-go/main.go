package main

import (
	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/service"
)

func main() { newApp().Main() }

// newApp is the build: its handlers, tables, prerequisite, target and
// migrations (the tests use it as the binary does).
func newApp() *service.App {
	app := service.New("orders")
	app.HandleFunc(TypePlaced, handleOrder)
	app.HandleFunc(TypeUpdated, handleOrder)
	app.HandleFunc(TypeCancelled, handleOrder)
	app.Handle(TypeLineAdded, handlers.Validated(validateLine, handleLine))
	app.Table(ordersTable)
	app.Table(linesTable)
	app.Require(orderExists)
	app.Target(TargetWarehouse, handlers.Idempotent) // honours Idempotency-Key; targets.warehouse.url
	app.Migrations(migrations())
	app.Defaults(func(c *config.Config) {
		c.Kafka.Topics = []string{"orders"}
		c.Kafka.Group = "orders"
		c.Kafka.ClientID = "orders"
	})
	app.Workload(&generator{})
	app.Command(verifyCmd)
	return app
}
