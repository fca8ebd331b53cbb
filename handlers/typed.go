package handlers

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/internal/handlerbridge"
)

// The shapes of typed effects.
type shape uint8

const (
	shapeUpsert shape = iota + 1
	shapeDelete
	shapeInsert
)

// typedEffect is one row an event's handler emitted.
type typedEffect struct {
	t       *Table
	shape   shape
	at      order // gated shapes: the version, then the sequence
	values  []any // the key's values, then (not for deletes) the columns'
	row     string
	out     *handlerbridge.Outcome
	applied bool // gated shapes: the write took effect
}

// Upsert writes a row of t if version is newer than the stored row's (the
// version gate for absolute state), and makes the event stale otherwise.
// values are the key's values, then the columns', in t's order. Within a
// batch the newest version of a row is the one written; each event's
// disposition is what it would be had the batch been applied one event at
// a time in offset order.
//
// A version that is the event's own Version is gated with its Sequence
// too (a Debezium change's: see event.Event.Sequence), which the
// table's version column must then hold: numeric, not bigint.
func (e *Effects) Upsert(t *Table, version int64, values ...any) error {
	if err := e.checkTyped(t, len(values), t.width(), "Upsert"); err != nil {
		return err
	}
	if t.Version == "" {
		return fmt.Errorf("Upsert into table %s, which names no Version column", t.Name)
	}
	return e.addTyped(t, shapeUpsert, e.order(version), values)
}

// order is version as the gate compares it: with the event's Sequence
// when it is the event's own Version.
func (e *Effects) order(version int64) order {
	if version == e.ev.Version {
		return order{version, e.ev.Sequence}
	}
	return order{version, 0}
}

// InsertOnce inserts a row of t unless one with the same key exists: one
// row per event key, the pattern for relative facts (payments, stock movements). It
// never changes the event's disposition. values are the key's values, then
// the columns'.
func (e *Effects) InsertOnce(t *Table, values ...any) error {
	if err := e.checkTyped(t, len(values), t.width(), "InsertOnce"); err != nil {
		return err
	}
	return e.addTyped(t, shapeInsert, order{}, values)
}

// Delete deletes the row of t with the given key if version is newer than
// the stored row's, and leaves a tombstone so that an older upsert arriving
// later is stale; the event is stale when the row or a tombstone is as new
// or newer. t must be declared with Deletes. A version that is the event's
// own is gated with its Sequence, as in Upsert.
func (e *Effects) Delete(t *Table, version int64, key ...any) error {
	if err := e.checkTyped(t, len(key), len(t.Key), "Delete"); err != nil {
		return err
	}
	if !t.Deletes {
		return fmt.Errorf("Delete from table %s, which is not declared with Deletes", t.Name)
	}
	return e.addTyped(t, shapeDelete, e.order(version), key)
}

func (e *Effects) checkTyped(t *Table, got, want int, method string) error {
	switch {
	case t == nil:
		return fmt.Errorf("%s into a nil table", method)
	case e.env.tables == nil || !e.env.tables.has(t):
		return fmt.Errorf("%s into table %s, which is not registered (Registry.Table)", method, t.Name)
	case e.current == nil:
		return fmt.Errorf("%s outside a handler", method)
	case got != want:
		return fmt.Errorf("%s into table %s with %d values, want %d (key %s, then columns %s)",
			method, t.Name, got, want, strings.Join(t.Key, ", "), strings.Join(t.Columns, ", "))
	}
	return nil
}

func (e *Effects) addTyped(t *Table, s shape, at order, values []any) error {
	e.typed = append(e.typed, typedEffect{
		t: t, shape: s, at: at, values: values, row: rowID(values[:len(t.Key)]), out: e.current,
	})
	e.queued++
	e.typedQueued++
	return nil
}

// rowID identifies a row by its key's values within a batch.
func rowID(key []any) string {
	if len(key) == 1 {
		switch v := key[0].(type) {
		case string:
			return v
		case int64:
			return strconv.FormatInt(v, 10)
		}
	}
	var b strings.Builder
	for _, v := range key {
		fmt.Fprintf(&b, "%T\x00%v\x00", v, v)
	}
	return b.String()
}

// Flush sends the batch's effects in one round trip: each table's typed
// effects one statement per shape (tables in an order that satisfies their
// foreign keys), then the raw statements in the order they were queued;
// then it settles every event's outcome.
func (v *engineEffects) Flush(ctx context.Context, tx pgx.Tx) error {
	e := (*Effects)(v)
	if v.Len() == 0 {
		return nil
	}
	b := &pgx.Batch{}
	var gated [][]int // groups of typed effects on one row, in offset order
	if len(e.typed) > 0 {
		tables, err := e.env.tables.resolve(ctx, tx)
		if err != nil {
			return err
		}
		if err := e.checkSequences(tables); err != nil {
			return err
		}
		gated = e.queueTyped(b, tables)
	}
	b.QueuedQueries = append(b.QueuedQueries, e.batch.QueuedQueries...)
	queueScrub(b)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	for _, g := range gated {
		for _, i := range g {
			o := e.typed[i].out
			o.Gated++
			if e.typed[i].applied {
				o.GatedApplied++
			}
		}
	}
	for _, g := range gated {
		for _, i := range g {
			e.typed[i].out.SettleGated() // idempotent: the counts are final
		}
	}
	return nil
}

// checkSequences refuses, as the event's failure, a gated effect whose
// Sequence its table's version column would round away: by its Version
// alone two changes of one transaction would tie, and the second be
// stale.
func (e *Effects) checkSequences(tables []*resolvedTable) error {
	for _, te := range e.typed {
		rt := tables[e.env.tables.index[te.t]]
		if te.at.s != 0 && !rt.sequenced {
			e.env.tables.forget() // an ALTER TABLE is the fix: read the table again next time
			return event.PermanentWithReason(ReasonVersionColumn, fmt.Errorf(
				"table %s: version column %s is %s, which cannot hold the event's order (version %d, then sequence %d): make it numeric (ALTER TABLE %s ALTER COLUMN %s TYPE numeric), then redrive",
				te.t.Name, te.t.Version, rt.vtype, te.at.v, te.at.s, rt.ident, quote(te.t.Version)))
		}
	}
	return nil
}

// scrubAbove is the size of a batch's string and byte arguments above
// which Flush scrubs them from the connection (queueScrub).
const scrubAbove = 1 << 20

// queueScrub queues, after a batch whose arguments are large, a statement
// as wide as its widest one with every argument NULL. pgx (v5.12) keeps a
// connection's encoded arguments alive after they are sent: its
// ExtendedQueryBuilder truncates the slice of parameter values to length
// 0 without clearing it, so the entries beyond the next, narrower
// statement's still point into the buffer of the wide one — every value
// of a typed statement's arrays. After a batch of large records that is a
// batch's worth of payloads pinned on each pooled connection, idle or
// not, until a statement as wide runs on it (measured: 40 MiB over 16
// connections after 32 records of 1 MiB, with the heap at 5 MiB idle).
// The scrub statement overwrites every entry with nil; it rides in the
// same round trip.
func queueScrub(b *pgx.Batch) {
	width, size := 0, 0
	for _, q := range b.QueuedQueries {
		width = max(width, len(q.Arguments))
		for _, a := range q.Arguments {
			size += argBytes(a)
		}
	}
	if size < scrubAbove {
		return
	}
	params := make([]string, width)
	for i := range params {
		params[i] = fmt.Sprintf("$%d::bool", i+1)
	}
	b.Queue("SELECT cardinality(ARRAY["+strings.Join(params, ", ")+"])", make([]any, width)...)
}

// argBytes is the size of the strings and byte slices in a statement's
// argument, as the typed statements pass them (columns as slices).
func argBytes(a any) int {
	n := 0
	switch v := a.(type) {
	case string:
		n = len(v)
	case []byte:
		n = len(v)
	case []string:
		for _, s := range v {
			n += len(s)
		}
	case [][]byte:
		for _, b := range v {
			n += len(b)
		}
	case []any:
		for _, x := range v {
			n += argBytes(x)
		}
	}
	return n
}

// prior is what a row's gate compared against before the batch: the
// stored row's version or its tombstone's, whichever is newer (as the
// column's text).
type prior struct {
	written bool
	row     *string
	tomb    *string
}

// order is a gated effect's version, then its sequence (event.Event's
// Version and Sequence).
type order struct{ v, s int64 }

func (a order) cmp(b order) int {
	if c := cmp.Compare(a.v, b.v); c != 0 {
		return c
	}
	return cmp.Compare(a.s, b.s)
}

// sequenceDigits is how many digits a version column holds its order's
// sequence in, after the point: numeric Version.Sequence.
const sequenceDigits = handlerbridge.SequenceDigits

// text is o as the numeric a version column holds.
func (o order) text() string { return handlerbridge.VersionText(o.v, o.s) }

// parseOrder reads a version column's text (order.text's form; a bigint's
// has no fraction). Digits beyond the sequence's are not the engine's and
// are dropped.
func parseOrder(text string) (order, error) {
	whole, frac, _ := strings.Cut(text, ".")
	v, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return order{}, fmt.Errorf("version %q: %w", text, err)
	}
	frac = (frac + strings.Repeat("0", sequenceDigits))[:sequenceDigits]
	var s int64
	if frac = strings.TrimLeft(frac, "0"); frac != "" {
		if s, err = strconv.ParseInt(frac, 10, 64); err != nil {
			return order{}, fmt.Errorf("version %q: the sequence does not fit 64 bits", text)
		}
	}
	return order{v, s}, nil
}

// queueTyped queues the typed effects' statements on b and returns the
// groups of gated effects per row; their applied flags are set once the
// batch has run.
func (e *Effects) queueTyped(b *pgx.Batch, tables []*resolvedTable) [][]int {
	type perTable struct {
		rows    map[string]int // row → index in groups
		groups  [][]int
		inserts []int
	}
	by := make([]*perTable, len(tables))
	for i := range e.typed {
		te := &e.typed[i]
		ti := e.env.tables.index[te.t]
		pt := by[ti]
		if pt == nil {
			pt = &perTable{rows: map[string]int{}}
			by[ti] = pt
		}
		if te.shape == shapeInsert {
			pt.inserts = append(pt.inserts, i)
			continue
		}
		g, ok := pt.rows[te.row]
		if !ok {
			g = len(pt.groups)
			pt.rows[te.row] = g
			pt.groups = append(pt.groups, nil)
		}
		pt.groups[g] = append(pt.groups[g], i)
	}
	order := make([]int, 0, len(tables))
	for i, pt := range by {
		if pt != nil {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return tables[a].rank - tables[b].rank })

	var all [][]int
	for _, ti := range order {
		rt, pt := tables[ti], by[ti]
		var ups, dels [][]int // groups whose newest effect is an upsert, a delete
		for _, g := range pt.groups {
			if e.typed[e.newest(g)].shape == shapeDelete {
				dels = append(dels, g)
			} else {
				ups = append(ups, g)
			}
		}
		if len(ups) > 0 {
			e.queueGated(b, rt, rt.sql.upsert, ups, true)
		}
		if len(dels) > 0 {
			e.queueGated(b, rt, rt.sql.delete, dels, false)
		}
		if len(pt.inserts) > 0 {
			cols := columns(len(rt.types), len(pt.inserts))
			for r, i := range pt.inserts {
				for c, v := range e.typed[i].values {
					cols[c][r] = v
				}
			}
			args := make([]any, len(cols))
			for c := range cols {
				args[c] = homogeneous(cols[c])
			}
			b.Queue(rt.sql.insert, args...)
		}
		all = append(all, pt.groups...)
	}
	return all
}

// newest is the group's effect with the highest version, the first of
// equals (the one a one-at-a-time application would keep).
func (e *Effects) newest(g []int) int {
	best := g[0]
	for _, i := range g[1:] {
		if e.typed[i].at.cmp(e.typed[best].at) > 0 {
			best = i
		}
	}
	return best
}

// queueGated queues one gated statement for groups: the newest effect of
// each is written (withColumns: the key, version and columns; otherwise
// the key and version), and the result settles every effect of the group.
func (e *Effects) queueGated(b *pgx.Batch, rt *resolvedTable, sql string, groups [][]int, withColumns bool) {
	nk := len(rt.t.Key)
	width := nk
	if withColumns {
		width = len(rt.types)
	}
	n := len(groups)
	cols := columns(width, n)
	var versions any
	ints, texts, multi := make([]int64, n), []string(nil), make([]bool, n)
	versions = ints
	if rt.sequenced {
		texts = make([]string, n)
		versions = texts
	}
	for r, g := range groups {
		w := &e.typed[e.newest(g)]
		for c := range width {
			cols[c][r] = w.values[c]
		}
		if texts != nil {
			texts[r] = w.at.text()
		} else {
			ints[r] = w.at.v
		}
		multi[r] = len(g) > 1
	}
	args := make([]any, 0, width+3)
	for _, c := range cols[:nk] {
		args = append(args, homogeneous(c))
	}
	args = append(args, versions)
	for _, c := range cols[nk:] {
		args = append(args, homogeneous(c))
	}
	args = append(args, multi)
	if rt.t.Deletes {
		args = append(args, rt.ident)
	}
	b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
		priors := make([]prior, n)
		var ord int64
		var p prior
		if _, err := pgx.ForEachRow(rows, []any{&ord, &p.written, &p.row, &p.tomb}, func() error {
			if ord < 1 || int(ord) > n {
				return fmt.Errorf("table %s: the statement returned row %d of %d", rt.t.Name, ord, n)
			}
			priors[ord-1] = p
			return nil
		}); err != nil {
			return err
		}
		for r, g := range groups {
			e.settleGroup(g, priors[r])
		}
		return nil
	})
}

// settleGroup decides which effects of one row's group took effect: as if
// applied one at a time in offset order, each is applied when its version
// is newer than every version before it (the stored one included).
func (e *Effects) settleGroup(g []int, p prior) {
	if !p.written {
		return // the newest was not newer than the stored row: all stale
	}
	if len(g) == 1 {
		e.typed[g[0]].applied = true
		return
	}
	var cur order
	known := false
	for _, text := range []*string{p.row, p.tomb} {
		if text == nil {
			continue
		}
		v, err := parseOrder(*text)
		if err != nil {
			// Not a version the engine wrote (another tool's fraction,
			// NaN): the statement decided the row; of the effects before
			// the newest, none is taken as applied.
			v = order{math.MaxInt64, math.MaxInt64}
		}
		if !known || v.cmp(cur) > 0 {
			cur, known = v, true
		}
	}
	newest := e.newest(g)
	for _, i := range g {
		te := &e.typed[i]
		if !known || te.at.cmp(cur) > 0 || i == newest {
			te.applied = true
			cur, known = te.at, true
		}
	}
}

func columns(width, n int) [][]any {
	cols := make([][]any, width)
	for c := range cols {
		cols[c] = make([]any, n)
	}
	return cols
}

// homogeneous returns a column of values as a typed slice when they are all
// strings, all int64s or all byte slices (JSON text for a json or jsonb
// column, which pgx sends as it is), which pgx encodes without reflecting
// on each element; otherwise the values as they are.
func homogeneous(vals []any) any {
	switch vals[0].(type) {
	case string:
		return typedOr[string](vals)
	case int64:
		return typedOr[int64](vals)
	case []byte:
		return typedOr[[]byte](vals)
	}
	return vals
}

// typedOr returns vals as a []T when every value is a T, else vals.
func typedOr[T any](vals []any) any {
	out := make([]T, len(vals))
	for i, v := range vals {
		x, ok := v.(T)
		if !ok {
			return vals
		}
		out[i] = x
	}
	return out
}
