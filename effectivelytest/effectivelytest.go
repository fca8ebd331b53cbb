// Package effectivelytest tests a build's handlers the way the worker runs
// them: records go through the topic's decoder, the dedupe claims, the
// version gates, parking and the outbox, in one transaction per batch, on
// a fresh schema of a real PostgreSQL — and a test asserts what became of
// them: dispositions, dead letters with their reasons, parked events and
// recorded side-effect intents. No broker is needed: the kit hands records
// to the pipeline as the consumer would.
//
// The server is named by EFFECTIVELY_TEST_POSTGRES_URL (the local stack's
// `stack/stack.sh env` prints it); each Kit creates a schema of its own on
// it, migrated with the engine's and the build's migrations, and drops it
// when the test ends, so tests run in parallel.
//
//	func TestOrderPlaced(t *testing.T) {
//		app := service.New("orders")
//		orders.Register(&app.Registry)
//		app.Migrations(orders.Migrations())
//		kit := effectivelytest.New(t, app, effectivelytest.Options{Topic: "orders"})
//		res := kit.Apply(kit.CloudEvent("e1", "order.placed", "o-1", 1, map[string]any{"total_cents": 500}))
//		require.Equal(t, 1, res.Counts[handlers.Applied])
//	}
package effectivelytest

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/dedupe"
	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/internal/consumer"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/internal/pipeline"
	"github.com/effectively-io/effectively/internal/servicebridge"
	"github.com/effectively-io/effectively/service"
)

// TB is the part of testing.TB the kit uses.
type TB interface {
	Helper()
	Name() string
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Options configure a Kit. The zero value tests one CloudEvents topic,
// "events", with the default configuration.
type Options struct {
	// Config is the worker's configuration: the topics' formats and key
	// strategies, sinks, parking and outbox settings. Nil:
	// config.Default() consuming Topic. Its postgres.url is the kit's.
	Config *config.Config
	// Topic is the topic records go to when they name none; with a nil
	// Config, the one topic consumed. Default "events".
	Topic string
	// Group is the consumer group the positions are stored under. Default
	// "effectivelytest".
	Group string
}

// Kit is one test's worker pipeline on its own schema.
type Kit struct {
	// Pool is a small pool on the kit's schema, for the test's queries.
	Pool *pgxpool.Pool
	// URL connects with search_path set to the kit's schema.
	URL string
	// Schema is the schema's name.
	Schema string
	// Topic is the default topic of Apply's records.
	Topic string

	t       TB
	group   string
	applier *pipeline.Applier
	offsets map[topicPartition]int64
}

type topicPartition struct {
	topic     string
	partition int32
}

// New migrates a fresh schema with the engine's and app's migrations (and
// the directories of the configuration's postgres.migrations) and builds
// the pipeline a worker of app would run, its tables checked against the
// schema. A problem fails the test. Give each Kit an App of its own: an
// App's configured sinks are registered once.
func New(t TB, app *service.App, opts Options) *Kit {
	t.Helper()
	if app == nil {
		t.Fatalf("effectivelytest: New needs the build's App (service.New with its handlers)")
		return nil
	}
	if opts.Topic == "" {
		opts.Topic = "events"
	}
	if opts.Group == "" {
		opts.Group = "effectivelytest"
	}
	var cfg config.Config
	if opts.Config != nil {
		cfg = *opts.Config
	} else {
		cfg = config.Default()
		cfg.Kafka.Topics = []string{opts.Topic}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("effectivelytest: the configuration would not start a worker: %v", err)
		return nil
	}
	db := pgtest.New(t, servicebridge.SchemaSets(app, cfg)...)
	cfg.Postgres.URL = db.URL
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	applier, err := servicebridge.Applier(ctx, app, cfg, db.Pool, zap.NewNop())
	if err != nil {
		t.Fatalf("effectivelytest: building the worker's pipeline: %v", err)
	}
	return &Kit{Pool: db.Pool, URL: db.URL, Schema: db.Schema, Topic: opts.Topic,
		t: t, group: opts.Group, applier: applier, offsets: map[topicPartition]int64{}}
}

// Record is a Kafka record as a producer writes it.
type Record struct {
	// Topic is the kit's Topic when empty.
	Topic     string
	Partition int32
	Key       []byte
	Value     []byte
	Headers   map[string]string
}

// CloudEvent is a structured-mode CloudEvents record keyed by subject, as
// the producer contract has it: source urn:effectivelytest, data as JSON.
// version 0 leaves resourceversion out (a relative event).
func (k *Kit) CloudEvent(id, typ, subject string, version int64, data any) Record {
	env := map[string]any{"specversion": "1.0", "id": id, "source": "urn:effectivelytest", "type": typ, "subject": subject, "data": data}
	if version > 0 {
		env["resourceversion"] = version
	}
	v, err := json.Marshal(env)
	if err != nil {
		k.t.Fatalf("effectivelytest: encoding the data of %s: %v", id, err)
	}
	return Record{Key: []byte(subject), Value: v, Headers: map[string]string{"content-type": "application/cloudevents+json"}}
}

// JSON is a plain JSON record (format json), keyed by key.
func (k *Kit) JSON(key string, value any) Record {
	v, err := json.Marshal(value)
	if err != nil {
		k.t.Fatalf("effectivelytest: encoding %s: %v", key, err)
	}
	return Record{Key: []byte(key), Value: v}
}

// Result is what became of one Apply's records.
type Result struct {
	// Counts are the records by disposition (applied, stale, duplicate,
	// parked, dead-lettered).
	Counts map[dedupe.Disposition]int
	// DeadLetters are the records of this Apply that were dead-lettered.
	DeadLetters []Letter
	// Released counts parked events (of this Apply or earlier ones) that a
	// prerequisite's arrival released, by what became of them.
	Released map[dedupe.Disposition]int
}

// Letter is a dead-lettered record: where it was read and why.
type Letter struct {
	Topic     string
	Partition int32
	Offset    int64
	// EventKey is the event's dedupe key ("" when it did not decode).
	EventKey string
	Reason   event.Reason
}

// Apply hands recs to the pipeline as the consumer would: one batch per
// topic and partition, in the order given, each record at its partition's
// next offset (so a record given twice is a redelivery at a new offset).
// A batch that fails (an environment fault, not an event's) fails the
// test.
func (k *Kit) Apply(recs ...Record) Result {
	k.t.Helper()
	res := Result{Counts: map[dedupe.Disposition]int{}, Released: map[dedupe.Disposition]int{}}
	var order []topicPartition
	batches := map[topicPartition][]*kgo.Record{}
	for _, r := range recs {
		if r.Topic == "" {
			r.Topic = k.Topic
		}
		tp := topicPartition{r.Topic, r.Partition}
		if _, ok := batches[tp]; !ok {
			order = append(order, tp)
		}
		kr := &kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: r.Value, Offset: k.offsets[tp], Timestamp: time.Now()}
		k.offsets[tp]++
		for name, v := range r.Headers {
			kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: name, Value: []byte(v)})
		}
		batches[tp] = append(batches[tp], kr)
	}
	for _, tp := range order {
		out, err := k.applier.ApplyBatch(context.Background(), consumer.Batch{Group: k.group, Topic: tp.topic, Partition: tp.partition, Records: batches[tp]})
		if err != nil {
			k.t.Fatalf("effectivelytest: applying a batch of %s/%d: %v", tp.topic, tp.partition, err)
		}
		for d, n := range out.Counts {
			res.Counts[d] += n
		}
		for d, n := range out.Released {
			res.Released[d] += n
		}
		for _, l := range out.Letters {
			res.DeadLetters = append(res.DeadLetters, Letter{Topic: l.Topic, Partition: l.Partition, Offset: l.Offset, EventKey: l.EventKey, Reason: l.Reason})
		}
	}
	return res
}

// DeadLetter is a row of the dead-letter table.
type DeadLetter struct {
	Letter
	// Error is the error text, redacted.
	Error string
}

// DeadLetters are every dead letter so far, in the order they were
// recorded.
func (k *Kit) DeadLetters() []DeadLetter {
	k.t.Helper()
	return collect(k, `SELECT topic, "partition", "offset", coalesce(event_key, ''), reason, error FROM dead_letters ORDER BY id`,
		func(row pgx.CollectableRow) (DeadLetter, error) {
			var d DeadLetter
			err := row.Scan(&d.Topic, &d.Partition, &d.Offset, &d.EventKey, &d.Reason, &d.Error)
			return d, err
		})
}

// Parked is an event waiting for its prerequisite.
type Parked struct {
	EventKey string
	Type     string
	// Resource is the prerequisite's ID the event waits for.
	Resource  string
	Topic     string
	Partition int32
	Offset    int64
}

// Parked are the events still waiting for a prerequisite, in the order
// they arrived.
func (k *Kit) Parked() []Parked {
	k.t.Helper()
	return collect(k, `SELECT event_key, event_type, resource, topic, "partition", "offset" FROM parked_events WHERE state = 'parked' ORDER BY topic, "partition", "offset"`,
		func(row pgx.CollectableRow) (Parked, error) {
			var p Parked
			err := row.Scan(&p.EventKey, &p.Type, &p.Resource, &p.Topic, &p.Partition, &p.Offset)
			return p, err
		})
}

// Intent is a side effect recorded in the outbox with its event's effects,
// to be sent after the commit.
type Intent struct {
	EventKey string
	// Target is the declared target's name.
	Target    string
	Operation string
	Resource  string
	Method    string
	// Body is the request body.
	Body json.RawMessage
	// State is pending until a dispatcher sends it; suppressed for an
	// event older than outbox.retention.
	State string
}

// Intents are the recorded side effects, in the order they were recorded.
// The kit runs no dispatcher: nothing is sent.
func (k *Kit) Intents() []Intent {
	k.t.Helper()
	return collect(k, `SELECT event_key, coalesce(target_name, ''), operation, resource, method, request, state FROM outbox ORDER BY id`,
		func(row pgx.CollectableRow) (Intent, error) {
			var i Intent
			err := row.Scan(&i.EventKey, &i.Target, &i.Operation, &i.Resource, &i.Method, &i.Body, &i.State)
			return i, err
		})
}

// collect runs query on the kit's schema and scans its rows.
func collect[T any](k *Kit, query string, scan func(pgx.CollectableRow) (T, error)) []T {
	k.t.Helper()
	rows, err := k.Pool.Query(context.Background(), query)
	if err != nil {
		k.t.Fatalf("effectivelytest: %v", err)
	}
	out, err := pgx.CollectRows(rows, scan)
	if err != nil {
		k.t.Fatalf("effectivelytest: %v", err)
	}
	return out
}
