package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/examples/accounts/workload"
)

// E-sink is the stock binary as a config-only sink: no Go code, a sinks
// section mapping product.updated events to a products table (gated
// upsert: key id ← subject, version ← resourceversion, columns ← data),
// on an upsert-only stream with duplicates and disorder. The bench checks
// the table against the newest version it produced of every product,
// computed from the generated events, never from the worker's own
// bookkeeping.

// sinkWorkload describes the upsert-only stream.
type sinkWorkload struct {
	Products int
	Events   int // records, re-sends included
	// Duplicates is the fraction of records that re-send one of the
	// latest sinkResendWindow originals (same id and payload).
	Duplicates float64
	// OutOfOrder is the fraction of updates that arrive after the
	// product's next update (an older version after a newer one).
	OutOfOrder float64
	Seed       uint64
}

// sinkResendWindow is how many of the latest originals a re-send picks from.
const sinkResendWindow = 1024

// The event type, table and source of the sink workload.
const (
	sinkEventType = "product.updated"
	sinkTable     = "products"
	sinkSource    = "urn:effectively:bench-sink"
)

// sinkTableSQL creates the sink's table. The sink checks it at start-up: a
// primary key covers the key, the version column is an integer.
const sinkTableSQL = `
CREATE TABLE products (
    id          text    NOT NULL PRIMARY KEY,
    version     bigint  NOT NULL,
    name        text    NOT NULL,
    price_cents bigint  NOT NULL,
    in_stock    boolean NOT NULL
)`

// sinkMigration is sinkTableSQL as a migration (goose's format), which the
// stock binary's migrate applies from postgres.migrations: the sink's
// table comes with no code either.
const sinkMigration = "-- +goose Up\n" + sinkTableSQL + ";\n\n-- +goose Down\nDROP TABLE products;\n"

// product is one product's state as the table holds it.
type product struct {
	Version    int64
	Name       string
	PriceCents int64
	InStock    bool
}

// sinkExpected is what a correct sink ends with: the newest produced
// version of every product that was produced at all.
type sinkExpected struct {
	Records   int // produced, re-sends included
	Originals int // distinct events
	Late      int // originals produced after a newer version of their product
	Newest    map[string]product
}

func (e sinkExpected) summary() string {
	return fmt.Sprintf("%d records, %d distinct events (%d re-sends), %d late (an older version after a newer one), %d products",
		e.Records, e.Originals, e.Records-e.Originals, e.Late, len(e.Newest))
}

// productID is the subject and record key of product p.
func productID(p int) string { return fmt.Sprintf("prod-%06d", p) }

// sinkRenderer writes the value of the seq-th original of the stream: a
// product.updated event for product id at version p.Version, produced at
// ts. generateSink calls it once per original; a re-send repeats its bytes.
type sinkRenderer func(seed, seq uint64, id string, ts time.Time, p product) ([]byte, error)

// renderJSON is E-sink's renderer: a CloudEvent in JSON structured mode.
func renderJSON(seed, seq uint64, id string, ts time.Time, p product) ([]byte, error) {
	return renderProduct(seed, seq, id, ts, p), nil
}

// appendEventID appends the event's id, "prd-<seed>-<seq>".
func appendEventID(b []byte, seed, seq uint64) []byte {
	b = append(b, "prd-"...)
	b = strconv.AppendUint(b, seed, 10)
	b = append(b, '-')
	return strconv.AppendUint(b, seq, 10)
}

// generateSink emits the stream: each original updates a product chosen at
// random to its next version; a share of them is held back and emitted
// right after the product's next update (one held at a time per product,
// so the held share q/(1+q) of updates equals OutOfOrder); a share of the
// records re-send a recent original. Only emitted events count in the
// expectation (a held update never released is never produced). render
// writes each original's value: the stream is the same whatever it is.
func generateSink(c sinkWorkload, render sinkRenderer, emit func(workload.Record) error) (sinkExpected, error) {
	exp := sinkExpected{Newest: map[string]product{}}
	if c.Products < 1 || c.Events < 0 || c.Duplicates < 0 || c.Duplicates >= 1 || c.OutOfOrder < 0 || c.OutOfOrder >= 0.5 {
		return exp, fmt.Errorf("sink workload %+v: want ≥ 1 product, duplicates in [0, 1), out-of-order in [0, 0.5)", c)
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x5119c))
	hold := c.OutOfOrder / (1 - c.OutOfOrder)
	versions := make([]int64, c.Products)
	type pending struct {
		rec workload.Record
		p   product
		set bool
	}
	held := make([]pending, c.Products)
	var ring [sinkResendWindow]workload.Record
	ringLen, ringNext := 0, 0
	ts := startTime

	send := func(r workload.Record) error {
		exp.Records++
		return emit(r)
	}
	original := func(id string, r workload.Record, p product, late bool) error {
		exp.Originals++
		if late {
			exp.Late++
		}
		if cur, ok := exp.Newest[id]; !ok || p.Version > cur.Version {
			exp.Newest[id] = p
		}
		ring[ringNext] = r
		ringNext = (ringNext + 1) % sinkResendWindow
		ringLen = min(ringLen+1, sinkResendWindow)
		return send(r)
	}
	var seq uint64
	for exp.Records < c.Events {
		if ringLen > 0 && rng.Float64() < c.Duplicates {
			r := ring[(ringNext-1-rng.IntN(ringLen)+sinkResendWindow)%sinkResendWindow]
			r.Resend = true
			if err := send(r); err != nil {
				return exp, err
			}
			continue
		}
		i := rng.IntN(c.Products)
		id := productID(i)
		versions[i]++
		p := product{
			Version:    versions[i],
			Name:       fmt.Sprintf("Product %d rev %d", i, versions[i]),
			PriceCents: 100 + rng.Int64N(100_000),
			InStock:    rng.IntN(4) != 0,
		}
		seq++
		v, err := render(c.Seed, seq, id, ts, p)
		if err != nil {
			return exp, fmt.Errorf("rendering %s version %d: %w", id, p.Version, err)
		}
		r := workload.Record{Key: []byte(id), Value: v, Timestamp: ts}
		if h := held[i]; h.set {
			held[i] = pending{}
			if err := original(id, r, p, false); err != nil {
				return exp, err
			}
			if exp.Records < c.Events {
				if err := original(id, h.rec, h.p, true); err != nil {
					return exp, err
				}
			}
			continue
		}
		if rng.Float64() < hold {
			held[i] = pending{rec: r, p: p, set: true}
			continue
		}
		if err := original(id, r, p, false); err != nil {
			return exp, err
		}
	}
	return exp, nil
}

// renderProduct writes a product.updated CloudEvent in JSON structured mode.
func renderProduct(seed, seq uint64, id string, ts time.Time, p product) []byte {
	b := make([]byte, 0, 320)
	b = append(b, `{"specversion":"1.0","id":"`...)
	b = appendEventID(b, seed, seq)
	b = append(b, `","source":"`+sinkSource+`","type":"`+sinkEventType+`","subject":"`...)
	b = append(b, id...)
	b = append(b, `","time":"`...)
	b = ts.AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
	b = append(b, `","datacontenttype":"application/json","resourceversion":`...)
	b = strconv.AppendInt(b, p.Version, 10)
	b = append(b, `,"data":{"name":"`...)
	b = append(b, p.Name...)
	b = append(b, `","price_cents":`...)
	b = strconv.AppendInt(b, p.PriceCents, 10)
	b = append(b, `,"in_stock":`...)
	b = strconv.AppendBool(b, p.InStock)
	return append(b, `}}`...)
}

// sinkCheck is how the table compares with the expectation.
type sinkCheck struct {
	Rows        int // rows in the table
	Regressions int // rows at an older version than the newest produced
	Missing     int // products produced but absent
	Mismatched  int // rows at the newest version whose columns differ from it
	Unexpected  int // rows for products never produced, or newer than produced
	examples    []string
}

func (c sinkCheck) ok() bool {
	return c.Regressions == 0 && c.Missing == 0 && c.Mismatched == 0 && c.Unexpected == 0
}

func (c sinkCheck) String() string {
	s := fmt.Sprintf("%d rows: %d version regressions, %d missing, %d with other columns than their version's, %d unexpected",
		c.Rows, c.Regressions, c.Missing, c.Mismatched, c.Unexpected)
	if len(c.examples) > 0 {
		s += fmt.Sprintf(" (e.g. %v)", c.examples)
	}
	return s
}

// verifySink compares every product's row with the newest version
// produced of it.
func verifySink(got map[string]product, exp sinkExpected) sinkCheck {
	c := sinkCheck{Rows: len(got)}
	example := func(format string, args ...any) {
		if len(c.examples) < 3 {
			c.examples = append(c.examples, fmt.Sprintf(format, args...))
		}
	}
	ids := make([]string, 0, len(exp.Newest))
	for id := range exp.Newest {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		want := exp.Newest[id]
		row, ok := got[id]
		switch {
		case !ok:
			c.Missing++
			example("%s missing (want version %d)", id, want.Version)
		case row.Version < want.Version:
			c.Regressions++
			example("%s at version %d, newest produced %d", id, row.Version, want.Version)
		case row.Version > want.Version:
			c.Unexpected++
			example("%s at version %d, newer than any produced (%d)", id, row.Version, want.Version)
		case row != want:
			c.Mismatched++
			example("%s at version %d holds %+v, want %+v", id, row.Version, row, want)
		}
	}
	for id := range got {
		if _, ok := exp.Newest[id]; !ok {
			c.Unexpected++
			example("%s was never produced", id)
		}
	}
	return c
}

// readProducts reads the sink's table.
func readProducts(ctx context.Context, d *db) (map[string]product, error) {
	rows, err := d.pool.Query(ctx, `SELECT id, version, name, price_cents, in_stock FROM `+sinkTable)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", sinkTable, err)
	}
	out := map[string]product{}
	var id string
	var p product
	if _, err := pgx.ForEachRow(rows, []any{&id, &p.Version, &p.Name, &p.PriceCents, &p.InStock}, func() error {
		out[id] = p
		return nil
	}); err != nil {
		return nil, fmt.Errorf("reading %s: %w", sinkTable, err)
	}
	return out, nil
}

// sinkConfigYAML is the worker's config file for E-sink: the topic, the
// directory of the products migration, and one sink writing the topic's product.updated
// events into products with the version gate. Everything else stays at
// the defaults (the environment sets brokers, group and the database; the
// topic is CloudEvents, the default format).
func sinkConfigYAML(topic, migrations string) string {
	return fmt.Sprintf(`kafka:
  topics: [%[3]q]
postgres:
  migrations: [%[1]q]
sinks:
  - name: products
    topic: %[3]q
    types: [%[2]s]
    table: %[4]s
    mode: upsert
    key: [id]
    version: version
    columns:
      - {name: id, from: subject}
      - {name: version, from: resourceversion}
      - {name: name, from: /name, type: text}
      - {name: price_cents, from: /price_cents, type: bigint}
      - {name: in_stock, from: /in_stock, type: boolean}
`, migrations, sinkEventType, topic, sinkTable)
}

// sinkStream is the sink workload produced to a topic of its own in one
// encoding: E-sink's JSON CloudEvents or E-sink-avro's Avro records.
type sinkStream struct {
	topic string
	exp   sinkExpected
	// config is the worker's config file for the topic and the products
	// migration's directory.
	config func(topic, migrations string) string
}

// sinkWorkloadOf is the sink workload the flags ask for.
func (b *bench) sinkWorkloadOf() sinkWorkload {
	return sinkWorkload{
		Products: b.opts.sinkProducts, Events: b.opts.sinkEvents,
		Duplicates: 0.1, OutOfOrder: 0.2, Seed: b.opts.seed,
	}
}

// produceSink produces the sink workload to topic for kind, each value
// written by render; contentType is the records' header (none when empty).
func (b *bench) produceSink(ctx context.Context, kind, topic string, render sinkRenderer, contentType string) (*sinkStream, error) {
	cl, err := b.producer(topic)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	p := &asyncProducer{cl: cl}
	cfg := b.sinkWorkloadOf()
	progress("producing %d upsert-only records to %s (%s)", cfg.Events, topic, kind)
	exp, err := generateSink(cfg, render, func(r workload.Record) error {
		rec := &kgo.Record{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
		if contentType != "" {
			rec.Headers = []kgo.RecordHeader{{Key: "content-type", Value: []byte(contentType)}}
		}
		p.produce(ctx, rec)
		return ctx.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("producing the %s workload: %w", kind, err)
	}
	if err := p.flush(ctx); err != nil {
		return nil, fmt.Errorf("producing the %s workload: %w", kind, err)
	}
	progress("produced %s", exp.summary())
	return &sinkStream{topic: topic, exp: exp}, nil
}

// produceSinkJSON creates E-sink's topic and produces its stream: JSON
// CloudEvents with the content-type the accounts workload's records carry.
func (b *bench) produceSinkJSON(ctx context.Context) (*sinkStream, error) {
	topic, err := b.newTopic(ctx, "esink")
	if err != nil {
		return nil, err
	}
	st, err := b.produceSink(ctx, "E-sink", topic, renderJSON, workload.ContentType)
	if err != nil {
		return nil, err
	}
	st.config = sinkConfigYAML
	return st, nil
}

// runSink runs the stock binary as a config-only sink over kind's stream
// (fresh schema, table and group) until every record is applied, then
// checks the table.
func (b *bench) runSink(ctx context.Context, kind string) (workerRun, error) {
	var r workerRun
	st := b.sinks[kind]
	if st == nil {
		return r, fmt.Errorf("%s: no stream produced", kind)
	}
	dir, err := os.MkdirTemp("", "effectively-bench-sink-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	migrations := filepath.Join(dir, "products")
	cfgPath := filepath.Join(dir, "effectively.yaml")
	if err := os.Mkdir(migrations, 0o700); err != nil {
		return r, err
	}
	if err := os.WriteFile(filepath.Join(migrations, "00001_products.sql"), []byte(sinkMigration), 0o600); err != nil {
		return r, err
	}
	if err := os.WriteFile(cfgPath, []byte(st.config(st.topic, migrations)), 0o600); err != nil {
		return r, err
	}
	short := strings.ToLower(strings.ReplaceAll(kind, "-", ""))
	d, err := b.newDB(ctx, short, migrateWorker, "--config", cfgPath)
	if err != nil {
		return r, err
	}
	defer d.drop(context.WithoutCancel(ctx))
	group := b.name(short)

	before := takeCPUSnapshot()
	w, err := b.startWorkerArgs(d, group, st.topic, []string{"--config", cfgPath})
	if err != nil {
		return r, err
	}
	defer w.stop(time.Minute)
	if r, err = b.sampleWorker(ctx, w, d, group, st.topic, int64(st.exp.Records), before); err != nil {
		return r, err
	}
	got, err := readProducts(ctx, d)
	if err != nil {
		return r, err
	}
	chk := verifySink(got, st.exp)
	r.sink = &chk
	if !chk.ok() {
		r.problems = append(r.problems, chk.String())
	}
	var claims int64
	if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM effectively_claims`).Scan(&claims); err != nil {
		return r, fmt.Errorf("counting claims: %w", err)
	}
	if claims != int64(st.exp.Originals) {
		r.problems = append(r.problems, fmt.Sprintf("effectively_claims has %d rows, want %d (distinct events)", claims, st.exp.Originals))
	}
	return r, nil
}
