// Command catalog is a build of effectively for a product catalog whose
// topic is Avro or Protobuf in the Confluent wire format, with its schemas
// in a schema registry: a Go handler per event type, reading each record
// either into a type of its own (Event.Unmarshal: an Avro struct) or as
// the generic value every format decodes to (Event.Document: the JSON
// form), and writing a version-gated products table and one history row
// per product version (the tables of examples/products, whose migrations
// it embeds).
//
// The topic's settings (format, pointers, key strategy) and the registry's
// URL are configuration, as for the stock binary:
//
//	topics:
//	  - name: catalog.products
//	    format: avro            # or protobuf
//	    key_strategy: natural
//	    natural_key: [/sku, /version]
//	    type_pointer: /type
//	    subject_pointer: /sku
//	    version_pointer: /version
//	schema_registry:
//	  url: http://127.0.0.1:18081/apis/ccompat/v7
package main

import (
	"context"
	"fmt"
	"math/big"
	"time"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/examples/products"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/service"
)

func main() { newApp().Main() }

// TypeProductUpdated is the catalog's one event type: a product's whole
// state at a version.
const TypeProductUpdated = "product.updated"

func newApp() *service.App {
	app := service.New("catalog")
	app.HandleFunc(TypeProductUpdated, handleProduct)
	app.Table(productsTable)
	app.Table(productEventsTable)
	app.Migrations(products.Migrations("catalog"))
	app.Defaults(func(c *config.Config) {
		c.Kafka.Topics = []string{"catalog.products"}
		c.Kafka.Group = "catalog"
		c.Kafka.ClientID = "catalog"
	})
	return app
}

var productsTable = &handlers.Table{
	Name:    "products",
	Key:     []string{"sku"},
	Version: "version",
	Columns: []string{"name", "price", "updated_at", "launch", "color"},
}

var productEventsTable = &handlers.Table{
	Name:    "product_events",
	Key:     []string{"event_key"},
	Columns: []string{"sku", "version", "price"},
}

// product is a product version as the Avro schema writes it. Fields the
// writer's schema lacks stay zero: color, added in the schema's v2, is ""
// for records written with v1.
type product struct {
	SKU       string    `avro:"sku"`
	Name      string    `avro:"name"`
	Price     *big.Rat  `avro:"price"`
	UpdatedAt time.Time `avro:"updated_at"`
	Launch    time.Time `avro:"launch"`
	Color     string    `avro:"color"`
}

// handleProduct writes the product's row if its version is the newest
// seen, and its history row once.
func handleProduct(_ context.Context, fx *handlers.Effects, ev event.Event) error {
	p, err := decode(ev)
	if err != nil {
		return err
	}
	var color any
	if p.Color != "" {
		color = p.Color
	}
	price := p.Price.FloatString(2)
	if err := fx.Upsert(productsTable, ev.Version, ev.Subject, p.Name, price, p.UpdatedAt, p.Launch, color); err != nil {
		return err
	}
	return fx.InsertOnce(productEventsTable, ev.Key, ev.Subject, ev.Version, price)
}

// decode reads a product version: an Avro record into the generated-style
// struct, anything else from the generic JSON value.
func decode(ev event.Event) (product, error) {
	var p product
	if ev.Wire != nil && ev.Wire.Format == event.FormatAvro {
		if err := ev.Unmarshal(&p); err != nil {
			return product{}, invalid("%v", err)
		}
	} else {
		doc, err := ev.Document()
		if err != nil {
			return product{}, invalid("%v", err)
		}
		text := func(name string) string {
			v, _ := doc.Get(name)
			if v.Kind() == event.KindNull {
				return ""
			}
			return v.Text()
		}
		p.Name, p.Color = text("name"), text("color")
		var ok bool
		if p.Price, ok = new(big.Rat).SetString(text("price")); !ok {
			return product{}, invalid("price %s is not a decimal", event.Excerpt(text("price")))
		}
		if p.UpdatedAt, err = time.Parse(time.RFC3339Nano, text("updated_at")); err != nil {
			return product{}, invalid("updated_at: %v", err)
		}
		if p.Launch, err = time.Parse(time.DateOnly, text("launch")); err != nil {
			return product{}, invalid("launch: %v", err)
		}
	}
	switch {
	case p.Name == "":
		return product{}, invalid("the product has no name")
	case p.Price == nil:
		return product{}, invalid("the product has no price")
	}
	return p, nil
}

// invalid is a product event whose values the tables cannot take (a price
// that is no decimal, a missing name): dead-lettered as handler_error.
func invalid(format string, args ...any) error {
	return event.Permanent(fmt.Errorf("invalid product: "+format, args...))
}
