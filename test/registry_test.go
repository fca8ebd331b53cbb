package test

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bufbuild/protocompile"
	"github.com/hamba/avro/v2"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/effectively-io/effectively/internal/crashpoint"
	"github.com/effectively-io/effectively/internal/kafkatest"
	"github.com/effectively-io/effectively/internal/pgtest"
)

// The registry formats against a real schema registry (Apicurio's
// Confluent API, started by stack/stack.sh): records written by franz-go's
// sr serde, read by the stock binary with config-only sinks.

// registryURL is the shared test registry's Confluent API.
func registryURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("EFFECTIVELY_TEST_REGISTRY_URL")
	if u == "" {
		t.Fatalf("no schema registry for tests: set EFFECTIVELY_TEST_REGISTRY_URL (run the tests with `make test`, or `stack/with-stack.sh go test ./...`, which start the local stack, registry included, and export it)")
	}
	return u
}

func registryClient(t *testing.T, url string) *sr.Client {
	t.Helper()
	cl, err := sr.NewClient(sr.URLs(url))
	require.NoError(t, err)
	return cl
}

// register registers schema under subject (BACKWARD compatibility) and
// returns its ID.
func register(t *testing.T, cl *sr.Client, subject string, s sr.Schema) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := cl.SetCompatibility(ctx, sr.SetCompatibility{Level: sr.CompatBackward}, subject)
	for _, r := range res {
		require.NoError(t, r.Err, "setting %s's compatibility", subject)
	}
	ss, err := cl.CreateSchema(ctx, subject, s)
	require.NoError(t, err, "registering %s", subject)
	return ss.ID
}

const (
	productV1 = `{"type":"record","name":"Product","namespace":"shop","fields":[
		{"name":"sku","type":"string"},
		{"name":"version","type":"long"},
		{"name":"type","type":"string"},
		{"name":"name","type":"string"},
		{"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
		{"name":"updated_at","type":{"type":"long","logicalType":"timestamp-millis"}},
		{"name":"launch","type":{"type":"int","logicalType":"date"}}]}`
	// v2 adds a field with a default: BACKWARD compatible.
	productV2 = `{"type":"record","name":"Product","namespace":"shop","fields":[
		{"name":"sku","type":"string"},
		{"name":"version","type":"long"},
		{"name":"type","type":"string"},
		{"name":"name","type":"string"},
		{"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
		{"name":"updated_at","type":{"type":"long","logicalType":"timestamp-millis"}},
		{"name":"launch","type":{"type":"int","logicalType":"date"}},
		{"name":"color","type":"string","default":"none"}]}`
)

const productsMigration = `-- +goose Up
CREATE TABLE products (
    sku        text PRIMARY KEY,
    version    bigint NOT NULL,
    name       text NOT NULL,
    price      numeric(12,2) NOT NULL,
    updated_at timestamptz NOT NULL,
    launch     date NOT NULL,
    color      text
);
CREATE TABLE product_events (
    event_key text PRIMARY KEY,
    sku       text NOT NULL,
    version   bigint NOT NULL,
    price     numeric(12,2) NOT NULL
);
-- +goose Down
DROP TABLE product_events;
DROP TABLE products;
`

// productsConfig is the stock binary's configuration for an Avro products
// topic: the products table at each product's newest version, and one
// product_events row per version.
func productsConfig(topic, format, migrations string) string {
	return fmt.Sprintf(`kafka:
  topics: [%[1]s]
postgres:
  migrations: [%[2]s]
topics:
  - name: %[1]s
    format: %[3]s
    key_strategy: natural
    natural_key: [/sku, /version]
    type_pointer: /type
    subject_pointer: /sku
    version_pointer: /version
sinks:
  - name: products
    topic: %[1]s
    types: [product.updated]
    table: products
    mode: upsert
    key: [sku]
    version: version
    columns:
      - {name: sku, from: subject}
      - {name: version, from: resourceversion}
      - {name: name, from: /name}
      - {name: price, from: /price, type: numeric}
      - {name: updated_at, from: /updated_at, type: timestamptz}
      - {name: launch, from: /launch, type: timestamptz}
      - {name: color, from: /color, optional: true}
  - name: product_events
    topic: %[1]s
    types: [product.updated]
    table: product_events
    mode: insert
    key: [event_key]
    columns:
      - {name: event_key, from: key}
      - {name: sku, from: subject}
      - {name: version, from: resourceversion}
      - {name: price, from: /price, type: numeric}
`, topic, migrations, format)
}

// productRig is a topic, a group, a database with the products tables and
// the stock binary's configuration for them.
type productRig struct {
	db     pgtest.DB
	topic  string
	group  string
	config string
	env    []string
}

func newProductRig(t *testing.T, partitions int32, format, registry string, extraEnv ...string) *productRig {
	t.Helper()
	r := &productRig{db: pgtest.NewEmpty(t), topic: kafkatest.NewTopic(t, partitions), group: kafkatest.NewGroup(t)}
	kafkatest.DeleteOnCleanup(t, r.topic+".dlq")
	dir := filepath.Join(t.TempDir(), "products", "migrations")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "00001_products.sql"), []byte(productsMigration), 0o600))
	r.config = filepath.Join(t.TempDir(), "effectively.yaml")
	require.NoError(t, os.WriteFile(r.config, []byte(productsConfig(r.topic, format, dir)), 0o600))
	r.env = append([]string{
		"EFFECTIVELY_KAFKA_BROKERS=" + strings.Join(kafkatest.Brokers(t), ","),
		"EFFECTIVELY_KAFKA_GROUP=" + r.group,
		"EFFECTIVELY_POSTGRES_URL=" + r.db.URL,
		"EFFECTIVELY_SCHEMA_REGISTRY_URL=" + registry,
		"EFFECTIVELY_HTTP_ADDR=",
		"EFFECTIVELY_KAFKA_SESSION_TIMEOUT=6s",
		"EFFECTIVELY_KAFKA_REBALANCE_TIMEOUT=20s",
	}, extraEnv...)
	code, stdout, stderr := runCmd(t, r.env, "--config", r.config, "migrate")
	require.Equal(t, 0, code, "migrate: %s\n%s", stdout, stderr)
	return r
}

// runThroughKills runs the stock binary until it has applied records
// records: SIGKILLed from outside once it has applied something, then
// killing itself at the crash points in turn. It returns the kills.
func (r *productRig) runThroughKills(t *testing.T, records int) int {
	t.Helper()
	kills := 0
	w := start(t, r.env, "--config", r.config, "run")
	waitUntil(t, "the first worker applies something", time.Minute, func(context.Context) bool { return r.applied(t) > 0 || w.exited() })
	require.False(t, w.exited(), "the worker exited: %s", tail(w.stderr.String(), 20))
	w.signal(t, syscall.SIGKILL)
	w.wait(t, time.Minute)
	kills++
	points := []string{crashpoint.BeforeDBCommit, crashpoint.AfterDBCommit, crashpoint.AfterKafkaCommit}
	deadline := time.Now().Add(3 * time.Minute)
	for i := 0; r.applied(t) < int64(records); i++ {
		env := r.env
		point := points[i%len(points)]
		if i < 4 {
			env = append(env[:len(env):len(env)], fmt.Sprintf("%s=%s:%d", crashpoint.EnvVar, point, 2+i%3))
		}
		w := start(t, env, "--config", r.config, "run")
		if untilCrashOrDone(t, w, point, deadline, func() bool { return r.applied(t) >= int64(records) }) {
			kills++
		}
	}
	require.GreaterOrEqual(t, kills, 3, "the test must actually kill the worker")
	return kills
}

func (r *productRig) applied(t *testing.T) int64 {
	return r.db.Count(t, `SELECT coalesce(sum(next_offset), 0) FROM consumer_offsets WHERE consumer_group = $1 AND topic = $2`, r.group, r.topic)
}

// product is one version of a product, as the generator meant it.
type product struct {
	SKU     string
	Version int64
	Name    string
	Cents   int64
	Updated time.Time
	Launch  time.Time
	Color   string // "" for a version written with v1
}

func (p product) avro(v2 bool) map[string]any {
	m := map[string]any{
		"sku": p.SKU, "version": p.Version, "type": "product.updated", "name": p.Name,
		"price": big.NewRat(p.Cents, 100), "updated_at": p.Updated, "launch": p.Launch,
	}
	if v2 {
		m["color"] = p.Color
	}
	return m
}

// productEncoder writes products as a producer does: franz-go's sr serde,
// one registered Go type per schema version.
type productEncoder struct {
	serde *sr.Serde
	value func(p product, v2 bool) any
	// prefix is how many header bytes follow the schema ID (Protobuf's
	// message indexes).
	prefix int
}

type (
	avroV1 map[string]any
	avroV2 map[string]any
)

func avroProducts(idV1, idV2 int) productEncoder {
	s1, s2 := avro.MustParse(productV1), avro.MustParse(productV2)
	var serde sr.Serde
	serde.Register(idV1, avroV1{}, sr.EncodeFn(func(v any) ([]byte, error) { return avro.Marshal(s1, map[string]any(v.(avroV1))) }))
	serde.Register(idV2, avroV2{}, sr.EncodeFn(func(v any) ([]byte, error) { return avro.Marshal(s2, map[string]any(v.(avroV2))) }))
	return productEncoder{serde: &serde, value: func(p product, v2 bool) any {
		if v2 {
			return avroV2(p.avro(true))
		}
		return avroV1(p.avro(false))
	}}
}

// productStream is the generator's output: the records to produce in
// order, and what the tables must hold at the end.
type productStream struct {
	records []*kgo.Record
	newest  map[string]product // by SKU
	events  int                // distinct (sku, version)
	poison  map[string]int     // dead-letter reason → count
	resent  int
	swapped int
	// firstV2 is the index in records of the first record written with
	// schema v2.
	firstV2 int
}

// productRecords writes skus products with up to five versions each: the
// first half of the stream in schema v1, the rest in v2 (mid-stream
// evolution); 15% of records sent twice, neighbouring versions of a
// product swapped, and poison of each kind.
func productRecords(t *testing.T, skus int, enc productEncoder, seed uint64, poison bool) productStream {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	out := productStream{newest: map[string]product{}, poison: map[string]int{}}
	type pending struct {
		p  product
		v2 bool
	}
	var all []pending
	for i := range skus {
		sku := fmt.Sprintf("sku-%04d", i)
		n := 1 + rng.IntN(5)
		for v := 1; v <= n; v++ {
			p := product{SKU: sku, Version: int64(v), Name: fmt.Sprintf("Product %d v%d", i, v), Cents: rng.Int64N(10_000_000) - 5_000,
				Updated: time.UnixMilli(1_780_000_000_000 + rng.Int64N(1e10)).UTC(), Launch: time.Date(2026, 1, 1+rng.IntN(365), 0, 0, 0, 0, time.UTC)}
			all = append(all, pending{p: p})
		}
	}
	// The stream in rounds of versions, so each product's versions spread
	// over the stream; the second half in v2.
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	// Stable by version within a product, then swap neighbours: disorder.
	byKey := map[string][]int{}
	for i, a := range all {
		byKey[a.p.SKU] = append(byKey[a.p.SKU], i)
	}
	for _, idx := range byKey {
		vs := make([]pending, len(idx))
		for k, i := range idx {
			vs[k] = all[i]
		}
		for a := range vs {
			for b := a + 1; b < len(vs); b++ {
				if vs[b].p.Version < vs[a].p.Version {
					vs[a], vs[b] = vs[b], vs[a]
				}
			}
		}
		for k := 0; k+1 < len(vs); k++ {
			if rng.IntN(4) == 0 {
				vs[k], vs[k+1] = vs[k+1], vs[k]
				out.swapped++
			}
		}
		for k, i := range idx {
			all[i] = vs[k]
		}
	}
	for i := range all {
		if i >= len(all)/2 {
			all[i].v2 = true
			all[i].p.Color = []string{"red", "green", "blue"}[rng.IntN(3)]
		}
	}
	for _, a := range all {
		if a.v2 && out.firstV2 == 0 {
			out.firstV2 = len(out.records)
		}
		value, err := enc.serde.Encode(enc.value(a.p, a.v2))
		require.NoError(t, err)
		rec := &kgo.Record{Key: []byte(a.p.SKU), Value: value}
		out.records = append(out.records, rec)
		out.events++
		if rng.IntN(100) < 15 {
			out.records = append(out.records, &kgo.Record{Key: rec.Key, Value: rec.Value})
			out.resent++
		}
		if cur, ok := out.newest[a.p.SKU]; !ok || a.p.Version > cur.Version {
			out.newest[a.p.SKU] = a.p
		}
		// Poison, keyed like the products so it shares their partitions.
		if !poison {
			continue
		}
		switch rng.IntN(60) {
		case 0:
			bad := append([]byte(nil), value...)
			bad[1], bad[2], bad[3], bad[4] = 0x7f, 0xff, 0xff, 0xf0 // an ID no registry has
			out.records = append(out.records, &kgo.Record{Key: rec.Key, Value: bad})
			out.poison["unknown_schema"]++
		case 1:
			// Bytes that are no value of the schema: a truncated Avro
			// string, a Protobuf field of a wire type that does not exist.
			bad := append(append([]byte(nil), value[:5+enc.prefix]...), 0xff, 0xff, 0xff, 0xff)
			out.records = append(out.records, &kgo.Record{Key: rec.Key, Value: bad})
			out.poison["schema_mismatch"]++
		case 2:
			bad := append([]byte{1}, value[1:]...)
			out.records = append(out.records, &kgo.Record{Key: rec.Key, Value: bad})
			out.poison["not_wire_format"]++
		}
	}
	return out
}

func produceAll(t *testing.T, topic string, recs []*kgo.Record) {
	t.Helper()
	cl := kafkatest.Producer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, r := range recs {
		r.Topic = topic
	}
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
}

// verifyProducts compares the tables and dead letters with the stream's
// expectations.
func verifyProducts(t *testing.T, db pgtest.DB, s productStream) {
	t.Helper()
	ctx := context.Background()
	rows, err := db.Pool.Query(ctx, `SELECT sku, version, name, (price * 100)::bigint, updated_at, launch::timestamptz, color FROM products`)
	require.NoError(t, err)
	got := 0
	for rows.Next() {
		var p product
		var color *string
		require.NoError(t, rows.Scan(&p.SKU, &p.Version, &p.Name, &p.Cents, &p.Updated, &p.Launch, &color))
		got++
		want, ok := s.newest[p.SKU]
		require.True(t, ok, "product %s was never produced", p.SKU)
		require.Equal(t, want.Version, p.Version, "product %s's version", p.SKU)
		require.Equal(t, []any{want.Name, want.Cents}, []any{p.Name, p.Cents}, "product %s", p.SKU)
		require.True(t, want.Updated.Equal(p.Updated), "product %s updated_at %s, want %s", p.SKU, p.Updated, want.Updated)
		require.Equal(t, want.Launch.Format(time.DateOnly), p.Launch.UTC().Format(time.DateOnly), "product %s's launch", p.SKU)
		if want.Color == "" {
			require.Nil(t, color, "product %s's newest version was written with v1: no color", p.SKU)
		} else {
			require.NotNil(t, color, "product %s's newest version was written with v2", p.SKU)
			require.Equal(t, want.Color, *color, "product %s's color", p.SKU)
		}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, len(s.newest), got, "products rows")
	require.Equal(t, int64(s.events), db.Count(t, `SELECT count(*) FROM product_events`), "one product_events row per distinct version")
	require.Zero(t, db.Count(t, `SELECT count(*) FROM (SELECT sku, version FROM product_events GROUP BY 1, 2 HAVING count(*) > 1) d`))

	dead := map[string]int{}
	rows, err = db.Pool.Query(ctx, `SELECT reason, count(*) FROM dead_letters GROUP BY reason`)
	require.NoError(t, err)
	for rows.Next() {
		var reason string
		var n int
		require.NoError(t, rows.Scan(&reason, &n))
		dead[reason] = n
	}
	require.NoError(t, rows.Err())
	require.Equal(t, s.poison, dead, "every poison record dead-lettered once, with its reason; nothing else")
}

// The stock binary with a config-only sink on an Avro topic whose schema
// evolves mid-stream (v1 → v2, a field added with a default, registered
// under BACKWARD compatibility), with re-sent records, disorder and
// poison (unknown schema ID, truncated payload, wrong magic byte),
// SIGKILLed from outside and at the crash points: every product at its
// newest version, color filled from v2 records only, one history row per
// version, every poison record dead-lettered with its reason.
func TestRegistryAvroSinkThroughKills(t *testing.T) {
	t.Parallel()
	reg := registryURL(t)
	r := newProductRig(t, 4, "avro", reg, "EFFECTIVELY_KAFKA_INSTANCE_ID="+kafkatest.Name(t, "instance"), "EFFECTIVELY_CONSUMER_BATCH_MAX_RECORDS=25")
	cl := registryClient(t, reg)
	subject := r.topic + "-value"
	idV1 := register(t, cl, subject, sr.Schema{Schema: productV1})
	idV2 := register(t, cl, subject, sr.Schema{Schema: productV2})
	require.NotEqual(t, idV1, idV2)

	s := productRecords(t, 300, avroProducts(idV1, idV2), 28, true)
	require.Positive(t, s.resent)
	require.Positive(t, s.swapped)
	require.Len(t, s.poison, 3, "poison of every kind")
	produceAll(t, r.topic, s.records)

	kills := r.runThroughKills(t, len(s.records))
	t.Logf("%d records (%d events, %d re-sent, %d swapped, poison %v), %d kills", len(s.records), s.events, s.resent, s.swapped, s.poison, kills)
	verifyProducts(t, r.db, s)
}

// ownRegistry starts a schema registry of the test's own and returns its
// Confluent API's URL and the stack command that stops and starts it.
func ownRegistry(t *testing.T) (url string, stackCmd func(args ...string)) {
	t.Helper()
	port, mgmt := strconv.Itoa(freePort(t)), strconv.Itoa(freePort(t))
	stackCmd = stackInstance(t, "registry", "registry-"+port, "EFFECTIVELY_REGISTRY_PORT="+port, "EFFECTIVELY_REGISTRY_MGMT_PORT="+mgmt)
	return "http://127.0.0.1:" + port + "/apis/ccompat/v7", stackCmd
}

// The schema registry stopped mid-run for 30 s, just as records of a
// schema the worker has not read yet arrive (v2, registered before the
// outage): those records wait, nothing is dead-lettered, the partitions
// say why they retry (schema_registry_unavailable), records of the schema
// the worker already holds do not need the registry, and once it is back
// the lag drains and every product ends at its newest version.
func TestRegistryOutageWaitsAndRecovers(t *testing.T) {
	t.Parallel()
	reg, stackCmd := ownRegistry(t)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	r := newProductRig(t, 4, "avro", reg, "EFFECTIVELY_HTTP_ADDR="+httpAddr)
	cl := registryClient(t, reg)
	subject := r.topic + "-value"
	idV1 := register(t, cl, subject, sr.Schema{Schema: productV1})
	idV2 := register(t, cl, subject, sr.Schema{Schema: productV2})
	s := productRecords(t, 200, avroProducts(idV1, idV2), 29, false)
	require.Positive(t, s.firstV2)

	w := start(t, r.env, "--config", r.config, "run")
	t.Cleanup(func() {
		if !w.exited() {
			w.signal(t, syscall.SIGKILL)
			w.wait(t, time.Minute)
		}
	})
	produceAll(t, r.topic, s.records[:s.firstV2])
	waitUntil(t, "the v1 records are applied", 2*time.Minute, func(context.Context) bool { return r.applied(t) >= int64(s.firstV2) || w.exited() })
	require.False(t, w.exited(), "the worker exited: %s", tail(w.stderr.String(), 20))

	stackCmd("down", "registry")
	stopped := time.Now()
	produceAll(t, r.topic, s.records[s.firstV2:])
	waitUntil(t, "a partition retries because of the registry", time.Minute, func(context.Context) bool {
		return gaugeSum(t, httpAddr, "effectively_partition_retry_cause") > 0 && labeledGaugeSum(t, httpAddr, "effectively_partition_retry_cause", "cause", "schema_registry_unavailable") > 0
	})
	for time.Since(stopped) < 30*time.Second {
		require.Zero(t, r.db.Count(t, `SELECT count(*) FROM dead_letters`), "a registry outage dead-letters nothing")
		require.False(t, w.exited(), "the worker exited during the outage: %s", tail(w.stderr.String(), 20))
		time.Sleep(time.Second)
	}
	lagDuring := gaugeSum(t, httpAddr, "effectively_consumer_lag")
	require.Positive(t, lagDuring, "the v2 records wait")
	require.Less(t, r.applied(t), int64(len(s.records)))

	stackCmd("up", "registry")
	back := time.Now()
	waitUntil(t, "the lag drains after the registry returns", 2*time.Minute, func(context.Context) bool { return r.applied(t) >= int64(len(s.records)) })
	t.Logf("lag %v during a %s outage; drained %s after the registry returned", lagDuring, back.Sub(stopped).Round(time.Second), time.Since(back).Round(time.Second))
	require.Contains(t, w.stderr.String(), "schema_registry_unavailable")
	verifyProducts(t, r.db, s)
	waitUntil(t, "the lag gauge reads 0", time.Minute, func(context.Context) bool { return gaugeSum(t, httpAddr, "effectively_consumer_lag") == 0 })
}

const (
	productProtoV1 = `syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Product {
  string sku = 1;
  int64 version = 2;
  string type = 3;
  string name = 4;
  string price = 5;
  google.protobuf.Timestamp updated_at = 6;
  string launch = 7;
}
`
	// v2 adds a field: BACKWARD compatible.
	productProtoV2 = `syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Product {
  string sku = 1;
  int64 version = 2;
  string type = 3;
  string name = 4;
  string price = 5;
  google.protobuf.Timestamp updated_at = 6;
  string launch = 7;
  optional string color = 8;
}
`
)

type (
	protoV1 struct{ m *dynamicpb.Message }
	protoV2 struct{ m *dynamicpb.Message }
)

// protoProducts writes products as Protobuf dynamic messages of the
// schemas' own descriptors, compiled here as a producer's build would.
func protoProducts(t *testing.T, idV1, idV2 int) productEncoder {
	t.Helper()
	md := func(text string) protoreflect.MessageDescriptor {
		c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			Accessor: protocompile.SourceAccessorFromMap(map[string]string{"product.proto": text}),
		})}
		files, err := c.Compile(context.Background(), "product.proto")
		require.NoError(t, err)
		return files[0].Messages().ByName("Product")
	}
	d1, d2 := md(productProtoV1), md(productProtoV2)
	build := func(d protoreflect.MessageDescriptor, p product, v2 bool) *dynamicpb.Message {
		m := dynamicpb.NewMessage(d)
		set := func(name string, v protoreflect.Value) { m.Set(d.Fields().ByName(protoreflect.Name(name)), v) }
		set("sku", protoreflect.ValueOfString(p.SKU))
		set("version", protoreflect.ValueOfInt64(p.Version))
		set("type", protoreflect.ValueOfString("product.updated"))
		set("name", protoreflect.ValueOfString(p.Name))
		set("price", protoreflect.ValueOfString(big.NewRat(p.Cents, 100).FloatString(2)))
		set("updated_at", protoreflect.ValueOfMessage(timestamppb.New(p.Updated).ProtoReflect()))
		set("launch", protoreflect.ValueOfString(p.Launch.Format(time.DateOnly)))
		if v2 {
			set("color", protoreflect.ValueOfString(p.Color))
		}
		return m
	}
	var serde sr.Serde
	serde.Register(idV1, protoV1{}, sr.EncodeFn(func(v any) ([]byte, error) { return proto.Marshal(v.(protoV1).m) }), sr.Index(0))
	serde.Register(idV2, protoV2{}, sr.EncodeFn(func(v any) ([]byte, error) { return proto.Marshal(v.(protoV2).m) }), sr.Index(0))
	return productEncoder{serde: &serde, prefix: 1, value: func(p product, v2 bool) any {
		if v2 {
			return protoV2{build(d2, p, true)}
		}
		return protoV1{build(d1, p, false)}
	}}
}

// The same through a Protobuf topic: the stock binary's config-only sink
// reads the proto3 JSON mapping (int64 as decimal strings, a Timestamp as
// an RFC 3339 time), the schema evolves mid-stream, the worker is killed.
func TestRegistryProtobufSinkThroughKills(t *testing.T) {
	t.Parallel()
	reg := registryURL(t)
	r := newProductRig(t, 4, "protobuf", reg, "EFFECTIVELY_KAFKA_INSTANCE_ID="+kafkatest.Name(t, "instance"), "EFFECTIVELY_CONSUMER_BATCH_MAX_RECORDS=25")
	cl := registryClient(t, reg)
	subject := r.topic + "-value"
	idV1 := register(t, cl, subject, sr.Schema{Schema: productProtoV1, Type: sr.TypeProtobuf})
	idV2 := register(t, cl, subject, sr.Schema{Schema: productProtoV2, Type: sr.TypeProtobuf})
	require.NotEqual(t, idV1, idV2)

	s := productRecords(t, 300, protoProducts(t, idV1, idV2), 30, true)
	require.Len(t, s.poison, 3, "poison of every kind")
	produceAll(t, r.topic, s.records)
	kills := r.runThroughKills(t, len(s.records))
	t.Logf("%d records (%d events, %d re-sent, %d swapped, poison %v), %d kills", len(s.records), s.events, s.resent, s.swapped, s.poison, kills)
	verifyProducts(t, r.db, s)
}
