package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/examples/accounts/workload"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/consumer"
	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/internal/pipeline"
	"github.com/effectively-io/effectively/internal/sink"
	"github.com/effectively-io/effectively/schema"
)

// applied is a product.updated event as a sink would read it.
type appliedEvent struct {
	ID              string `json:"id"`
	Type            string `json:"type"`
	Subject         string `json:"subject"`
	ResourceVersion int64  `json:"resourceversion"`
	Data            struct {
		Name       string `json:"name"`
		PriceCents int64  `json:"price_cents"`
		InStock    bool   `json:"in_stock"`
	} `json:"data"`
}

// TestSinkWorkloadAndVerifier: the stream has the duplicates and disorder
// asked for; applying it last-writer-wins leaves version regressions that
// the verifier finds, applying it through a version gate leaves none; the
// verifier also finds missing, altered and unexpected rows.
func TestSinkWorkloadAndVerifier(t *testing.T) {
	cfg := sinkWorkload{Products: 4_000, Events: 40_000, Duplicates: 0.1, OutOfOrder: 0.2, Seed: 7} // the default shape: a tenth as many products as records
	var recs []workload.Record
	exp, err := generateSink(cfg, renderJSON, func(r workload.Record) error {
		recs = append(recs, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != cfg.Events || exp.Records != cfg.Events {
		t.Fatalf("%d records emitted, expectation counts %d, want %d", len(recs), exp.Records, cfg.Events)
	}
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 0.02 {
			t.Errorf("%s %.3f, want %.2f ± 0.02", name, got, want)
		}
	}
	near("re-send share", float64(exp.Records-exp.Originals)/float64(exp.Records), cfg.Duplicates)
	near("late share of updates", float64(exp.Late)/float64(exp.Originals), cfg.OutOfOrder)

	lww, gated := map[string]product{}, map[string]product{}
	ids, resends, late := map[string]bool{}, 0, 0
	newestSeen := map[string]int64{}
	for _, r := range recs {
		var ev appliedEvent
		if err := json.Unmarshal(r.Value, &ev); err != nil {
			t.Fatalf("record %s is not JSON: %v", r.Value, err)
		}
		if ev.Type != sinkEventType || ev.Subject != string(r.Key) || ev.ResourceVersion < 1 {
			t.Fatalf("record %s: type, subject or version wrong (key %s)", r.Value, r.Key)
		}
		if ids[ev.ID] != r.Resend {
			t.Fatalf("record %s: resend %v, but id seen before: %v", ev.ID, r.Resend, ids[ev.ID])
		}
		ids[ev.ID] = true
		p := product{Version: ev.ResourceVersion, Name: ev.Data.Name, PriceCents: ev.Data.PriceCents, InStock: ev.Data.InStock}
		lww[ev.Subject] = p
		if cur, ok := gated[ev.Subject]; !ok || p.Version > cur.Version {
			gated[ev.Subject] = p
		}
		if r.Resend {
			resends++
			continue
		}
		if p.Version < newestSeen[ev.Subject] {
			late++
		}
		newestSeen[ev.Subject] = max(newestSeen[ev.Subject], p.Version)
	}
	if resends != exp.Records-exp.Originals || late != exp.Late {
		t.Errorf("the stream has %d re-sends and %d late originals; the expectation says %d and %d", resends, late, exp.Records-exp.Originals, exp.Late)
	}

	if c := verifySink(gated, exp); !c.ok() || c.Rows != len(exp.Newest) {
		t.Errorf("version-gated application: %s; want every product at its newest version", c)
	}
	c := verifySink(lww, exp)
	if c.Regressions == 0 {
		t.Errorf("last-writer-wins application: %s; want version regressions", c)
	}
	t.Logf("last-writer-wins: %s", c)

	var some string
	for id := range gated {
		some = id
		break
	}
	altered := gated[some]
	altered.Name += "!"
	gated[some] = altered
	gated["prod-never"] = product{Version: 1}
	if c := verifySink(gated, exp); c.Mismatched != 1 || c.Unexpected != 1 || c.Regressions != 0 || c.Missing != 0 {
		t.Errorf("one altered and one unexpected row: %s", c)
	}
	delete(gated, some)
	if c := verifySink(gated, exp); c.Missing != 1 {
		t.Errorf("one missing row: %s", c)
	}
}

// TestSinkConfigOnTheWorkload loads the config file E-sink (and
// E-sink-avro) hands the stock binary, registers its sink in-process as the
// binary does (sink.Register, the start-up check), creates the table from
// the same migration, and applies the generated stream through the
// worker's pipeline (decoders built from the topic's settings as the
// binary builds them, Avro schemas from an in-memory registry),
// partitioned and batched as Kafka and the worker would: every product
// ends at its newest produced version, the re-sends are duplicates, the
// late updates stale. It proves the config, the migration, the events and
// the check fit together before E-sink runs the binary on them.
func TestSinkConfigOnTheWorkload(t *testing.T) {
	const schemaID = 7
	render, err := avroRenderer(schemaID)
	if err != nil {
		t.Fatal(err)
	}
	for _, enc := range []struct {
		kind   string
		render sinkRenderer
		config func(topic, migrations string) string
	}{
		{"E-sink", renderJSON, sinkConfigYAML},
		{"E-sink-avro", render, func(topic, migrations string) string {
			return sinkAvroConfigYAML(topic, migrations, "http://127.0.0.1:1/apis/ccompat/v7")
		}},
	} {
		t.Run(enc.kind, func(t *testing.T) {
			testSinkConfig(t, enc.render, enc.config, staticRegistry{schemaID: sinkAvroSchema})
		})
	}
}

// staticRegistry is a schema registry in memory: Avro schemas by ID.
type staticRegistry map[int]string

func (r staticRegistry) SchemaByID(_ context.Context, id int) (sr.Schema, error) {
	s, ok := r[id]
	if !ok {
		return sr.Schema{}, &sr.ResponseError{StatusCode: 404, ErrorCode: 40403, Message: "schema not found"}
	}
	return sr.Schema{Schema: s, Type: sr.TypeAvro}, nil
}

func (staticRegistry) SchemaByVersion(context.Context, string, int) (sr.SubjectSchema, error) {
	return sr.SubjectSchema{}, errors.New("not in a static registry")
}

func testSinkConfig(t *testing.T, render sinkRenderer, configYAML func(topic, migrations string) string, registry event.SchemaRegistry) {
	ctx := context.Background()
	const topic, partitions = "bench-sink", 4
	dir := t.TempDir()
	migrations := filepath.Join(dir, "products")
	if err := os.Mkdir(migrations, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(migrations, "00001_products.sql"), []byte(sinkMigration), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "effectively.yaml")
	if err := os.WriteFile(cfgPath, []byte(configYAML(topic, migrations)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgPath, nil)
	if err != nil {
		t.Fatalf("loading the E-sink config: %v", err)
	}
	pdb := pgtest.New(t, schema.Set{Name: "products", FS: os.DirFS(migrations)})
	reg := &handlers.Registry{}
	sinks, err := sink.Register(reg, cfg.Sinks)
	if err != nil {
		t.Fatal(err)
	}
	if err := sinks.Check(ctx, pdb.Pool, reg, nil); err != nil {
		t.Fatalf("the start-up check refuses the E-sink table: %v", err)
	}
	ts := cfg.TopicSettings(topic)
	dc := event.DecoderConfig{ // as service.newDecoders builds it
		Topic: topic, Format: ts.Format, KeyStrategy: ts.KeyStrategy, KeyPointer: ts.KeyPointer, NaturalKey: ts.NaturalKey,
		IDPointer: ts.IDPointer, TypePointer: ts.TypePointer, SubjectPointer: ts.SubjectPointer, VersionPointer: ts.VersionPointer,
		MaxPayloadBytes: cfg.Consumer.MaxPayloadBytes, RequireSubject: ts.RequireSubject,
	}
	if config.IsRegistryFormat(ts.Format) {
		if cfg.SchemaRegistry.URL == "" {
			t.Fatalf("topic format %s without schema_registry.url", ts.Format)
		}
		dc.Registry = registry
	}
	dec, err := event.NewDecoder(dc)
	if err != nil {
		t.Fatal(err)
	}
	applier := pipeline.NewApplier(pdb.Pool, pipeline.Options{Decoders: map[string]*event.Decoder{topic: dec}, Handlers: reg})

	wl := sinkWorkload{Products: 300, Events: 6_000, Duplicates: 0.1, OutOfOrder: 0.2, Seed: 11}
	part := kgo.StickyKeyPartitioner(nil).ForTopic(topic)
	parts := make([][]*kgo.Record, partitions)
	exp, err := generateSink(wl, render, func(r workload.Record) error {
		rec := toKafka(r)
		rec.Topic = topic
		p := part.Partition(rec, partitions)
		rec.Partition, rec.Offset = int32(p), int64(len(parts[p]))
		parts[p] = append(parts[p], rec)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[dedupe.Disposition]int{}
	for p, recs := range parts {
		for i := 0; i < len(recs); i += 100 {
			res, err := applier.ApplyBatch(ctx, consumer.Batch{Group: "g", Topic: topic, Partition: int32(p), Records: recs[i:min(i+100, len(recs))]})
			if err != nil {
				t.Fatal(err)
			}
			for d, n := range res.Counts {
				counts[d] += n
			}
		}
	}
	// Every original but a late one is the newest version of its product
	// so far (applied); a late one follows a newer version (stale).
	if counts[dedupe.DeadLettered] != 0 || counts[dedupe.Stale] != exp.Late || counts[dedupe.Duplicate] != exp.Records-exp.Originals {
		t.Errorf("dispositions %v: want no dead letters, %d stale (the late updates), %d duplicates", counts, exp.Late, exp.Records-exp.Originals)
	}
	got, err := readProducts(ctx, &db{pool: pdb.Pool})
	if err != nil {
		t.Fatal(err)
	}
	if c := verifySink(got, exp); !c.ok() || c.Rows != len(exp.Newest) {
		t.Errorf("after the sink: %s; want every product at its newest version", c)
	}
}

// TestSinkAvroRenderer: the Avro stream is the JSON stream record for
// record (keys, timestamps, re-sends, and every field the CloudEvent
// carried, read back with hamba from the wire format), and each re-send is
// byte-identical to its original in both.
func TestSinkAvroRenderer(t *testing.T) {
	const schemaID = 123456
	cfg := sinkWorkload{Products: 500, Events: 20_000, Duplicates: 0.1, OutOfOrder: 0.2, Seed: 20260101}
	render, err := avroRenderer(schemaID)
	if err != nil {
		t.Fatal(err)
	}
	stream := func(r sinkRenderer) ([]workload.Record, sinkExpected) {
		var recs []workload.Record
		exp, err := generateSink(cfg, r, func(r workload.Record) error {
			recs = append(recs, r)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return recs, exp
	}
	jsonRecs, jsonExp := stream(renderJSON)
	avroRecs, avroExp := stream(render)
	if !reflect.DeepEqual(jsonExp, avroExp) {
		t.Fatalf("the expectations differ: JSON %s, Avro %s", jsonExp.summary(), avroExp.summary())
	}
	if len(jsonRecs) != len(avroRecs) {
		t.Fatalf("%d JSON records, %d Avro", len(jsonRecs), len(avroRecs))
	}
	schema := avro.MustParse(sinkAvroSchema)
	header, err := (&sr.ConfluentHeader{}).AppendEncode(nil, schemaID, nil)
	if err != nil {
		t.Fatal(err)
	}
	originals := map[string][2][]byte{} // by event id: the JSON and Avro values
	resends := 0
	for i, j := range jsonRecs {
		a := avroRecs[i]
		if !bytes.Equal(a.Key, j.Key) || !a.Timestamp.Equal(j.Timestamp) || a.Resend != j.Resend {
			t.Fatalf("record %d: Avro key %s, time %s, re-send %v; JSON %s, %s, %v", i, a.Key, a.Timestamp, a.Resend, j.Key, j.Timestamp, j.Resend)
		}
		var ev appliedEvent
		if err := json.Unmarshal(j.Value, &ev); err != nil {
			t.Fatalf("record %d is not JSON: %v", i, err)
		}
		if !bytes.HasPrefix(a.Value, header) {
			t.Fatalf("record %d: Avro value starts % x, want the wire-format header % x", i, a.Value[:min(5, len(a.Value))], header)
		}
		var got avroProduct
		if err := avro.Unmarshal(schema, a.Value[len(header):], &got); err != nil {
			t.Fatalf("record %d: decoding the Avro: %v", i, err)
		}
		want := avroProduct{ID: ev.ID, Type: ev.Type, Subject: ev.Subject, Version: ev.ResourceVersion,
			Name: ev.Data.Name, PriceCents: ev.Data.PriceCents, InStock: ev.Data.InStock}
		if got != want {
			t.Fatalf("record %d: Avro %+v, JSON %+v", i, got, want)
		}
		// Nothing but the record after the header: a reader of the
		// writer's schema consumes the payload exactly.
		if rest, err := avro.Marshal(schema, &got); err != nil || !bytes.Equal(rest, a.Value[len(header):]) {
			t.Fatalf("record %d: the payload is not exactly one record (re-encoded %x, err %v; payload %x)", i, rest, err, a.Value[len(header):])
		}
		orig, seen := originals[ev.ID]
		if seen != j.Resend {
			t.Fatalf("record %d (%s): re-send %v, id seen before %v", i, ev.ID, j.Resend, seen)
		}
		if !seen {
			originals[ev.ID] = [2][]byte{j.Value, a.Value}
			continue
		}
		resends++
		if !bytes.Equal(orig[0], j.Value) || !bytes.Equal(orig[1], a.Value) {
			t.Fatalf("record %d re-sends %s with other bytes", i, ev.ID)
		}
	}
	if resends == 0 || resends != jsonExp.Records-jsonExp.Originals {
		t.Errorf("%d re-sends, the expectation says %d", resends, jsonExp.Records-jsonExp.Originals)
	}
}
