package test

import (
	"context"
	be "encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/effectively-io/effectively/examples/products/workload"
	"github.com/effectively-io/effectively/internal/crashpoint"
	"github.com/effectively-io/effectively/internal/kafkatest"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/internal/proctest"
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

// productsExample is the products example's configuration
// (examples/products) for topic and format, with its migrations by
// absolute path: the stock binary's sinks, no code.
func productsExample(t *testing.T, topic, format string) string {
	t.Helper()
	b, err := os.ReadFile("../examples/products/effectively.yaml")
	require.NoError(t, err)
	abs, err := filepath.Abs("../examples/products/migrations")
	require.NoError(t, err)
	cfg := string(b)
	for _, r := range [][2]string{{"shop.products", topic}, {"format: avro", "format: " + format}, {"migrations: [examples/products/migrations]", "migrations: [" + abs + "]"}} {
		require.Contains(t, cfg, r[0])
		cfg = strings.ReplaceAll(cfg, r[0], r[1])
	}
	return cfg
}

// productsTopicConfig is the topic's settings alone: what a Go build with
// handlers for it needs beside its own migrations.
func productsTopicConfig(topic, format string) string {
	return fmt.Sprintf(`kafka:
  topics: [%[1]s]
topics:
  - name: %[1]s
    format: %[2]s
    key_strategy: natural
    natural_key: [/sku, /version]
    type_pointer: /type
    subject_pointer: /sku
    version_pointer: /version
`, topic, format)
}

// productRig is a topic, a group, a database with the products tables and
// the stock binary's configuration for them.
type productRig struct {
	bin    string // the stock binary, or a Go build
	db     pgtest.DB
	topic  string
	group  string
	config string
	env    []string
	procs  []*proc // the workers started, in order
}

func newProductRig(t *testing.T, partitions int32, format, registry string, extraEnv ...string) *productRig {
	t.Helper()
	return newProductRigOf(t, binary, partitions, format, registry, extraEnv...)
}

// newProductRigOf is newProductRig for bin: the stock binary, whose
// config-only sinks write the tables, or a Go build whose handlers do
// (and whose own migrations create them).
func newProductRigOf(t *testing.T, bin string, partitions int32, format, registry string, extraEnv ...string) *productRig {
	t.Helper()
	r := &productRig{bin: bin, db: pgtest.NewEmpty(t), topic: kafkatest.NewTopic(t, partitions), group: kafkatest.NewGroup(t)}
	kafkatest.DeleteOnCleanup(t, r.topic+".dlq")
	cfg := productsTopicConfig(r.topic, format)
	if bin == binary {
		cfg = productsExample(t, r.topic, format)
	}
	r.config = filepath.Join(t.TempDir(), "effectively.yaml")
	require.NoError(t, os.WriteFile(r.config, []byte(cfg), 0o600))
	r.env = append([]string{
		"EFFECTIVELY_KAFKA_BROKERS=" + strings.Join(kafkatest.Brokers(t), ","),
		"EFFECTIVELY_KAFKA_GROUP=" + r.group,
		"EFFECTIVELY_POSTGRES_URL=" + r.db.URL,
		"EFFECTIVELY_SCHEMA_REGISTRY_URL=" + registry,
		"EFFECTIVELY_HTTP_ADDR=",
		"EFFECTIVELY_KAFKA_SESSION_TIMEOUT=6s",
		"EFFECTIVELY_KAFKA_REBALANCE_TIMEOUT=20s",
	}, extraEnv...)
	code, stdout, stderr := proctest.Run(t, r.bin, r.env, "--config", r.config, "migrate")
	require.Equal(t, 0, code, "migrate: %s\n%s", stdout, stderr)
	return r
}

// start runs the rig's binary.
func (r *productRig) start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := proctest.Start(t, r.bin, env, args...)
	w := &proc{Proc: p, cmd: p.Cmd, stdout: &p.Stdout, stderr: &p.Stderr}
	r.procs = append(r.procs, w)
	return w
}

// logged counts the rig's workers whose log has line.
func (r *productRig) logged(line string) int {
	n := 0
	for _, w := range r.procs {
		if strings.Contains(w.stderr.String(), line) {
			n++
		}
	}
	return n
}

// runThroughKills runs the stock binary until it has applied records
// records: SIGKILLed from outside once it has applied something, then
// killing itself at the crash points in turn. It returns the kills.
func (r *productRig) runThroughKills(t *testing.T, records int) int {
	t.Helper()
	kills := 0
	w := r.start(t, r.env, "--config", r.config, "run")
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
		w := r.start(t, env, "--config", r.config, "run")
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

func produceAll(t *testing.T, topic string, recs []workload.Record) {
	t.Helper()
	cl := kafkatest.Producer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	krs := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		krs[i] = &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value}
	}
	require.NoError(t, cl.ProduceSync(ctx, krs...).FirstErr())
}

// products generates a stream, failing the test on an encoding error.
func products(t *testing.T, c workload.Config, enc workload.Encoder) workload.Stream {
	t.Helper()
	s, err := workload.Generate(c, enc)
	require.NoError(t, err)
	return s
}

// verifyProducts compares the tables and dead letters with the stream's
// expectations.
func verifyProducts(t *testing.T, db pgtest.DB, s workload.Stream) {
	t.Helper()
	verifyProductRows(t, db, s)
	require.Equal(t, int64(s.Events), db.Count(t, `SELECT count(*) FROM product_events`), "one product_events row per distinct version")
	require.Zero(t, db.Count(t, `SELECT count(*) FROM (SELECT sku, version FROM product_events GROUP BY 1, 2 HAVING count(*) > 1) d`))
}

// verifyProductRows compares the products table and the dead letters with
// the stream's expectations.
func verifyProductRows(t *testing.T, db pgtest.DB, s workload.Stream) {
	t.Helper()
	ctx := context.Background()
	rows, err := db.Pool.Query(ctx, `SELECT sku, version, name, (price * 100)::bigint, updated_at, launch::timestamptz, color FROM products`)
	require.NoError(t, err)
	got := 0
	for rows.Next() {
		var p workload.Product
		var color *string
		require.NoError(t, rows.Scan(&p.SKU, &p.Version, &p.Name, &p.Cents, &p.Updated, &p.Launch, &color))
		got++
		want, ok := s.Newest[p.SKU]
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
	require.Equal(t, len(s.Newest), got, "products rows")

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
	require.Equal(t, s.Poison, dead, "every poison record dead-lettered once, with its reason; nothing else")
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
	registrySinkThroughKills(t, binary, "avro", 28, 0)
}

// registrySinkThroughKills is the kill test of one registry format: bin
// (the stock binary's config-only sinks, or a Go build's handlers) applies
// the products stream in format, its two schema versions registered under
// BACKWARD compatibility, SIGKILLed from outside and at the crash points;
// the tables and dead letters must be what the stream implies. Names are
// padded to nameBytes (workload.Config); env is more of the workers'
// environment (it wins over the test's).
func registrySinkThroughKills(t *testing.T, bin, format string, seed uint64, nameBytes int, env ...string) *productRig {
	t.Helper()
	reg := registryURL(t)
	r := newProductRigOf(t, bin, 4, format, reg, append([]string{"EFFECTIVELY_KAFKA_INSTANCE_ID=" + kafkatest.Name(t, "instance"), "EFFECTIVELY_CONSUMER_BATCH_MAX_RECORDS=25"}, env...)...)
	cl := registryClient(t, reg)
	subject := r.topic + "-value"
	v1, v2, err := workload.Schemas(format)
	require.NoError(t, err)
	idV1, idV2 := register(t, cl, subject, v1), register(t, cl, subject, v2)
	require.NotEqual(t, idV1, idV2)
	enc, err := workload.NewEncoder(format, idV1, idV2)
	require.NoError(t, err)

	s := products(t, workload.Config{Products: 300, Poison: true, Seed: seed, NameBytes: nameBytes}, enc)
	if format == "avro" {
		// Keys as Kafka Connect's AvroConverter writes them: an Avro
		// string in the wire format, its schema under <topic>-key.
		wireKeys(t, cl, r.topic, s.Records)
	}
	require.Positive(t, s.Resent)
	require.Positive(t, s.Swapped)
	require.Positive(t, s.FirstV2)
	require.Len(t, s.Poison, 3, "poison of every kind")
	produceAll(t, r.topic, s.Records)

	kills := r.runThroughKills(t, len(s.Records))
	t.Logf("%s: %d records (%d events, %d re-sent, %d swapped, poison %v), %d kills", format, len(s.Records), s.Events, s.Resent, s.Swapped, s.Poison, kills)
	verifyProducts(t, r.db, s)
	return r
}

// The Avro kill test with names of 20 KB and the smallest decoding budget
// (consumer.max_inflight_bytes at 1 MiB: 512 KiB for decoded data; a
// record reserves 16 × its bytes + 64 KiB for its value and as much for
// its wire-format key while it decodes, and keeps its event's 40 KB):
// batches of 25 records are applied in parts of two, one transaction each, and the kills land between the
// parts of a batch too. Every product still at its newest version, once.
func TestRegistryBatchesInPartsThroughKills(t *testing.T) {
	t.Parallel()
	r := registrySinkThroughKills(t, binary, "avro", 29, 20_000, "EFFECTIVELY_CONSUMER_MAX_INFLIGHT_BYTES=1048576")
	split := r.logged("applied a batch in parts")
	t.Logf("%d of %d workers applied batches in parts", split, len(r.procs))
	require.Positive(t, split, "batches were applied in parts")
}

// Each configuration of the schema-registry guide, as printed there but
// for the topic's name, the registry's address and the migrations' path,
// run by the stock binary on the products stream in its format (both
// schema versions, re-sent records, disorder, poison): the table holds
// every product at its newest version and every poison record is
// dead-lettered with its reason. A guide that no longer runs fails here.
func TestSchemaRegistryGuideConfigs(t *testing.T) {
	t.Parallel()
	reg := registryURL(t)
	cl := registryClient(t, reg)
	migrations, err := filepath.Abs("../examples/products/migrations")
	require.NoError(t, err)
	guide := map[string]string{ // heading → the format its configuration reads
		"### Avro, sunk by configuration alone": "avro",
		"### Protobuf":                          "protobuf",
		"### JSON Schema":                       "jsonschema",
	}
	require.Len(t, guide, len(workload.Formats))
	topicLine := regexp.MustCompile(`(?m)^\s+- name: (\S+)`)
	for heading, format := range guide {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			cfg := fencedBlock(t, "../docs/guides/schema-registry.md", heading, "yaml")
			require.Regexp(t, `(?m)^\s+format: `+format+`\b`, cfg, "%q", heading)
			guideTopic := topicLine.FindStringSubmatch(cfg)
			require.NotNil(t, guideTopic, "%q: no topic", heading)
			r := newProductRig(t, 4, format, reg)
			for _, rep := range [][2]string{{guideTopic[1], r.topic}, {"http://127.0.0.1:18081/apis/ccompat/v7", reg}, {"[migrations]", "[" + migrations + "]"}} {
				require.Contains(t, cfg, rep[0], "%q", heading)
				cfg = strings.ReplaceAll(cfg, rep[0], rep[1])
			}
			require.NoError(t, os.WriteFile(r.config, []byte(cfg), 0o600))
			code, stdout, stderr := proctest.Run(t, r.bin, r.env, "--config", r.config, "migrate")
			require.Equal(t, 0, code, "migrate with the guide's %q: %s\n%s", heading, stdout, stderr)

			subject := r.topic + "-value"
			v1, v2, err := workload.Schemas(format)
			require.NoError(t, err)
			enc, err := workload.NewEncoder(format, register(t, cl, subject, v1), register(t, cl, subject, v2))
			require.NoError(t, err)
			s := products(t, workload.Config{Products: 100, Poison: true, Seed: 33}, enc)
			produceAll(t, r.topic, s.Records)

			w := r.start(t, r.env, "--config", r.config, "run")
			waitUntil(t, "the worker applies the stream", 2*time.Minute, func(context.Context) bool { return r.applied(t) >= int64(len(s.Records)) || w.exited() })
			require.False(t, w.exited(), "the worker exited with the guide's %q: %s", heading, tail(w.stderr.String(), 20))
			w.signal(t, syscall.SIGTERM)
			w.wait(t, time.Minute)
			verifyProductRows(t, r.db, s)
		})
	}
}

// wireKeys rewrites recs' keys as a registry serializer writes a string
// key: an Avro string in the Confluent wire format, its schema registered
// under <topic>-key.
func wireKeys(t *testing.T, cl *sr.Client, topic string, recs []workload.Record) {
	t.Helper()
	id := register(t, cl, topic+"-key", sr.Schema{Schema: `"string"`})
	var h sr.ConfluentHeader
	for i := range recs {
		k, err := h.AppendEncode(nil, id, nil)
		require.NoError(t, err)
		k = be.AppendVarint(k, int64(len(recs[i].Key)))
		recs[i].Key = append(k, recs[i].Key...)
	}
}

// ownRegistry starts a schema registry of the test's own and returns its
// Confluent API's URL and the stack command that stops and starts it.
func ownRegistry(t *testing.T) (url string, stackCmd func(args ...string)) {
	t.Helper()
	ports := proctest.FreePorts(t, 2)
	port, mgmt := strconv.Itoa(ports[0]), strconv.Itoa(ports[1])
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
	// A short longest backoff: the partition notices the registry's return
	// within 5 s (the default, 30 s, is for a production registry).
	r := newProductRig(t, 4, "avro", reg, "EFFECTIVELY_HTTP_ADDR="+httpAddr, "EFFECTIVELY_RETRY_MAX=5s")
	cl := registryClient(t, reg)
	subject := r.topic + "-value"
	idV1 := register(t, cl, subject, sr.Schema{Schema: workload.AvroV1})
	idV2 := register(t, cl, subject, sr.Schema{Schema: workload.AvroV2})
	s := products(t, workload.Config{Products: 200, Seed: 29}, workload.Avro(idV1, idV2))
	require.Positive(t, s.FirstV2)

	w := r.start(t, r.env, "--config", r.config, "run")
	t.Cleanup(func() {
		if !w.exited() {
			w.signal(t, syscall.SIGKILL)
			w.wait(t, time.Minute)
		}
	})
	produceAll(t, r.topic, s.Records[:s.FirstV2])
	waitUntil(t, "the v1 records are applied", 2*time.Minute, func(context.Context) bool { return r.applied(t) >= int64(s.FirstV2) || w.exited() })
	require.False(t, w.exited(), "the worker exited: %s", tail(w.stderr.String(), 20))

	stackCmd("down", "registry")
	stopped := time.Now()
	produceAll(t, r.topic, s.Records[s.FirstV2:])
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
	require.Less(t, r.applied(t), int64(len(s.Records)))

	stackCmd("up", "registry")
	back := time.Now()
	waitUntil(t, "the lag drains after the registry returns", 2*time.Minute, func(context.Context) bool { return r.applied(t) >= int64(len(s.Records)) })
	t.Logf("lag %v during a %s outage; drained %s after the registry returned", lagDuring, back.Sub(stopped).Round(time.Second), time.Since(back).Round(time.Second))
	require.Contains(t, w.stderr.String(), "schema_registry_unavailable")
	verifyProducts(t, r.db, s)
	waitUntil(t, "the lag gauge reads 0", time.Minute, func(context.Context) bool { return gaugeSum(t, httpAddr, "effectively_consumer_lag") == 0 })
}

// The same through a Protobuf topic: the stock binary's config-only sink
// reads the proto3 JSON mapping (int64 as decimal strings, a Timestamp as
// an RFC 3339 time), the schema evolves mid-stream, the worker is killed.
func TestRegistryProtobufSinkThroughKills(t *testing.T) {
	t.Parallel()
	registrySinkThroughKills(t, binary, "protobuf", 30, 0)
}

// The same through a JSON Schema topic: the payload is the event's JSON
// once it is valid against its writer's schema (draft-07, closed, v2
// adds an optional property); a document its schema refuses is
// dead-lettered as schema_mismatch.
func TestRegistryJSONSchemaSinkThroughKills(t *testing.T) {
	t.Parallel()
	registrySinkThroughKills(t, binary, "jsonschema", 32, 0)
}

// builtExample is one example's Go build, made once per test binary.
type builtExample struct {
	once sync.Once
	bin  string
	err  error
}

var exampleBuilds sync.Map // example name → *builtExample

// exampleBuild builds examples/<name>, a Go build with handlers, once,
// with the crash-point hook.
func exampleBuild(t *testing.T, name string) string {
	t.Helper()
	b, _ := exampleBuilds.LoadOrStore(name, &builtExample{})
	e := b.(*builtExample)
	e.once.Do(func() {
		dir, err := os.MkdirTemp("", name+"-build-")
		if err != nil {
			e.err = err
			return
		}
		e.bin = filepath.Join(dir, name)
		out, err := exec.Command("go", "build", "-tags", "crashpoint", "-o", e.bin, "../examples/"+name).CombinedOutput()
		if err != nil {
			e.err = fmt.Errorf("building examples/%s: %w: %s", name, err, out)
		}
	})
	require.NoError(t, e.err)
	return e.bin
}

// The Go build of examples/catalog, its handlers reading Avro records into
// a struct of their own (Event.Unmarshal) and Protobuf and JSON Schema
// records from the generic JSON value, through the same evolving, poisoned, re-sent and
// disordered streams and the same kills: the same tables as the stock
// binary's sinks make.
func TestRegistryGoBuildThroughKills(t *testing.T) {
	t.Parallel()
	bin := exampleBuild(t, "catalog")
	for _, format := range workload.Formats {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			registrySinkThroughKills(t, bin, format, 31, 0)
		})
	}
}
