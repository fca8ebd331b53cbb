package sink_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/handling"
	"github.com/effectively-io/effectively/internal/outbox"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/internal/sink"
)

const ordersSchema = `
CREATE TABLE orders (id text PRIMARY KEY, version bigint NOT NULL, status varchar(12) NOT NULL, total numeric(12,2),
                     paid boolean, placed_at timestamptz, qty integer, meta jsonb, channel text, updated_at timestamptz);
CREATE TABLE order_events (event_key text PRIMARY KEY, order_id text NOT NULL, kind text NOT NULL);`

func ordersSinks() []config.Sink {
	return []config.Sink{{
		Name: "orders", Topic: "shop", Types: []string{"order.updated"}, Table: "orders", Mode: config.SinkUpsert,
		Key: []string{"id"}, Version: "version", Touch: []string{"updated_at"},
		Columns: []config.SinkColumn{
			{Name: "id", From: "subject"},
			{Name: "version", From: "resourceversion"},
			{Name: "status", From: "/status"},
			{Name: "total", From: "/total", Type: "numeric", Optional: true},
			{Name: "paid", From: "/paid", Type: "boolean", Optional: true},
			{Name: "placed_at", From: "/placed_at", Type: "timestamptz", Optional: true},
			{Name: "qty", From: "/lines/0/qty", Type: "bigint", Optional: true},
			{Name: "meta", From: "/meta", Type: "jsonb", Optional: true},
			{Name: "channel", Value: "web"},
		},
	}, {
		Name: "order-deletes", Topic: "shop", Types: []string{"order.deleted"}, Table: "orders", Mode: config.SinkDelete,
		Key: []string{"id"}, Version: "version",
		Columns: []config.SinkColumn{{Name: "id", From: "subject"}, {Name: "version", From: "resourceversion"}},
	}, {
		Name: "history", Types: []string{"order.updated", "order.deleted"}, Table: "order_events", Mode: config.SinkInsert,
		Key:     []string{"event_key"},
		Columns: []config.SinkColumn{{Name: "event_key", From: "key"}, {Name: "order_id", From: "subject"}, {Name: "kind", From: "type"}},
	}}
}

func setup(t *testing.T, schemaSQL string, sinks []config.Sink) (pgtest.DB, *handlers.Registry, error) {
	db := pgtest.New(t)
	_, err := db.Pool.Exec(context.Background(), schemaSQL)
	require.NoError(t, err)
	var reg handlers.Registry
	set, err := sink.Register(&reg, sinks)
	require.NoError(t, err)
	return db, &reg, set.Check(context.Background(), db.Pool, &reg, func(s config.Sink) bool { return s.Topic == "cdc" })
}

// apply runs one event through its type's sink handler in a transaction of
// its own and returns its outcome.
func apply(t *testing.T, db pgtest.DB, reg *handlers.Registry, topic string, ev event.Event) handling.Outcome {
	ctx := context.Background()
	h, ok := handling.Of(reg).Handler(ev.Type)
	require.True(t, ok, ev.Type)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit: a no-op
	e := handling.NewEffects(handling.Of(reg).Env(nil, outbox.Expiry{}, nil, 0))
	out := e.Begin(handlers.Origin{Topic: topic}, ev)
	if err := h.Handle(ctx, e.Effects(), ev); err != nil {
		require.True(t, event.IsPermanent(err), err)
		return handling.Outcome{Disposition: dedupe.DeadLettered, Err: err}
	}
	require.NoError(t, e.Flush(ctx, tx))
	require.NoError(t, tx.Commit(ctx))
	return *out
}

func order(key, id string, version int64, data string) event.Event {
	return event.Event{Type: "order.updated", Key: key, Subject: id, Version: version, Data: []byte(data)}
}

// A sink writes the newest state, stale for older versions, one history
// row per event, every typed column converted; a deletion leaves a
// tombstone that makes an older update stale.
func TestSinkWritesTypedRowsThroughTheVersionGate(t *testing.T) {
	db, reg, err := setup(t, ordersSchema, ordersSinks())
	require.NoError(t, err)
	full := `{"status":"paid","total":"12.50","paid":true,"placed_at":"2026-11-30T10:00:00Z","lines":[{"qty":3}],"meta":{"a":[1,2]}}`
	require.Equal(t, dedupe.Applied, apply(t, db, reg, "shop", order("e2", "o1", 2, full)).Disposition)
	require.Equal(t, dedupe.Stale, apply(t, db, reg, "shop", order("e1", "o1", 1, `{"status":"new"}`)).Disposition)
	var status, total, channel, meta string
	var paid bool
	var qty int
	var placed time.Time
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT status, total::text, paid, placed_at, qty, meta::text, channel FROM orders WHERE id = 'o1'`).
		Scan(&status, &total, &paid, &placed, &qty, &meta, &channel))
	require.Equal(t, []any{"paid", "12.50", true, 3, `{"a": [1, 2]}`, "web"}, []any{status, total, paid, qty, meta, channel})
	require.True(t, placed.Equal(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)))

	del := event.Event{Type: "order.deleted", Key: "e3", Subject: "o1", Version: 3, Data: []byte(`{}`)}
	require.Equal(t, dedupe.Applied, apply(t, db, reg, "shop", del).Disposition)
	require.Zero(t, db.Count(t, `SELECT count(*) FROM orders`))
	// An older update after the deletion does not bring the order back.
	require.Equal(t, dedupe.Stale, apply(t, db, reg, "shop", order("e2b", "o1", 2, full)).Disposition)
	require.Zero(t, db.Count(t, `SELECT count(*) FROM orders`))
	require.Equal(t, dedupe.Applied, apply(t, db, reg, "shop", order("e4", "o1", 4, `{"status":"reopened"}`)).Disposition)
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM orders WHERE status = 'reopened' AND total IS NULL`))
	// The history sink took every event (it has no topic: every topic).
	require.Equal(t, int64(5), db.Count(t, `SELECT count(*) FROM order_events`))
}

// An insert sink's running total: each distinct event's amount is added
// once, a redelivery (its row exists) adds nothing, and the start-up check
// refuses a totals table whose key no unique constraint covers.
func TestSinkTotals(t *testing.T) {
	sinks := []config.Sink{{
		Name: "payments", Types: []string{"payment.received"}, Table: "payments", Mode: config.SinkInsert,
		Key: []string{"event_key"},
		Columns: []config.SinkColumn{{Name: "event_key", From: "key"}, {Name: "customer", From: "subject"},
			{Name: "amount_cents", From: "/amount_cents", Type: "bigint"}},
		Totals: []config.SinkTotal{{Table: "balances", Key: []string{"customer_id"}, KeyFrom: []string{"customer"},
			Column: "balance_cents", Delta: "amount_cents", Touch: []string{"updated_at"}}},
	}}
	schemaSQL := `
CREATE TABLE payments (event_key text PRIMARY KEY, customer text NOT NULL, amount_cents bigint NOT NULL);
CREATE TABLE balances (customer_id text PRIMARY KEY, balance_cents bigint NOT NULL DEFAULT 0, updated_at timestamptz);`
	db, reg, err := setup(t, schemaSQL, sinks)
	require.NoError(t, err)
	pay := func(key, customer string, cents int) event.Event {
		return event.Event{Type: "payment.received", Key: key, Subject: customer, Data: []byte(fmt.Sprintf(`{"amount_cents": %d}`, cents))}
	}
	for _, ev := range []event.Event{pay("p1", "c1", 500), pay("p2", "c1", -120), pay("p1", "c1", 500), pay("p3", "c2", 70)} {
		require.Equal(t, dedupe.Applied, apply(t, db, reg, "shop", ev).Disposition)
	}
	require.Equal(t, int64(380), db.Count(t, `SELECT balance_cents FROM balances WHERE customer_id = 'c1'`))
	require.Equal(t, int64(70), db.Count(t, `SELECT balance_cents FROM balances WHERE customer_id = 'c2'`))
	require.Equal(t, int64(3), db.Count(t, `SELECT count(*) FROM payments`))

	_, _, err = setup(t, `
CREATE TABLE payments (event_key text PRIMARY KEY, customer text NOT NULL, amount_cents bigint NOT NULL);
CREATE TABLE balances (customer_id text, balance_cents bigint NOT NULL DEFAULT 0, updated_at timestamptz);`, sinks)
	require.ErrorContains(t, err, "table balances column customer_id: no primary key or unique constraint covers exactly the key")
}

// A value that does not fit its column dead-letters the event with
// invalid_payload, naming the sink and the column; nothing of it applies.
func TestSinkDeadLettersABadValueNamingItsColumn(t *testing.T) {
	db, reg, err := setup(t, ordersSchema, ordersSinks())
	require.NoError(t, err)
	for _, c := range []struct {
		data, want string
	}{
		{`{"total":"1"}`, "column status (from /status): is missing or null"},
		{`{"status":null}`, "column status (from /status): is missing or null"},
		{`{"status":"much-too-long-status"}`, "column status (from /status): is 20 characters long; the column takes at most 12"},
		{`{"status":"ok","total":"abc"}`, `column total (from /total): "abc" is not a number`},
		{`{"status":"ok","total":"12345678901.5"}`, `column total (from /total): "12345678901.5" is too large for the column's numeric(12,2)`},
		{`{"status":"ok","total":1e10}`, `column total (from /total): "1e10" is too large for the column's numeric(12,2)`},
		{`{"status":"ok","paid":"perhaps"}`, `column paid (from /paid): "perhaps" is not true or false`},
		{`{"status":"ok","placed_at":"yesterday"}`, `column placed_at (from /placed_at): "yesterday" is not an RFC 3339 time`},
		{`{"status":"ok","lines":[{"qty":1.5}]}`, `column qty (from /lines/0/qty): "1.5" is not an integer`},
		{`{"status":"ok","lines":[{"qty":3000000000}]}`, "column qty (from /lines/0/qty): 3000000000 is out of the column's range"},
		{`{"status":{"a":1}}`, "column status (from /status): is a JSON object, not a text"},
		{`[1,2`, "sink orders: the event's data is not JSON"},
	} {
		out := apply(t, db, reg, "shop", order("bad", "o9", 1, c.data))
		require.Equal(t, dedupe.DeadLettered, out.Disposition, c.data)
		require.Equal(t, sink.ReasonInvalidPayload, event.ReasonOf(out.Err), c.data)
		require.Contains(t, out.Err.Error(), c.want, c.data)
		require.Contains(t, out.Err.Error(), "sink orders", c.data)
	}
	ev := event.Event{Type: "order.updated", Key: "nov", Subject: "o9", Data: []byte(`{"status":"ok"}`)}
	out := apply(t, db, reg, "shop", ev)
	require.ErrorContains(t, out.Err, "column version (from resourceversion): is missing or null")
	require.Zero(t, db.Count(t, `SELECT count(*) FROM orders`))
	// On another topic only the sinks without a topic take the event.
	require.Equal(t, dedupe.Applied, apply(t, db, reg, "elsewhere", order("x", "o9", 1, `{"status":"ok"}`)).Disposition)
	require.Zero(t, db.Count(t, `SELECT count(*) FROM orders`))
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM order_events WHERE event_key = 'x'`))
}

// The start-up check refuses a sink whose table does not fit, naming the
// sink, the column and the fix.
func TestSinkStartupCheckNamesSinkColumnAndFix(t *testing.T) {
	for _, c := range []struct {
		name, schema string
		want         []string
	}{
		{"missing column", strings.Replace(ordersSchema, "paid boolean,", "", 1),
			[]string{"sink orders", "column paid does not exist in table orders", "add it in a migration"}},
		{"no unique key", strings.Replace(ordersSchema, "id text PRIMARY KEY", "id text", 1),
			[]string{"sink orders, order-deletes", "column id", "no primary key or unique constraint", "ADD UNIQUE (id)"}},
		{"incompatible type", strings.Replace(ordersSchema, "qty integer", "qty boolean", 1),
			[]string{"sink orders", "column qty of table orders is boolean", "cannot take values read as bigint", "set the column's type in sinks[].columns[].type to one that fits (boolean)"}},
		{"optional but not null", strings.Replace(ordersSchema, "paid boolean,", "paid boolean NOT NULL DEFAULT false,", 1),
			[]string{"sink orders", "column paid of table orders is boolean", "is NOT NULL, but the sink's column is optional", "make the column nullable in a migration, or remove optional"}},
		{"missing table", strings.Replace(ordersSchema, "CREATE TABLE order_events", "CREATE TABLE other_events", 1),
			[]string{"sink history", "table order_events does not exist", "create it in a migration"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := setup(t, c.schema, ordersSinks())
			require.Error(t, err)
			for _, w := range c.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

// Config validation catches what needs no database.
func TestSinkConfigValidation(t *testing.T) {
	base := config.Default()
	base.Kafka.Topics = []string{"shop"}
	for _, c := range []struct {
		name   string
		change func(s []config.Sink)
		want   string
	}{
		{"unknown mode", func(s []config.Sink) { s[0].Mode = "merge" }, "sinks[0].mode"},
		{"key not a column", func(s []config.Sink) { s[0].Key = []string{"nope"} }, "is not one of the sink's columns"},
		{"upsert without version", func(s []config.Sink) { s[0].Version = "" }, "mode upsert needs the version column"},
		{"topic not consumed", func(s []config.Sink) { s[0].Topic = "other" }, "is not in kafka.topics"},
		{"bad pointer", func(s []config.Sink) { s[0].Columns[2].From = "status" }, "must be a JSON pointer"},
		{"two writers", func(s []config.Sink) { s[2].Table = "orders"; s[2].Mode = config.SinkUpsert; s[2].Version = "x" }, "another sink writes this table"},
		{"unknown type", func(s []config.Sink) { s[0].Columns[3].Type = "money" }, "must be one of text, bigint"},
		{"total of an upsert sink", func(s []config.Sink) {
			s[0].Totals = []config.SinkTotal{{Table: "t", Key: []string{"id"}, Column: "n", Delta: "qty"}}
		}, "a total is kept from the rows of an insert sink"},
		{"total's delta not a column", func(s []config.Sink) {
			s[2].Totals = []config.SinkTotal{{Table: "t", Key: []string{"order_id"}, Column: "n", Delta: "amount"}}
		}, "sinks[2].totals[0].delta"},
		{"total's delta optional", func(s []config.Sink) {
			s[2].Columns = append(s[2].Columns, config.SinkColumn{Name: "amount", From: "/amount", Type: "bigint", Optional: true})
			s[2].Totals = []config.SinkTotal{{Table: "t", Key: []string{"order_id"}, Column: "n", Delta: "amount"}}
		}, "is an optional column: a row without it would add nothing"},
		{"total's key not a column", func(s []config.Sink) {
			s[2].Totals = []config.SinkTotal{{Table: "t", Key: []string{"customer"}, Column: "n", Delta: "kind"}}
		}, "sinks[2].totals[0].key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := base
			cfg.Sinks = ordersSinks()
			c.change(cfg.Sinks)
			require.ErrorContains(t, cfg.Validate(), c.want)
		})
	}
	cfg := base
	cfg.Sinks = ordersSinks()
	require.NoError(t, cfg.Validate())
}

// A date column: type date reads a number as days since 1970 (how
// Debezium, Kafka Connect and Avro write a date) and a string as
// YYYY-MM-DD; a number read as timestamptz into a date column is refused,
// naming type date, rather than written as a day of January 1970.
func TestSinkDateColumns(t *testing.T) {
	sinks := []config.Sink{{
		Name: "people", Types: []string{"person.updated"}, Table: "people", Mode: config.SinkUpsert,
		Key: []string{"id"}, Version: "version",
		Columns: []config.SinkColumn{
			{Name: "id", From: "subject"},
			{Name: "version", From: "resourceversion"},
			{Name: "born", From: "/born", Type: "date", Optional: true},
			{Name: "seen", From: "/seen", Type: "timestamptz", Optional: true},
		},
	}}
	db, reg, err := setup(t, `CREATE TABLE people (id text PRIMARY KEY, version bigint NOT NULL, born date, seen date);`, sinks)
	require.NoError(t, err)
	person := func(id, data string) event.Event {
		return event.Event{Type: "person.updated", Key: id, Subject: id, Version: 1, Data: []byte(data)}
	}
	for id, c := range map[string]struct{ data, born, seen string }{
		"days":       {`{"born":20427}`, "2025-12-05", ""},
		"negative":   {`{"born":-1}`, "1969-12-31", ""},
		"first":      {`{"born":-719162}`, "0001-01-01", ""},
		"last":       {`{"born":2932896}`, "9999-12-31", ""},
		"string":     {`{"born":"2026-02-28"}`, "2026-02-28", ""},
		"seen-text":  {`{"seen":"2026-12-05"}`, "", "2026-12-05"},
		"seen-stamp": {`{"seen":"2026-12-05T10:00:00Z"}`, "", "2026-12-05"},
	} {
		require.Equal(t, dedupe.Applied, apply(t, db, reg, "people", person(id, c.data)).Disposition, id)
		var born, seen *string
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT born::text, seen::text FROM people WHERE id = $1`, id).Scan(&born, &seen))
		for _, got := range []struct {
			col  *string
			want string
		}{{born, c.born}, {seen, c.seen}} {
			if got.want == "" {
				require.Nil(t, got.col, id)
			} else {
				require.NotNil(t, got.col, id)
				require.Equal(t, got.want, *got.col, id)
			}
		}
	}
	for _, c := range []struct{ data, want string }{
		{`{"seen":20427}`, "column seen (from /seen): is the number \"20427\", written to a date column: a date as a number is days since 1970 (Debezium, Kafka Connect, Avro) — read it as type: date"},
		{`{"born":20427.5}`, `column born (from /born): "20427.5" is not a date as days since 1970`},
		{`{"born":2932897}`, `column born (from /born): "2932897" is not a date as days since 1970`},
		{`{"born":-719163}`, `is not a date as days since 1970`},
		{`{"born":1e400}`, `is not a date as days since 1970`},
		{`{"born":"2026-02-30"}`, `column born (from /born): "2026-02-30" is not a date (YYYY-MM-DD)`},
		{`{"born":"2026-12-05T00:00:00Z"}`, `is not a date (YYYY-MM-DD)`},
		{`{"born":true}`, "column born (from /born): is a boolean, not a date"},
	} {
		out := apply(t, db, reg, "people", person("bad", c.data))
		require.Equal(t, dedupe.DeadLettered, out.Disposition, c.data)
		require.Equal(t, sink.ReasonInvalidPayload, event.ReasonOf(out.Err), c.data)
		require.Contains(t, out.Err.Error(), c.want, c.data)
	}
	require.Zero(t, db.Count(t, `SELECT count(*) FROM people WHERE id = 'bad'`))

	// A date sink column fits only a date column.
	sinks[0].Columns[2].Name = "seen_at"
	_, _, err = setup(t, `CREATE TABLE people (id text PRIMARY KEY, version bigint NOT NULL, seen_at timestamptz, seen date);`, sinks)
	require.ErrorContains(t, err, "cannot take values read as date")
}

// A sink of a Debezium topic gates on the change's order, a Version then a
// Sequence: its version column must hold both (numeric), and does.
func TestSinkOfChangeEventsGatesOnTheCommitOrder(t *testing.T) {
	sinks := []config.Sink{{
		Name: "replica", Topic: "cdc", Types: []string{"c.update"}, Table: "replica", Mode: config.SinkUpsert,
		Key: []string{"id"}, Version: "version",
		Columns: []config.SinkColumn{{Name: "id", From: "subject"}, {Name: "version", From: "resourceversion"}, {Name: "status", From: "/status"}},
	}, {
		Name: "replica-deletes", Topic: "cdc", Types: []string{"c.delete"}, Table: "replica", Mode: config.SinkDelete,
		Key: []string{"id"}, Version: "version",
		Columns: []config.SinkColumn{{Name: "id", From: "subject"}, {Name: "version", From: "resourceversion"}},
	}, {
		Name: "history", Topic: "cdc", Types: []string{"c.update", "c.delete"}, Table: "history", Mode: config.SinkInsert,
		Key:     []string{"event_key"},
		Columns: []config.SinkColumn{{Name: "event_key", From: "key"}, {Name: "version", From: "resourceversion", Type: "numeric"}},
	}}
	const history = `CREATE TABLE history (event_key text PRIMARY KEY, version numeric NOT NULL);`
	for _, typ := range []string{"bigint", "numeric(30,0)", "numeric(38,20)"} {
		_, _, err := setup(t, `CREATE TABLE replica (id text PRIMARY KEY, version `+typ+` NOT NULL, status text);`+history, sinks)
		require.ErrorContains(t, err, "sink replica: version column version of table replica is "+typ+", which cannot hold a Debezium change's order", typ)
		require.ErrorContains(t, err, "ALTER TABLE replica ALTER COLUMN version TYPE numeric", typ)
	}
	db, reg, err := setup(t, `CREATE TABLE replica (id text PRIMARY KEY, version numeric NOT NULL, status text);`+history, sinks)
	require.NoError(t, err)

	// The insert that waited on a key another transaction deleted: its
	// LSN is below the delete's, its transaction committed after.
	const commitA, commitB = event.StreamedVersion + 50, event.StreamedVersion + 400
	change := func(typ string, version, seq int64, status string) handling.Outcome {
		ev := event.Event{Type: typ, Key: fmt.Sprint(version, seq), Subject: "1", Version: version, Sequence: seq, Data: []byte(`{"status":"` + status + `"}`)}
		return apply(t, db, reg, "cdc", ev)
	}
	require.Equal(t, dedupe.Applied, change("c.update", commitA, 100, "a").Disposition)
	require.Equal(t, dedupe.Applied, change("c.delete", commitA, 300, "").Disposition)
	require.Equal(t, dedupe.Applied, change("c.update", commitB, 200, "b").Disposition, "B committed after A: newer, whatever its LSN")
	require.Equal(t, dedupe.Stale, change("c.update", commitA, 250, "a2").Disposition, "a change of A, older than B's")
	var version, status string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT version::text, status FROM replica WHERE id = '1'`).Scan(&version, &status))
	require.Equal(t, []string{"1000000000000000400.00000000000000000200", "b"}, []string{version, status})
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM history WHERE version = 1000000000000000050.00000000000000000300`), "the history's version is the change's order too")
}
