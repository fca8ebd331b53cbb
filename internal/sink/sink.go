package sink

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/handling"
)

// ReasonInvalidPayload: a value a sink reads does not fit its column: it
// is missing or null (and the column is not optional), of the wrong JSON
// type, out of the column's range or longer than it. The error names the
// sink, the column and the value's source.
const ReasonInvalidPayload event.Reason = "invalid_payload"

// Set is a build's config-only sinks, registered on its handler registry.
type Set struct {
	sinks  []*sink
	tables map[string]*handlers.Table // by table name
}

// sink is one configured sink, ready to turn events into rows.
type sink struct {
	cfg   config.Sink
	table *handlers.Table
	// cols are the values of a row in the table's order: key, then the
	// other columns (for a delete sink: the key only).
	cols []*column
	// version reads the version (upsert, delete).
	version *column
	// pointers: some column reads the event's data.
	pointers bool
}

// Register adds sinks to r: one typed-effect table per table the sinks
// write, and a handler for every event type they take. It fails when a
// type already has a handler of the build's own.
func Register(r *handlers.Registry, sinks []config.Sink) (*Set, error) {
	set := &Set{tables: map[string]*handlers.Table{}}
	byType := map[string][]*sink{}
	var errs []error
	// Upsert and insert sinks declare their table; a delete sink then
	// marks it as taking deletes (config validation paired them).
	ordered := slices.Clone(sinks)
	slices.SortStableFunc(ordered, func(a, b config.Sink) int {
		return boolInt(a.Mode == config.SinkDelete) - boolInt(b.Mode == config.SinkDelete)
	})
	for _, sc := range ordered {
		s, err := newSink(sc)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		t, ok := set.tables[sc.Table]
		switch {
		case !ok:
			t = s.declaration()
			set.tables[sc.Table] = t
		case sc.Mode == config.SinkDelete:
			t.Deletes = true
		}
		s.table = t
		set.sinks = append(set.sinks, s)
		for _, typ := range sc.Types {
			byType[typ] = append(byType[typ], s)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for _, name := range slices.Sorted(maps.Keys(set.tables)) {
		r.Table(set.tables[name])
	}
	for _, typ := range slices.Sorted(maps.Keys(byType)) {
		if _, taken := handling.Of(r).Handler(typ); taken {
			return nil, fmt.Errorf("event type %s has a handler of this build and sink %s: give it one or the other", typ, byType[typ][0].cfg.Name)
		}
		r.Handle(typ, handler(byType[typ]))
	}
	return set, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func newSink(sc config.Sink) (*sink, error) {
	s := &sink{cfg: sc}
	byName := map[string]config.SinkColumn{}
	for _, c := range sc.Columns {
		byName[c.Name] = c
	}
	add := func(name string) (*column, error) {
		c, err := newColumn(sc.Name, byName[name])
		if err != nil {
			return nil, err
		}
		s.pointers = s.pointers || c.pointer != nil
		return c, nil
	}
	names := slices.Clone(sc.Key)
	if sc.Mode != config.SinkDelete {
		for _, c := range sc.Columns {
			if !slices.Contains(sc.Key, c.Name) && c.Name != sc.Version {
				names = append(names, c.Name)
			}
		}
	}
	for _, n := range names {
		c, err := add(n)
		if err != nil {
			return nil, err
		}
		s.cols = append(s.cols, c)
	}
	if sc.Version != "" {
		c, err := add(sc.Version)
		if err != nil {
			return nil, err
		}
		if c.typ != "bigint" {
			return nil, fmt.Errorf("sink %s: the version column %s must be read as bigint, not %s (set its type: bigint)", sc.Name, sc.Version, c.typ)
		}
		s.version = c
	}
	return s, nil
}

// declaration is the typed-effect table of an upsert or insert sink.
func (s *sink) declaration() *handlers.Table {
	t := &handlers.Table{Name: s.cfg.Table, Key: slices.Clone(s.cfg.Key), Version: s.cfg.Version, Touch: slices.Clone(s.cfg.Touch)}
	for _, c := range s.cols[len(t.Key):] {
		t.Columns = append(t.Columns, c.name)
	}
	if s.cfg.Mode == config.SinkDelete {
		t.Deletes = true
	}
	for _, tt := range s.cfg.Totals {
		t.Totals = append(t.Totals, &handlers.Total{Name: tt.Table, Key: slices.Clone(tt.Key), KeyFrom: slices.Clone(tt.KeyFrom),
			Column: tt.Column, Delta: tt.Delta, Touch: slices.Clone(tt.Touch)})
	}
	return t
}

// handler applies an event of one type with every sink that takes it on
// the event's topic.
func handler(sinks []*sink) handlers.HandlerFunc {
	return func(_ context.Context, e *handlers.Effects, ev event.Event) error {
		topic := e.Origin().Topic
		// The event's data, read for every pointer of its sinks from one
		// index: the decoder's, or one parse here.
		var doc *event.Document
		took := false
		for _, s := range sinks {
			if s.cfg.Topic != "" && s.cfg.Topic != topic {
				continue
			}
			took = true
			if s.pointers && doc == nil {
				d, err := ev.Document()
				if err != nil {
					return event.PermanentWithReason(ReasonInvalidPayload, fmt.Errorf("sink %s: the event's data is not JSON: %w", s.cfg.Name, err))
				}
				doc = d
			}
			if err := s.apply(e, ev, doc); err != nil {
				return err
			}
		}
		if !took {
			return handlers.UnknownType(ev.Type)
		}
		return nil
	}
}

func (s *sink) apply(e *handlers.Effects, ev event.Event, doc *event.Document) error {
	values := make([]any, len(s.cols))
	for i, c := range s.cols {
		v, err := c.read(ev, doc)
		if err != nil {
			return s.invalid(c, err)
		}
		values[i] = v
	}
	var version int64
	if s.version != nil {
		v, err := s.version.read(ev, doc)
		if err != nil {
			return s.invalid(s.version, err)
		}
		n, ok := v.(int64)
		if !ok {
			return s.invalid(s.version, errors.New("is null; a version gate needs a version"))
		}
		version = n
	}
	switch s.cfg.Mode {
	case config.SinkUpsert:
		return e.Upsert(s.table, version, values...)
	case config.SinkDelete:
		return e.Delete(s.table, version, values...)
	default:
		return e.InsertOnce(s.table, values...)
	}
}

func (s *sink) invalid(c *column, err error) error {
	return event.PermanentWithReason(ReasonInvalidPayload, fmt.Errorf("sink %s: column %s (from %s): %w", s.cfg.Name, c.name, c.source(), err))
}

// Check checks every sink against the live database: its table exists,
// every column exists with a type its values fit, a primary key or unique
// constraint covers its key. The errors name the sink, the column and the
// fix. r is the registry Register filled.
//
// sequenced says whether a sink takes events with Sequences (Debezium's):
// a version column that takes their resourceversion must hold them.
func (set *Set) Check(ctx context.Context, q handling.Querier, r *handlers.Registry, sequenced func(config.Sink) bool) error {
	var errs []error
	for _, s := range set.sinks {
		cols, err := handling.TableColumns(ctx, q, s.cfg.Table)
		if err != nil {
			return err
		}
		if cols == nil {
			errs = append(errs, fmt.Errorf("sink %s: table %s does not exist (or the worker's role cannot see it): create it in a migration, or correct sinks[].table", s.cfg.Name, s.cfg.Table))
			continue
		}
		check := append(slices.Clone(s.cols), s.version)
		for _, c := range check {
			if c == nil {
				continue
			}
			col, ok := cols[c.name]
			if !ok {
				errs = append(errs, fmt.Errorf("sink %s: column %s does not exist in table %s: add it in a migration, or correct the sink's columns", s.cfg.Name, c.name, s.cfg.Table))
				continue
			}
			if err := c.fit(col); err != nil {
				errs = append(errs, fmt.Errorf("sink %s: column %s of table %s is %s, which %s", s.cfg.Name, c.name, s.cfg.Table, col.Type, err))
				continue
			}
			if c == s.version && c.from == "resourceversion" && sequenced != nil && sequenced(s.cfg) && !col.HoldsSequence() {
				errs = append(errs, fmt.Errorf("sink %s: version column %s of table %s is %s, which cannot hold a Debezium change's order (the commit it follows, then its LSN, as numeric version.sequence): make it numeric (ALTER TABLE %s ALTER COLUMN %s TYPE numeric), or, if the sink takes no change events, set its topic",
					s.cfg.Name, c.name, s.cfg.Table, col.Type, s.cfg.Table, c.name))
			}
		}
		for _, t := range s.cfg.Touch {
			if _, ok := cols[t]; !ok {
				errs = append(errs, fmt.Errorf("sink %s: touch column %s does not exist in table %s: add it in a migration, or remove it from touch", s.cfg.Name, t, s.cfg.Table))
			}
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := handling.Of(r).CheckTables(ctx, q); err != nil {
		// Name the sinks of the table that does not fit.
		var te *handling.TableError
		if errors.As(err, &te) {
			var names []string
			for _, s := range set.sinks {
				if s.cfg.Table == te.Table {
					names = append(names, s.cfg.Name)
				}
			}
			if len(names) > 0 {
				return fmt.Errorf("sink %s: %w", strings.Join(names, ", "), err)
			}
		}
		return err
	}
	return nil
}
