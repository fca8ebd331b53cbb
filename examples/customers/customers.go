// Package customers is the customers example's tables: the migrations the
// stock binary applies from examples/customers/migrations, embedded for a
// Go build of the same replica (examples/customers-go).
package customers

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"

	"github.com/effectively-io/effectively/schema"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations are the tables customers and customer_changes, as a set named
// name with its own version table.
func Migrations(name string) schema.Set {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		panic(err) // the embed pattern guarantees the folder exists
	}
	return schema.Set{Name: name, Table: name + "_schema_version", FS: sub}
}

// Change is a Debezium change event of public.customers as the PostgreSQL
// connector writes it (JSON converter, schemas off): its record key and
// value, for operation op (c, u, d or r) at log position lsn, processed at
// tsMs. before and after are the row images (nil: null). The tests of
// both builds produce with it.
func Change(op string, id, lsn, tsMs int64, before, after map[string]any) (key, value []byte) {
	value, err := json.Marshal(map[string]any{
		"before": before, "after": after, "op": op, "ts_ms": tsMs, "transaction": nil,
		"source": map[string]any{"version": "3.6.1.Final", "connector": "postgresql", "name": "src", "db": "source",
			"schema": "public", "table": "customers", "lsn": lsn, "txId": lsn / 8, "snapshot": "false", "ts_ms": 1796324492002},
	})
	if err != nil {
		panic(err) // maps of JSON values always marshal
	}
	return fmt.Appendf(nil, `{"id":%d}`, id), value
}

// Row is a row image of public.customers.
func Row(id int64, status string) map[string]any {
	return map[string]any{"id": id, "name": fmt.Sprintf("customer %d", id), "status": status}
}
