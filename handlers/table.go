package handlers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/effectively-io/effectively/internal/handlerbridge"
)

// Table is a table that typed effects write (Effects.Upsert, InsertOnce,
// Delete). The engine gathers a batch's rows per table and shape and writes
// each shape with one statement; a Table says which columns the rows carry.
// Declare it once, register it with Registry.Table, and pass the same
// pointer to the Effects methods. At start-up the engine checks it against
// the live table (service.App checks before the worker consumes).
type Table struct {
	// Name is the table, optionally schema-qualified ("billing.invoices").
	Name string
	// Key are the columns that identify a row. A primary key or a unique
	// constraint must cover exactly these columns.
	Key []string
	// Version is the integer column the version gate compares (Upsert and
	// Delete). Empty for a table only written with InsertOnce.
	Version string
	// Columns are the other columns a row sets, in the order the Effects
	// methods take their values after the key's.
	Columns []string
	// Touch are columns set to now() whenever a row is written
	// (updated_at).
	Touch []string
	// Deletes: the table takes gated deletes. A gated delete leaves a
	// tombstone (the key and the deleting version, in
	// effectively_tombstones), so an older upsert that arrives after the
	// delete is stale instead of bringing the row back; Upsert checks the
	// tombstones of such a table.
	Deletes bool
	// Totals are running totals kept from this table's rows: each row
	// InsertOnce writes adds its delta to its total's row in the same
	// statement, and a row that already existed (a replay, a redelivery
	// whose claim is gone) adds nothing. The facts stay in this table, so
	// a total can always be recomputed from them.
	Totals []*Total
}

// Total is a running total — a balance, a count, a stock level — kept from
// the rows of an insert-once table: its row, keyed by Key, holds in Column
// the sum of the Delta column of the table's rows with the same key. Each
// fact adds its delta exactly once, however often its event is delivered
// or replayed; a total's row is created by its first fact.
//
//	moves := &handlers.Table{Name: "stock_moves", Key: []string{"event_key"},
//		Columns: []string{"sku", "site", "qty"},
//		Totals: []*handlers.Total{{Name: "stock", Key: []string{"sku", "site"},
//			Column: "on_hand", Delta: "qty"}}}
type Total struct {
	// Name is the totals table, optionally schema-qualified.
	Name string
	// Key are the totals table's columns that identify a row; a primary
	// key or unique constraint must cover exactly them. They take the
	// values of the fact table's columns of the same names, or of KeyFrom.
	Key []string
	// KeyFrom, when set, are the fact table's columns Key takes its values
	// from, in Key's order.
	KeyFrom []string
	// Column is the numeric column that holds the total.
	Column string
	// Delta is the fact table's numeric column each fact adds.
	Delta string
	// Touch are columns set to now() whenever the total changes.
	Touch []string
}

// from is the fact table's column the total's key column i takes.
func (tt *Total) from(i int) string {
	if len(tt.KeyFrom) > 0 {
		return tt.KeyFrom[i]
	}
	return tt.Key[i]
}

// Table registers t for typed effects (it panics on a malformed
// declaration: a programming error) and returns it.
func (r *Registry) Table(t *Table) *Table {
	if err := t.validate(); err != nil {
		panic("handlers: " + err.Error())
	}
	if r.tables == nil {
		r.tables = &tableSet{index: map[*Table]int{}}
	}
	for _, o := range r.tables.tables {
		if o == t || o.Name == t.Name {
			panic(fmt.Sprintf("handlers: table %s is registered twice", t.Name))
		}
	}
	r.tables.index[t] = len(r.tables.tables)
	r.tables.tables = append(r.tables.tables, t)
	return t
}

// Tables are the registered tables, in registration order.
func (v *engineRegistry) Tables() []*Table {
	r := (*Registry)(v)
	if r.tables == nil {
		return nil
	}
	return slices.Clone(r.tables.tables)
}

func (t *Table) validate() error {
	if t.Name == "" || len(t.Key) == 0 {
		return errors.New("a Table needs a Name and Key columns")
	}
	if t.Deletes && t.Version == "" {
		return fmt.Errorf("table %s takes deletes but names no Version column", t.Name)
	}
	seen := map[string]bool{}
	all := append(append(slices.Clone(t.Key), t.Columns...), t.Touch...)
	if t.Version != "" {
		all = append(all, t.Version)
	}
	for _, c := range all {
		if c == "" || seen[c] {
			return fmt.Errorf("table %s: column %q is empty or named twice", t.Name, c)
		}
		seen[c] = true
	}
	facts := append(slices.Clone(t.Key), t.Columns...)
	for _, tt := range t.Totals {
		switch {
		case tt == nil || tt.Name == "" || len(tt.Key) == 0 || tt.Column == "" || tt.Delta == "":
			return fmt.Errorf("table %s: a Total needs a Name, Key columns, a Column and a Delta", t.Name)
		case t.Version != "" || t.Deletes:
			return fmt.Errorf("table %s: Totals are kept from an insert-once table, which has no Version and takes no deletes", t.Name)
		case len(tt.KeyFrom) > 0 && len(tt.KeyFrom) != len(tt.Key):
			return fmt.Errorf("total %s: KeyFrom names %d columns for a Key of %d", tt.Name, len(tt.KeyFrom), len(tt.Key))
		case !slices.Contains(facts, tt.Delta):
			return fmt.Errorf("total %s: Delta %q is not a column of table %s", tt.Name, tt.Delta, t.Name)
		}
		for _, o := range t.Totals {
			if o != tt && o != nil && o.Name == tt.Name {
				return fmt.Errorf("table %s: two Totals of table %s: one statement cannot write a row twice; keep one Total per totals table (a transfer's two sides are two facts)", t.Name, tt.Name)
			}
		}
		named := map[string]bool{tt.Column: true}
		for _, c := range append(slices.Clone(tt.Key), tt.Touch...) {
			if c == "" || named[c] {
				return fmt.Errorf("total %s: column %q is empty or named twice (Key, Column, Touch)", tt.Name, c)
			}
			named[c] = true
		}
		for i := range tt.Key {
			if !slices.Contains(facts, tt.from(i)) {
				return fmt.Errorf("total %s: key column %q is not a column of table %s (set KeyFrom)", tt.Name, tt.from(i), t.Name)
			}
		}
	}
	return nil
}

// width is the number of values a row of t carries: key, then columns.
func (t *Table) width() int { return len(t.Key) + len(t.Columns) }

// tableSet is a registry's tables and, once checked against the database,
// their column types, the order foreign keys impose and their statements.
type tableSet struct {
	tables []*Table
	index  map[*Table]int // position in tables

	mu       sync.Mutex
	resolved []*resolvedTable // by position in tables; nil until resolved
}

// resolvedTable is a Table checked against the catalog.
type resolvedTable struct {
	t     *Table
	ident string   // the table as a quoted, search-path-relative name
	types []string // SQL types of Key, then Columns
	vtype string   // SQL type of Version
	// sequenced: the version column holds a Sequence too (numeric with
	// room for sequenceDigits after the point).
	sequenced bool
	rank      int // tables with a lower rank are written first
	sql       statements
	// totals are the idents of t.Totals' tables, in order, and totalOIDs
	// their oids.
	totals    []string
	totalOIDs []uint32
}

// CheckTables checks every registered table against the live database —
// the table and its columns exist, a primary key or unique constraint
// covers the key, the version column is an integer — and orders them by
// their foreign keys. The worker calls it before consuming; it returns a
// *TableError (joined, one per problem) naming the table, column and fix.
func (v *engineRegistry) CheckTables(ctx context.Context, q handlerbridge.Querier) error {
	r := (*Registry)(v)
	if r.tables == nil {
		return nil
	}
	_, err := r.tables.resolve(ctx, q)
	return err
}

func (s *tableSet) has(t *Table) bool {
	_, ok := s.index[t]
	return ok
}

// forget drops the tables' resolution: the next resolve reads them from
// the database again (after a table was found not to fit an event, so
// that an ALTER TABLE that fixes it is seen without a restart).
func (s *tableSet) forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resolved = nil
}

func (s *tableSet) resolve(ctx context.Context, q handlerbridge.Querier) ([]*resolvedTable, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resolved != nil {
		return s.resolved, nil
	}
	out := make([]*resolvedTable, len(s.tables))
	oids := make([]uint32, len(s.tables))
	var errs []error
	for i, t := range s.tables {
		rt, oid, err := resolveTable(ctx, q, t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[i], oids[i] = rt, oid
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := rankByForeignKeys(ctx, q, out, oids); err != nil {
		return nil, err
	}
	for _, rt := range out {
		rt.sql = buildStatements(rt)
	}
	s.resolved = out
	return out, nil
}

const tableColumnsSQL = `
SELECT c.oid::regclass::text, c.oid::int8, a.attname, format_type(a.atttypid, a.atttypmod),
       a.attidentity <> '' OR a.attgenerated <> '', a.atttypid::regtype::text, a.attnotnull
FROM pg_class c
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.oid = to_regclass($1) AND c.relkind IN ('r', 'p')`

const uniqueKeySQL = `
SELECT EXISTS (
    SELECT 1 FROM pg_index i
    WHERE i.indrelid = $1::oid AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL
      AND (SELECT array_agg(a.attname::text ORDER BY a.attname)
           FROM unnest(i.indkey) k JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k)
          = (SELECT array_agg(x ORDER BY x) FROM unnest($2::text[]) x))`

func tableColumns(ctx context.Context, q handlerbridge.Querier, table string) (map[string]handlerbridge.Column, string, uint32, error) {
	rows, err := q.Query(ctx, tableColumnsSQL, table)
	if err != nil {
		return nil, "", 0, fmt.Errorf("reading the columns of table %s: %w", table, err)
	}
	var cols map[string]handlerbridge.Column
	var ident, name string
	var oid int64
	var c handlerbridge.Column
	if _, err := pgx.ForEachRow(rows, []any{&ident, &oid, &name, &c.Type, &c.Generated, &c.Base, &c.NotNull}, func() error {
		if cols == nil {
			cols = map[string]handlerbridge.Column{}
		}
		cols[name] = c
		return nil
	}); err != nil {
		return nil, "", 0, fmt.Errorf("reading the columns of table %s: %w", table, err)
	}
	return cols, ident, uint32(oid), nil
}

func resolveTable(ctx context.Context, q handlerbridge.Querier, t *Table) (*resolvedTable, uint32, error) {
	cols, ident, oid, err := tableColumns(ctx, q, t.Name)
	if err != nil {
		return nil, 0, err
	}
	if len(cols) == 0 {
		return nil, 0, &handlerbridge.TableError{Table: t.Name, Reason: "does not exist (or the worker's role cannot see it)",
			Fix: "create it in a migration, or correct the table name"}
	}
	rt := &resolvedTable{t: t, ident: ident}
	var errs []error
	for _, c := range append(slices.Clone(t.Key), t.Columns...) {
		col, ok := cols[c]
		switch {
		case !ok:
			errs = append(errs, &handlerbridge.TableError{Table: t.Name, Column: c, Reason: "does not exist",
				Fix: "add the column in a migration, or remove it from the declaration"})
		case col.Generated:
			errs = append(errs, &handlerbridge.TableError{Table: t.Name, Column: c, Reason: "is an identity or generated column, which cannot be written",
				Fix: "leave it out of the declaration; the database fills it"})
		}
		rt.types = append(rt.types, col.Type)
	}
	for _, c := range t.Touch {
		if _, ok := cols[c]; !ok {
			errs = append(errs, &handlerbridge.TableError{Table: t.Name, Column: c, Reason: "does not exist",
				Fix: "add the column in a migration, or remove it from Touch"})
		}
	}
	if t.Version != "" {
		col, ok := cols[t.Version]
		switch {
		case !ok:
			errs = append(errs, &handlerbridge.TableError{Table: t.Name, Column: t.Version, Reason: "does not exist",
				Fix: "add a bigint version column in a migration"})
		case col.Base != "bigint" && col.Base != "integer" && col.Base != "smallint" && col.Base != "numeric":
			errs = append(errs, &handlerbridge.TableError{Table: t.Name, Column: t.Version, Reason: "is " + col.Type + ", not an integer",
				Fix: "make the version column bigint"})
		case !col.NotNull:
			// NULL compares as unknown: a row whose version is NULL (a
			// column added to a table that had rows) would never be
			// updated, and a delete of it would be counted applied.
			errs = append(errs, &handlerbridge.TableError{Table: t.Name, Column: t.Version, Reason: "may be NULL, and a row whose version is NULL would never be updated or deleted",
				Fix: fmt.Sprintf("give rows without one the lowest version and forbid NULL: UPDATE %s SET %s = 0 WHERE %[2]s IS NULL; ALTER TABLE %[1]s ALTER COLUMN %[2]s SET NOT NULL", ident, quote(t.Version))})
		}
		rt.vtype, rt.sequenced = col.Type, col.HoldsSequence()
	}
	if len(errs) > 0 {
		return nil, 0, errors.Join(errs...)
	}
	if err := checkUnique(ctx, q, oid, t.Name, t.Key); err != nil {
		return nil, 0, err
	}
	for _, tt := range t.Totals {
		ident, toid, err := resolveTotal(ctx, q, tt, cols)
		if err != nil {
			return nil, 0, err
		}
		rt.totals, rt.totalOIDs = append(rt.totals, ident), append(rt.totalOIDs, toid)
	}
	return rt, oid, nil
}

// checkUnique refuses a table whose key no primary key or unique
// constraint covers exactly: ON CONFLICT needs one.
func checkUnique(ctx context.Context, q handlerbridge.Querier, oid uint32, table string, key []string) error {
	var unique bool
	if err := q.QueryRow(ctx, uniqueKeySQL, int64(oid), key).Scan(&unique); err != nil {
		return fmt.Errorf("reading the unique keys of table %s: %w", table, err)
	}
	if !unique {
		return &handlerbridge.TableError{Table: table, Column: strings.Join(key, ", "),
			Reason: "no primary key or unique constraint covers exactly the key",
			Fix:    fmt.Sprintf("add one in a migration: ALTER TABLE %s ADD UNIQUE (%s)", table, strings.Join(key, ", "))}
	}
	return nil
}

// integers and exact are the base types a total and its delta may have:
// sums that do not depend on how the facts were batched (floating point
// would round differently per batch).
var (
	integers = []string{"bigint", "integer", "smallint"}
	exact    = append(slices.Clone(integers), "numeric")
)

// timestamps are the types a Touch column may have (it is set to now()).
var timestamps = []string{"timestamp with time zone", "timestamp without time zone"}

// resolveTotal checks tt's table against the catalog and against its fact
// table's columns, facts: the key's columns exist, NOT NULL, with the fact
// columns' types; a unique constraint covers them; Column and Delta are
// NOT NULL and exact, and Column holds any sum of Delta without rounding;
// Touch columns are timestamps. It returns the table's ident and oid.
func resolveTotal(ctx context.Context, q handlerbridge.Querier, tt *Total, facts map[string]handlerbridge.Column) (string, uint32, error) {
	cols, ident, oid, err := tableColumns(ctx, q, tt.Name)
	if err != nil {
		return "", 0, err
	}
	if len(cols) == 0 {
		return "", 0, &handlerbridge.TableError{Table: tt.Name, Reason: "does not exist (or the worker's role cannot see it)",
			Fix: "create the totals table in a migration, or correct the Total's name"}
	}
	var errs []error
	problem := func(table, column, reason, fix string) {
		errs = append(errs, &handlerbridge.TableError{Table: table, Column: column, Reason: reason, Fix: fix})
	}
	for i, k := range tt.Key {
		col, ok := cols[k]
		fact := facts[tt.from(i)]
		switch {
		case !ok:
			problem(tt.Name, k, "does not exist", "add the column in a migration, or correct the Total's Key")
		case col.Type != fact.Type:
			problem(tt.Name, k, fmt.Sprintf("is %s where the fact's %s is %s", col.Type, tt.from(i), fact.Type), "give both columns the same type")
		case !fact.NotNull:
			problem("of the facts", tt.from(i), "may be NULL, so a fact would have no total row (the key of total "+tt.Name+")",
				"make it NOT NULL in a migration")
		}
	}
	delta := facts[tt.Delta]
	col, ok := cols[tt.Column]
	switch {
	case !ok || col.Generated:
		problem(tt.Name, tt.Column, "is not a writable column", "add it as bigint or numeric NOT NULL DEFAULT 0")
	case !col.NotNull:
		problem(tt.Name, tt.Column, "may be NULL (a NULL total never sums again)", "make it NOT NULL DEFAULT 0 in a migration")
	case !slices.Contains(exact, col.Base):
		problem(tt.Name, tt.Column, "is "+col.Type+", not an exact number (a sum would depend on how the facts were batched)", "make it bigint or numeric")
	case slices.Contains(exact, delta.Base) && !holds(col, delta):
		problem(tt.Name, tt.Column, fmt.Sprintf("is %s, which cannot hold a sum of %s (%s) without rounding", col.Type, tt.Delta, delta.Type),
			"make it numeric (unconstrained), or of the delta's type")
	}
	switch {
	case !slices.Contains(exact, delta.Base):
		problem("of the facts", tt.Delta, "(the delta of total "+tt.Name+") is "+delta.Type+", not an exact number", "make it bigint or numeric")
	case !delta.NotNull:
		problem("of the facts", tt.Delta, "(the delta of total "+tt.Name+") may be NULL", "make it NOT NULL in a migration")
	}
	for _, c := range tt.Touch {
		if col, ok := cols[c]; !ok || !slices.Contains(timestamps, col.Type) {
			problem(tt.Name, c, "is not a timestamp column (Touch sets it to now())", "add it as timestamptz, or remove it from Touch")
		}
	}
	if len(errs) > 0 {
		return "", 0, errors.Join(errs...)
	}
	if err := checkUnique(ctx, q, oid, tt.Name, tt.Key); err != nil {
		return "", 0, err
	}
	return ident, oid, nil
}

// holds reports whether a total column of type col holds any sum of deltas
// of type delta exactly: an integer total sums integer deltas, an
// unconstrained numeric sums anything exact, a numeric(p,s) total sums
// deltas of its own type or integers.
func holds(col, delta handlerbridge.Column) bool {
	switch {
	case slices.Contains(integers, col.Base):
		return slices.Contains(integers, delta.Base)
	case col.Type == "numeric":
		return true
	}
	return slices.Contains(integers, delta.Base) || delta.Type == col.Type
}
