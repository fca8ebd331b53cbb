// Package products is the products example's tables: the migrations the
// stock binary applies from examples/products/migrations, embedded for a
// Go build of the same domain (examples/catalog).
package products

import (
	"embed"
	"io/fs"

	"github.com/effectively-io/effectively/schema"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations are the tables products and product_events, as a set named
// name with its own version table.
func Migrations(name string) schema.Set {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		panic(err) // the embed pattern guarantees the folder exists
	}
	return schema.Set{Name: name, Table: name + "_schema_version", FS: sub}
}
