package main

import (
	"embed"
	"io/fs"

	"github.com/effectively-io/effectively/schema"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrations are the example's tables (orders, order_lines), applied by
// `orders migrate` after the engine's, with their own version table.
func migrations() schema.Set {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		panic(err) // the embed pattern guarantees the folder exists
	}
	return schema.Set{Name: "orders", Table: "orders_schema_version", FS: sub}
}
