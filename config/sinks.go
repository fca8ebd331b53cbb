package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// Sink maps events of some types to rows of one table: a config-only sink,
// the whole of a build for teams that write no code. The engine applies its
// rows with the same typed effects as a Go handler's (version-gated upserts,
// insert-once, gated deletes), so duplicates and disorder are harmless. At
// start-up every sink is checked against the live table.
type Sink struct {
	// Name identifies the sink in errors and logs.
	Name string `mapstructure:"name"`
	// Topic is the topic whose events the sink takes (one of kafka.topics);
	// empty: every consumed topic.
	Topic string `mapstructure:"topic"`
	// Types are the event types the sink takes. Several sinks may take one
	// type (an order's state and its history, from the same event).
	Types []string `mapstructure:"types"`
	// Table is the table the sink writes, optionally schema-qualified.
	Table string `mapstructure:"table"`
	// Mode is upsert (absolute state, version-gated: an older version is
	// stale), insert (one row per key, never changed: relative facts such
	// as payments or stock movements) or delete (version-gated; it leaves a tombstone so
	// an older upsert arriving later is stale).
	Mode string `mapstructure:"mode"`
	// Key are the columns (named in columns) that identify a row; a primary
	// key or unique constraint of the table must cover exactly them.
	Key []string `mapstructure:"key"`
	// Version is the version column (named in columns) for modes upsert and
	// delete, usually from resourceversion.
	Version string `mapstructure:"version"`
	// Touch are columns set to now() whenever a row is written (updated_at).
	Touch []string `mapstructure:"touch"`
	// Columns say where each column's value comes from.
	Columns []SinkColumn `mapstructure:"columns"`
	// Totals are running totals an insert sink keeps: each row it inserts
	// adds a column's value to a keyed row of another table, exactly once
	// (a row that existed adds nothing).
	Totals []SinkTotal `mapstructure:"totals"`
}

// SinkTotal is a running total kept from an insert sink's rows: a row of
// Table, keyed by Key, whose Column is the sum of the sink's Delta column
// over its rows with that key.
type SinkTotal struct {
	// Table is the totals table, optionally schema-qualified.
	Table string `mapstructure:"table"`
	// Key are the totals table's key columns (a primary key or unique
	// constraint must cover exactly them); each takes the sink's column of
	// the same name, or of KeyFrom.
	Key []string `mapstructure:"key"`
	// KeyFrom are the sink's columns the key takes, in Key's order, when
	// the names differ.
	KeyFrom []string `mapstructure:"key_from"`
	// Column is the totals table's numeric column that holds the total.
	Column string `mapstructure:"column"`
	// Delta is the sink's numeric column each row adds.
	Delta string `mapstructure:"delta"`
	// Touch are columns of the totals table set to now() when it changes.
	Touch []string `mapstructure:"touch"`
}

// SinkColumn is one column of a sink's rows and where its value comes from.
type SinkColumn struct {
	// Name is the column.
	Name string `mapstructure:"name"`
	// From is the value's source: subject (the resource ID), resourceversion,
	// id, type, source, time, key (the event key the worker deduplicates by),
	// or a JSON pointer into the event's data (/status, /items/0/sku; for a
	// topic of format json, into the whole record).
	From string `mapstructure:"from"`
	// Value is a constant instead of From.
	Value string `mapstructure:"value"`
	// Type is how the value is read and written: text, bigint, numeric,
	// boolean, timestamptz, date or jsonb; default text (bigint for
	// resourceversion, timestamptz for time).
	Type string `mapstructure:"type"`
	// Optional: a missing or null value writes NULL; otherwise the event is
	// dead-lettered (invalid_payload, naming the column).
	Optional bool `mapstructure:"optional"`
}

// The sink modes.
const (
	SinkUpsert = "upsert"
	SinkInsert = "insert"
	SinkDelete = "delete"
)

// SinkTypes are the column types a sink reads values as.
var SinkTypes = []string{"text", "bigint", "numeric", "boolean", "timestamptz", "date", "jsonb"}

// SinkSources are the event attributes a column can come from, besides a
// JSON pointer into the data.
var SinkSources = []string{"subject", "resourceversion", "id", "type", "source", "time", "key"}

var (
	sinkFields   = collectLeaves(reflect.TypeFor[Sink](), "", nil)
	columnFields = collectLeaves(reflect.TypeFor[SinkColumn](), "", nil)
	totalFields  = collectLeaves(reflect.TypeFor[SinkTotal](), "", nil)
)

// parseSinks decodes the sinks: list of the file.
func parseSinks(raw any) ([]Sink, []error) {
	return parseList[Sink](raw, recordList{
		key: "sinks", noun: "sink", fields: sinkFields, what: "sinks", one: "one sink",
		example:      "{name: orders, types: [order.updated], table: orders, mode: upsert, key: [id], version: version, columns: [...]}",
		fieldExample: sinkExample,
		nested: map[string]func(string, any, reflect.Value) []error{
			"columns": func(key string, raw any, rv reflect.Value) []error {
				cols, errs := parseList[SinkColumn](raw, recordList{
					key: key, noun: "column", fields: columnFields, what: "columns", one: "one column",
					example: "{name: status, from: /status, type: text}", fieldExample: sinkExample,
				})
				rv.FieldByName("Columns").Set(reflect.ValueOf(cols))
				return errs
			},
			"totals": func(key string, raw any, rv reflect.Value) []error {
				totals, errs := parseList[SinkTotal](raw, recordList{
					key: key, noun: "total", fields: totalFields, what: "totals", one: "one total",
					example: "{table: balances, key: [account_id], column: balance_cents, delta: amount_cents}", fieldExample: sinkExample,
				})
				rv.FieldByName("Totals").Set(reflect.ValueOf(totals))
				return errs
			},
		},
	})
}

func sinkExample(field string) string {
	switch field {
	case "types":
		return "[order.created, order.updated]"
	case "mode":
		return SinkUpsert
	case "key":
		return "[id]"
	case "touch":
		return "[updated_at]"
	case "from":
		return "/status"
	case "type":
		return "text"
	case "optional":
		return "true"
	default: // name, topic, table, version, value
		return "orders"
	}
}

// SourceType is the default type of a column read from source.
func SourceType(from string) string {
	switch from {
	case "resourceversion":
		return "bigint"
	case "time":
		return "timestamptz"
	}
	return "text"
}

// TypeOf is the column's type: its Type, else its source's default.
func (c SinkColumn) TypeOf() string {
	if c.Type != "" {
		return c.Type
	}
	return SourceType(c.From)
}

func (c Config) validateSinks(v *validator) {
	names := map[string]int{}
	tables := map[string][]int{} // table → sinks writing it
	for i, s := range c.Sinks {
		key := func(f string) string { return fmt.Sprintf("sinks[%d].%s", i, f) }
		add := func(f, value, problem, ex string) {
			v.add(key(f), value, fmt.Sprintf("(sink %s) %s", s.Name, problem), fileFix(key(f), ex))
		}
		if s.Name == "" {
			v.add(key("name"), "", "must not be empty", fileFix(key("name"), "orders"))
		} else if j, dup := names[s.Name]; dup {
			v.add(key("name"), s.Name, fmt.Sprintf("is already the name of sinks[%d]", j), "give each sink its own name")
		}
		names[s.Name] = i
		if s.Topic != "" && !slices.Contains(c.Kafka.Topics, s.Topic) {
			add("topic", s.Topic, "is not in kafka.topics, so the sink never sees an event",
				"one of kafka.topics, or add it there ("+where("kafka.topics")+")")
		}
		if len(s.Types) == 0 || slices.Contains(s.Types, "") {
			add("types", strings.Join(s.Types, ","), "must name the event types the sink takes", "[order.updated]")
		}
		if s.Table == "" {
			add("table", "", "must name the table the sink writes", "orders")
		}
		switch s.Mode {
		case SinkUpsert, SinkInsert, SinkDelete:
		default:
			add("mode", s.Mode, "must be one of upsert, insert, delete", SinkUpsert)
		}
		cols := map[string]SinkColumn{}
		for j, col := range s.Columns {
			ck := func(f string) string { return fmt.Sprintf("sinks[%d].columns[%d].%s", i, j, f) }
			cadd := func(f, value, problem, ex string) {
				v.add(ck(f), value, fmt.Sprintf("(sink %s) %s", s.Name, problem), fileFix(ck(f), ex))
			}
			if col.Name == "" {
				cadd("name", "", "must name a column", "status")
				continue
			}
			if _, dup := cols[col.Name]; dup {
				cadd("name", col.Name, "is named twice", "remove one of them")
			}
			cols[col.Name] = col
			switch {
			case col.From == "" && col.Value == "":
				cadd("from", "", "needs a source (from) or a constant (value)", "/"+col.Name)
			case col.From != "" && col.Value != "":
				cadd("value", col.Value, "is a constant, but from is set too", `"" (remove one of them)`)
			case col.From != "" && !strings.HasPrefix(col.From, "/") && !slices.Contains(SinkSources, col.From):
				cadd("from", col.From, "must be a JSON pointer (/status) or one of "+strings.Join(SinkSources, ", "), "/"+col.Name)
			case strings.HasPrefix(col.From, "/"):
				if pp := pointerProblem(col.From); pp != "" {
					cadd("from", col.From, pp, "/"+col.Name)
				}
			}
			if col.Type != "" && !slices.Contains(SinkTypes, col.Type) {
				cadd("type", col.Type, "must be one of "+strings.Join(SinkTypes, ", "), "text")
			}
		}
		if len(s.Key) == 0 {
			add("key", "", "must name the columns that identify a row", "[id]")
		}
		for _, k := range s.Key {
			if _, ok := cols[k]; !ok {
				add("key", k, "is not one of the sink's columns", "[id] with a column named id")
			}
		}
		switch {
		case s.Mode == SinkInsert && s.Version != "":
			add("version", s.Version, "is only used by modes upsert and delete", `"" (remove it)`)
		case (s.Mode == SinkUpsert || s.Mode == SinkDelete) && s.Version == "":
			add("version", "", "mode "+s.Mode+" needs the version column", "version")
		case s.Version != "":
			if _, ok := cols[s.Version]; !ok {
				add("version", s.Version, "is not one of the sink's columns", "version, with a column {name: version, from: resourceversion}")
			} else if slices.Contains(s.Key, s.Version) {
				add("version", s.Version, "is also a key column", "a column of its own")
			}
		}
		for j, tt := range s.Totals {
			tk := func(f string) string { return fmt.Sprintf("sinks[%d].totals[%d].%s", i, j, f) }
			tadd := func(f, value, problem, ex string) {
				v.add(tk(f), value, fmt.Sprintf("(sink %s) %s", s.Name, problem), fileFix(tk(f), ex))
			}
			if s.Mode != SinkInsert {
				tadd("table", tt.Table, "a total is kept from the rows of an insert sink, not mode "+s.Mode, "move the total to an insert sink (a history of the events)")
			}
			if tt.Table == "" {
				tadd("table", "", "must name the totals table", "balances")
			}
			if tt.Column == "" {
				tadd("column", "", "must name the totals table's column that holds the total", "balance_cents")
			}
			if dc, ok := cols[tt.Delta]; !ok {
				tadd("delta", tt.Delta, "must be one of the sink's columns: the value each row adds", "amount_cents, with a column {name: amount_cents, from: /amount_cents, type: bigint}")
			} else if dc.Optional {
				tadd("delta", tt.Delta, "is an optional column: a row without it would add nothing, or make the total NULL", "remove optional from column "+tt.Delta)
			}
			if len(tt.Key) == 0 {
				tadd("key", "", "must name the totals table's key columns", "[account_id]")
			}
			if len(tt.KeyFrom) > 0 && len(tt.KeyFrom) != len(tt.Key) {
				tadd("key_from", strings.Join(tt.KeyFrom, ","), fmt.Sprintf("names %d columns for a key of %d", len(tt.KeyFrom), len(tt.Key)), "one sink column per key column")
			}
			from := tt.KeyFrom
			if len(from) == 0 {
				from = tt.Key
			}
			for _, k := range from {
				if kc, ok := cols[k]; !ok {
					tadd("key", k, "is not one of the sink's columns (name them in key_from when the names differ)", "[account_id] with a sink column named account_id")
				} else if kc.Optional {
					tadd("key", k, "is an optional column: a row without it would have no total", "remove optional from column "+k)
				}
			}
		}
		if s.Table != "" {
			tables[s.Table] = append(tables[s.Table], i)
		}
	}
	// One table, one shape of row: one upsert or insert sink, and at most
	// one delete sink with the same key and version.
	for table, is := range tables {
		var writers, deleters []int
		for _, i := range is {
			if c.Sinks[i].Mode == SinkDelete {
				deleters = append(deleters, i)
			} else {
				writers = append(writers, i)
			}
		}
		if len(writers) > 1 || len(deleters) > 1 {
			v.add(fmt.Sprintf("sinks[%d].table", is[1]), table,
				"another sink writes this table in the same way; a table has one upsert or insert sink and at most one delete sink",
				"merge the sinks (a sink takes several types)")
			continue
		}
		if len(writers) == 1 && len(deleters) == 1 {
			w, d := c.Sinks[writers[0]], c.Sinks[deleters[0]]
			if w.Mode != SinkUpsert || !slices.Equal(w.Key, d.Key) || w.Version != d.Version {
				v.add(fmt.Sprintf("sinks[%d].key", deleters[0]), strings.Join(d.Key, ","),
					fmt.Sprintf("a delete sink needs an upsert sink of table %s with the same key and version (sink %s)", table, w.Name),
					"the key and version of sink "+w.Name)
			}
		}
	}
}
