package handlers

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/effectively-io/effectively/internal/handlerbridge"
)

// statements are a resolved table's set-based statements. Each takes one
// array per column and writes every row of a batch at once.
type statements struct {
	// upsert: key arrays, versions, column arrays, multi flags[, table
	// name]; returns (ordinal, written, prior row version, prior tombstone
	// version), the priors only for rows with several effects in the batch.
	upsert string
	// delete: key arrays, versions, multi flags, table name; returns the
	// same as upsert.
	delete string
	// insert: key arrays, column arrays.
	insert string
}

func quote(name string) string { return pgx.Identifier{name}.Sanitize() }

func buildStatements(rt *resolvedTable) statements {
	t := rt.t
	nk := len(t.Key)
	var s statements

	// unnest(...) WITH ORDINALITY AS x(k0…, [v,] c0…, [multi,] ord)
	unnest := func(version, cols, multi bool) string {
		var args, names []string
		p := 0
		param := func(typ, name string) {
			p++
			args = append(args, fmt.Sprintf("$%d::%s[]", p, typ))
			names = append(names, name)
		}
		for i := range nk {
			param(rt.types[i], fmt.Sprintf("k%d", i))
		}
		if version && rt.sequenced {
			// Sent as text: numeric Version.Sequence, exactly.
			p++
			args = append(args, fmt.Sprintf("$%d::text[]::%s[]", p, rt.vtype))
			names = append(names, "v")
		} else if version {
			param(rt.vtype, "v")
		}
		if cols {
			for i := range t.Columns {
				param(rt.types[nk+i], fmt.Sprintf("c%d", i))
			}
		}
		if multi {
			param("bool", "multi")
		}
		return fmt.Sprintf("unnest(%s) WITH ORDINALITY AS x(%s, ord)", strings.Join(args, ", "), strings.Join(names, ", "))
	}
	var keyCols, xKeys, keyMatch, xKeyMatch []string
	for i, k := range t.Key {
		keyCols = append(keyCols, quote(k))
		xKeys = append(xKeys, fmt.Sprintf("x.k%d", i))
		keyMatch = append(keyMatch, fmt.Sprintf("t.%s = x.k%d", quote(k), i))
		xKeyMatch = append(xKeyMatch, fmt.Sprintf("w.k%d = x.k%d", i, i))
	}
	var insCols, insVals []string
	insCols = append(insCols, keyCols...)
	insVals = append(insVals, xKeys...)
	if t.Version != "" {
		insCols = append(insCols, quote(t.Version))
		insVals = append(insVals, "x.v")
	}
	var set []string
	for i, c := range t.Columns {
		insCols = append(insCols, quote(c))
		insVals = append(insVals, fmt.Sprintf("x.c%d", i))
		set = append(set, fmt.Sprintf("%s = excluded.%s", quote(c), quote(c)))
	}
	for _, c := range t.Touch {
		insCols = append(insCols, quote(c))
		insVals = append(insVals, "now()")
		set = append(set, fmt.Sprintf("%s = excluded.%s", quote(c), quote(c)))
	}
	conflict := strings.Join(keyCols, ", ")
	tombKey := fmt.Sprintf("jsonb_build_array(%s)", strings.Join(xKeys, ", "))
	priorRow := "NULL::text"
	priorTomb := "NULL::text"
	if t.Version != "" {
		priorRow = fmt.Sprintf("CASE WHEN x.multi THEN (SELECT t.%s::text FROM %s t WHERE %s) END",
			quote(t.Version), rt.ident, strings.Join(keyMatch, " AND "))
	}

	if t.Version != "" {
		v := quote(t.Version)
		set = append([]string{fmt.Sprintf("%s = excluded.%s", v, v)}, set...)
		notTombstoned := ""
		if t.Deletes {
			tableParam := nk + len(t.Columns) + 3 // after keys, version, columns, multi: see queueGated
			notTombstoned = fmt.Sprintf(`
    WHERE NOT EXISTS (SELECT FROM effectively_tombstones ts
                      WHERE ts.table_name = $%d AND ts.key = %s AND ts.version >= x.v)`, tableParam, tombKey)
			priorTomb = fmt.Sprintf(`CASE WHEN x.multi THEN (SELECT ts.version::text FROM effectively_tombstones ts
                                 WHERE ts.table_name = $%d AND ts.key = %s) END`, tableParam, tombKey)
		}
		var returning []string
		for i, k := range t.Key {
			returning = append(returning, fmt.Sprintf("t.%s AS k%d", quote(k), i))
		}
		s.upsert = fmt.Sprintf(`
WITH x AS (SELECT * FROM %s),
w AS (
    INSERT INTO %s AS t (%s)
    SELECT %s FROM x%s
    ORDER BY %s
    ON CONFLICT (%s) DO UPDATE SET %s
    WHERE t.%s < excluded.%s
    RETURNING %s)
SELECT x.ord, w.k0 IS NOT NULL, %s, %s
FROM x LEFT JOIN w ON %s`,
			unnest(true, true, true),
			rt.ident, strings.Join(insCols, ", "),
			strings.Join(insVals, ", "), notTombstoned,
			strings.Join(xKeys, ", "),
			conflict, strings.Join(set, ", "),
			v, v,
			strings.Join(returning, ", "),
			priorRow, priorTomb,
			strings.Join(xKeyMatch, " AND "))
	}
	if t.Deletes {
		v := quote(t.Version)
		tp := nk + 3 // keys, version, multi, then the table name
		tk := tombKey
		s.delete = fmt.Sprintf(`
WITH x AS (SELECT * FROM %s),
d AS (DELETE FROM %s t USING x WHERE %s AND t.%s < x.v),
w AS (
    INSERT INTO effectively_tombstones AS ts (table_name, key, version)
    SELECT $%d, %s, x.v FROM x
    WHERE NOT EXISTS (SELECT FROM %s t WHERE %s AND t.%s >= x.v)
    ORDER BY 2
    ON CONFLICT (table_name, key) DO UPDATE SET version = excluded.version, deleted_at = now()
    WHERE ts.version < excluded.version
    RETURNING ts.key AS k0)
SELECT x.ord, w.k0 IS NOT NULL, %s,
       CASE WHEN x.multi THEN (SELECT ts.version::text FROM effectively_tombstones ts WHERE ts.table_name = $%d AND ts.key = %s) END
FROM x LEFT JOIN w ON w.k0 = %s`,
			unnest(true, false, true),
			rt.ident, strings.Join(keyMatch, " AND "), v,
			tp, tk,
			rt.ident, strings.Join(keyMatch, " AND "), v,
			priorRow, tp, tk, tk)
	}
	var insVals2 []string
	for _, v := range insVals {
		if v != "x.v" {
			insVals2 = append(insVals2, v)
		}
	}
	var insCols2 []string
	for _, c := range insCols {
		if t.Version == "" || c != quote(t.Version) {
			insCols2 = append(insCols2, c)
		}
	}
	s.insert = fmt.Sprintf(`
INSERT INTO %s (%s)
SELECT %s FROM %s
ORDER BY x.ord
ON CONFLICT (%s) DO NOTHING`,
		rt.ident, strings.Join(insCols2, ", "), strings.Join(insVals2, ", "), unnest(false, true, false), conflict)
	if len(t.Totals) > 0 {
		s.insert = withTotals(rt, s.insert)
	}
	return s
}

// withTotals makes insert (an insert-once) also add each inserted row's
// delta to its totals, in the same statement: the rows the insert returns
// are the facts that did not exist, so a fact adds once however often its
// event comes. A batch's deltas are summed per total row, written in key
// order. Batches of different partitions (or of two fact tables) that add
// to the same rows can still deadlock; PostgreSQL detects it and the batch
// is retried.
func withTotals(rt *resolvedTable, insert string) string {
	var returning []string
	seen := map[string]bool{}
	ret := func(c string) {
		if !seen[c] {
			seen[c] = true
			returning = append(returning, quote(c))
		}
	}
	for _, tt := range rt.t.Totals {
		for i := range tt.Key {
			ret(tt.from(i))
		}
		ret(tt.Delta)
	}
	ctes := []string{fmt.Sprintf("f AS (%s\nRETURNING %s)", insert, strings.Join(returning, ", "))}
	for n, tt := range rt.t.Totals {
		var cols, from, set []string
		for i, k := range tt.Key {
			cols = append(cols, quote(k))
			from = append(from, "f."+quote(tt.from(i)))
		}
		group := strings.Join(from, ", ")
		vals := append(slices.Clone(from), "sum(f."+quote(tt.Delta)+")")
		cols = append(cols, quote(tt.Column))
		set = append(set, fmt.Sprintf("%s = t.%s + excluded.%s", quote(tt.Column), quote(tt.Column), quote(tt.Column)))
		for _, c := range tt.Touch {
			cols = append(cols, quote(c))
			vals = append(vals, "now()")
			set = append(set, fmt.Sprintf("%s = excluded.%s", quote(c), quote(c)))
		}
		ctes = append(ctes, fmt.Sprintf(`t%d AS (
    INSERT INTO %s AS t (%s)
    SELECT %s FROM f GROUP BY %s ORDER BY %s
    ON CONFLICT (%s) DO UPDATE SET %s)`,
			n, rt.totals[n], strings.Join(cols, ", "), strings.Join(vals, ", "), group, group,
			strings.Join(cols[:len(tt.Key)], ", "), strings.Join(set, ", ")))
	}
	return "WITH " + strings.Join(ctes, ",\n") + "\nSELECT count(*) FROM f"
}

const foreignKeysSQL = `
SELECT conrelid::int8, confrelid::int8 FROM pg_constraint
WHERE contype = 'f' AND conrelid = ANY($1::int8[]) AND confrelid = ANY($2::int8[]) AND conrelid <> confrelid`

// rankByForeignKeys ranks the tables so that a table is written after the
// tables it references: an insert-once that references a row upserted in
// the same batch finds it. A table with totals is ranked as if it also
// referenced what its totals tables reference: its statement writes them.
func rankByForeignKeys(ctx context.Context, q handlerbridge.Querier, tables []*resolvedTable, oids []uint32) error {
	ids := make([]int64, len(oids))
	at := map[int64]int{}
	stands := map[int64][]int{} // a table's oid, or a totals table's → the tables whose statements write it
	for i, o := range oids {
		ids[i] = int64(o)
		at[int64(o)] = i
		stands[int64(o)] = append(stands[int64(o)], i)
	}
	from := slices.Clone(ids)
	for i, rt := range tables {
		for _, o := range rt.totalOIDs {
			if _, seen := stands[int64(o)]; !seen {
				from = append(from, int64(o))
			}
			stands[int64(o)] = append(stands[int64(o)], i)
		}
	}
	rows, err := q.Query(ctx, foreignKeysSQL, from, ids)
	if err != nil {
		return fmt.Errorf("reading the foreign keys between typed-effect tables: %w", err)
	}
	refs := make([][]int, len(tables)) // table → tables it references
	var src, dst int64
	if _, err := pgx.ForEachRow(rows, []any{&src, &dst}, func() error {
		for _, i := range stands[src] {
			refs[i] = append(refs[i], at[dst])
		}
		return nil
	}); err != nil {
		return fmt.Errorf("reading the foreign keys between typed-effect tables: %w", err)
	}
	// rank = the longest chain of references below a table; a cycle has
	// no order.
	const visiting = -1
	rank := make([]int, len(tables))
	done := make([]bool, len(tables))
	var visit func(i int) error
	visit = func(i int) error {
		if done[i] {
			return nil
		}
		if rank[i] == visiting {
			return &handlerbridge.TableError{Table: tables[i].t.Name, Reason: "is part of a cycle of foreign keys between typed-effect tables",
				Fix: "write one of them with raw statements (Effects.Exec)"}
		}
		rank[i] = visiting
		r := 0
		for _, j := range refs[i] {
			if err := visit(j); err != nil {
				return err
			}
			r = max(r, rank[j]+1)
		}
		rank[i], done[i] = r, true
		return nil
	}
	for i := range tables {
		if err := visit(i); err != nil {
			return err
		}
	}
	for i, rt := range tables {
		rt.rank = rank[i]
	}
	return nil
}
