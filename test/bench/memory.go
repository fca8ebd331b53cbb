package main

// Memory per record (-memory, make bench-memory): records of about 1 MiB —
// the largest consumer.max_payload_bytes lets through by default — on
// every partition of a topic, through the stock binary twice:
//
//   - sink: the config-only orders example (examples/orders: format json
//     webhooks, an upsert with a jsonb items column and an insert-once
//     history), each webhook an order whose items array makes it large;
//   - handlers: the reference build's Go handlers (examples/accounts),
//     account.opened then ledger.credited per account, each event's data
//     carrying a large items array beside the fields the handler reads.
//
// It prints, for each, the worker's Go heap in use when idle (after a GC,
// before the records arrive), its peak (sampled every 50 ms) and after the
// run (after a GC), and its peak RSS (VmHWM): what an operator sizes the
// container's memory limit from (docs/operations/capacity.md). The heap
// profiles after the run are written to -memory-profile-dir. Then it
// checks the rows against what it produced: every record's row exactly
// once, with the content produced. It prints; it never asserts a figure.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/examples/orders/webhooks"
	"github.com/effectively-io/effectively/internal/cetest"
	"github.com/effectively-io/effectively/internal/kafkatest"
)

// memoryOptions are the -memory flags.
type memoryOptions struct {
	on         bool
	records    int // per run, spread evenly over the partitions
	partitions int
	bytes      int    // of each record value, about
	gomemlimit string // GOMEMLIMIT of the worker ("": unset)
	workerEnv  envList
	profileDir string
}

func (m *memoryOptions) flags(fs *flag.FlagSet) {
	fs.BoolVar(&m.on, "memory", false, "instead of the benchmark, measure the worker's memory on large records: -memory-records records of about -memory-bytes on -memory-partitions partitions, through a config-only sink with a jsonb column and through the reference build's Go handlers (memory.go)")
	fs.IntVar(&m.records, "memory-records", 32, "records of each -memory run, spread evenly over the partitions")
	fs.IntVar(&m.partitions, "memory-partitions", 16, "partitions of the -memory topics")
	fs.IntVar(&m.bytes, "memory-bytes", 1_040_000, "size of each -memory record value in bytes, about (at most consumer.max_payload_bytes, 1 MiB by default)")
	fs.StringVar(&m.gomemlimit, "memory-gomemlimit", "", "GOMEMLIMIT of the -memory worker, e.g. 345MiB as the Helm chart sets for a 384Mi limit (empty: unset)")
	fs.Var(&m.workerEnv, "memory-worker-env", "KEY=VALUE set in the -memory worker's environment, e.g. EFFECTIVELY_CONSUMER_MAX_INFLIGHT_BYTES=33554432 (repeatable)")
	fs.StringVar(&m.profileDir, "memory-profile-dir", os.TempDir(), "where -memory writes the worker's heap profiles after each run (after a GC; empty: none)")
}

func (m *memoryOptions) validate() error {
	if !m.on {
		return nil
	}
	switch {
	case m.records < 1 || m.partitions < 1:
		return errors.New("-memory-records and -memory-partitions: want at least 1")
	case m.bytes < 1024 || m.bytes > 64<<20:
		return errors.New("-memory-bytes: want 1024 to 64 MiB")
	}
	for _, kv := range m.workerEnv {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("-memory-worker-env %q: want KEY=VALUE", kv)
		}
	}
	return nil
}

// memoryRun is what one run measured.
type memoryRun struct {
	kind     string
	records  int
	bytes    int64 // of the record values, in all
	idleHeap int64 // go_memstats_heap_inuse_bytes after a GC, before the records
	peakHeap int64 // sampled maximum of go_memstats_heap_inuse_bytes
	peakRSS  int64 // VmHWM
	heapGC   int64 // after the run, after a GC
	rssAfter int64
	took     time.Duration // first record produced → last applied
	// profile and idleProfile are the heap profiles after the run and
	// when idle ("": not written).
	profile, idleProfile string
	problems             []string
}

// memoryReport is what -memory prints.
type memoryReport struct {
	opts     memoryOptions
	worker   string
	runs     []memoryRun
	warnings []string
}

func (b *bench) runMemory(ctx context.Context) (*memoryReport, error) {
	rep := &memoryReport{opts: b.opts.memory, worker: b.workerVersion(ctx)}
	for _, kind := range []string{"sink", "handlers"} {
		progress("memory: %s run, %d records of about %d bytes on %d partitions", kind, rep.opts.records, rep.opts.bytes, rep.opts.partitions)
		r, err := b.memoryOnce(ctx, kind)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			return nil, fmt.Errorf("memory %s run: %w", kind, err)
		}
		rep.runs = append(rep.runs, r)
	}
	return rep, nil
}

// largeRecord is one record of a memory run and what it must leave.
type largeRecord struct {
	key   string
	value []byte
	// items is the record's items array, as produced.
	items []byte
}

func (b *bench) memoryOnce(ctx context.Context, kind string) (memoryRun, error) {
	o := b.opts.memory
	r := memoryRun{kind: kind}
	twoMiB := strconv.Itoa(2 << 20)
	never := "-1"
	saved := b.opts.partitions
	b.opts.partitions = o.partitions
	topic, err := b.newTopicConfig(ctx, "memory-"+kind, map[string]*string{"retention.ms": &never, "max.message.bytes": &twoMiB})
	b.opts.partitions = saved
	if err != nil {
		return r, err
	}
	recs := largeRecords(kind, o.records, o.partitions, o.bytes)
	r.records = len(recs)
	for _, rec := range recs {
		r.bytes += int64(len(rec.value))
	}

	var args, migrateArgs []string
	if kind == "sink" {
		cfg, err := b.ordersExampleConfig(topic)
		if err != nil {
			return r, err
		}
		args = []string{"--config", cfg}
		migrateArgs = args
	}
	d, err := b.newDB(ctx, "memory"+kind, migrateWorker, migrateArgs...)
	if err != nil {
		return r, err
	}
	defer d.drop(context.WithoutCancel(ctx))
	group := b.name("memory" + kind)
	env := []string{"EFFECTIVELY_HTTP_PPROF=true"}
	if o.gomemlimit != "" {
		env = append(env, "GOMEMLIMIT="+o.gomemlimit)
	}
	env = append(env, o.workerEnv...)
	w, err := b.startWorkerArgs(d, group, topic, args, env...)
	if err != nil {
		return r, err
	}
	defer w.stop(time.Minute)
	if err := w.waitReady(ctx, 2*time.Minute); err != nil {
		return r, err
	}
	idleProfile := ""
	if o.profileDir != "" {
		idleProfile = filepath.Join(o.profileDir, topic+"-heap-idle.pb.gz")
	}
	if r.idleHeap, err = heapAfterGC(ctx, w, idleProfile); err != nil {
		return r, err
	}

	// Sample the heap until the run is over.
	sctx, stopSampling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var peak int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for sctx.Err() == nil {
			if s, err := scrape(sctx, w.http); err == nil {
				peak = max(peak, int64(value(s, "go_memstats_heap_inuse_bytes", nil)))
			}
			select {
			case <-sctx.Done():
			case <-tick.C:
			}
		}
	}()

	start := time.Now()
	if err := b.produceLarge(ctx, topic, recs); err != nil {
		stopSampling()
		wg.Wait()
		return r, err
	}
	_, done, _, err := w.waitApplied(ctx, d, group, topic, int64(len(recs)))
	stopSampling()
	wg.Wait()
	if err != nil {
		return r, err
	}
	r.took, r.peakHeap = done.Sub(start), peak
	if r.peakRSS, err = peakRSS(w.cmd.Process.Pid); err != nil {
		progress("warning: reading the worker's peak RSS: %v", err)
	}
	profile := ""
	if o.profileDir != "" {
		profile = filepath.Join(o.profileDir, topic+"-heap-after.pb.gz")
	}
	if r.heapGC, err = heapAfterGC(ctx, w, profile); err != nil {
		return r, err
	}
	r.profile, r.idleProfile = profile, idleProfile
	if r.rssAfter, err = currentRSS(w.cmd.Process.Pid); err != nil {
		progress("warning: reading the worker's RSS: %v", err)
	}
	if code := w.stop(time.Minute); code != 0 {
		progress("warning: the worker exited with code %d after SIGTERM", code)
	}
	b.deleteGroup(ctx, group)
	if r.problems, err = checkLarge(ctx, d, kind, recs); err != nil {
		return r, err
	}
	return r, nil
}

// heapAfterGC has the worker collect garbage (its heap profile endpoint
// does, with gc=1), writes the profile to path (unless ""), and returns
// the heap in use then.
func heapAfterGC(ctx context.Context, w *worker, path string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+w.http+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("the worker's heap profile: %w", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = errors.New(resp.Status)
	}
	if err != nil {
		return 0, fmt.Errorf("the worker's heap profile: %w", err)
	}
	if path != "" {
		if err := writeFile(path, body); err != nil {
			return 0, err
		}
	}
	s, err := scrape(ctx, w.http)
	if err != nil {
		return 0, err
	}
	return int64(value(s, "go_memstats_heap_inuse_bytes", nil)), nil
}

// ordersExampleConfig writes the orders example's configuration with
// topic for its topic and the absolute path of its migrations, and returns
// its path (in a directory removed at the end).
func (b *bench) ordersExampleConfig(topic string) (string, error) {
	const exampleTopic, exampleMigrations = "shop.webhooks", "examples/orders/migrations"
	example, err := os.ReadFile("examples/orders/effectively.yaml")
	if err != nil {
		return "", fmt.Errorf("the orders example's configuration (run from the repository root): %w", err)
	}
	abs, err := filepath.Abs(exampleMigrations)
	if err != nil {
		return "", err
	}
	cfg := strings.ReplaceAll(string(example), exampleTopic, topic)
	cfg = strings.ReplaceAll(cfg, "migrations: ["+exampleMigrations+"]", "migrations: ["+abs+"]")
	if !strings.Contains(cfg, abs) {
		return "", errors.New("examples/orders/effectively.yaml no longer names its migrations as " + exampleMigrations)
	}
	dir, err := os.MkdirTemp("", "effectively-bench-memory-")
	if err != nil {
		return "", err
	}
	b.onCleanup(func(context.Context) { os.RemoveAll(dir) })
	path := filepath.Join(dir, "effectively.yaml")
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}

// largeRecords makes n records (each partition gets its share: keys are
// chosen by murmur2, the producer's partitioner) of about size bytes. For
// the sink, each is an order.created webhook of its own order; for the
// handlers, an account.opened and then a ledger.credited of one account
// (n rounded up to even).
func largeRecords(kind string, n, partitions, size int) []largeRecord {
	resources := n
	if kind == "handlers" {
		resources = (n + 1) / 2
	}
	prefix := map[string]string{"sink": "ord_", "handlers": "acct-"}[kind]
	keys := kafkatest.KeysOnEveryPartition(prefix, partitions, (resources+partitions-1)/partitions)[:resources]
	var out []largeRecord
	for i, k := range keys {
		if kind == "sink" {
			line, order, _ := webhooks.Large(i, k, size)
			out = append(out, largeRecord{key: k, value: line.Value, items: order.Items})
			continue
		}
		out = append(out, largeAccountEvent(i, k, "account.opened", size), largeAccountEvent(i, k, "ledger.credited", size))
	}
	return out
}

// largeAccountEvent is a CloudEvent of the reference domain whose data
// carries, beside what its handler reads, items that make it about size
// bytes.
func largeAccountEvent(i int, id, typ string, size int) largeRecord {
	items := webhooks.Items(i, size-300)
	data := map[string]any{"amount_cents": 100 + i, "currency": "EUR", "items": items}
	version := int64(0)
	if typ == "account.opened" {
		data = map[string]any{"name": fmt.Sprintf("Holder %d", i), "email": fmt.Sprintf("holder%d@example.com", i), "plan": "pro", "items": items}
		version = 1
	}
	r := cetest.Record("", fmt.Sprintf("mem-%s-%06d", typ, i), typ, id, version, data)
	return largeRecord{key: id, value: r.Value, items: items}
}

// produceLarge produces recs, keyed, waiting for every ack.
func (b *bench) produceLarge(ctx context.Context, topic string, recs []largeRecord) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(b.brokers...),
		kgo.DefaultProduceTopic(topic),
		kgo.ProducerBatchMaxBytes(4<<20),
		kgo.MetadataMinAge(250*time.Millisecond),
	)
	if err != nil {
		return fmt.Errorf("kafka producer: %w", err)
	}
	defer cl.Close()
	p := &asyncProducer{cl: cl}
	for _, r := range recs {
		rec := &kgo.Record{Key: []byte(r.key), Value: r.value}
		if !strings.HasPrefix(r.key, "ord_") {
			rec.Headers = []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/cloudevents+json")}}
		}
		p.produce(ctx, rec)
	}
	if err := p.flush(ctx); err != nil {
		return fmt.Errorf("producing %d large records to %s: %w", len(recs), topic, err)
	}
	return nil
}

// checkLarge compares the tables with the records produced: for the sink,
// one orders row per webhook holding its items, and one order_events row;
// for the handlers, one accounts row and one ledger entry per account. In
// both, one claim per record. It returns the differences.
func checkLarge(ctx context.Context, d *db, kind string, recs []largeRecord) ([]string, error) {
	var problems []string
	count := func(sql string, want int) error {
		var n int
		if err := d.pool.QueryRow(ctx, sql).Scan(&n); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
		if n != want {
			problems = append(problems, fmt.Sprintf("%s: %d, want %d", sql, n, want))
		}
		return nil
	}
	if err := count(`SELECT count(*) FROM effectively_claims`, len(recs)); err != nil {
		return nil, err
	}
	if err := count(`SELECT count(*) FROM dead_letters`, 0); err != nil {
		return nil, err
	}
	if kind == "handlers" {
		if err := count(`SELECT count(*) FROM accounts WHERE status = 'open' AND plan = 'pro' AND email = 'holder' || substr(name, 8) || '@example.com'`, len(recs)/2); err != nil {
			return nil, err
		}
		return problems, count(`SELECT count(*) FROM ledger_entries l JOIN accounts a ON a.id = l.account_id
		                        WHERE l.amount_cents = 100 + substr(a.name, 8)::int AND l.currency = 'EUR'`, len(recs)/2)
	}
	if err := count(`SELECT count(*) FROM order_events`, len(recs)); err != nil {
		return nil, err
	}
	for _, r := range recs {
		var items string
		var version int64
		if err := d.pool.QueryRow(ctx, `SELECT items::text, version FROM orders WHERE id = $1`, r.key).Scan(&items, &version); err != nil {
			problems = append(problems, fmt.Sprintf("order %s: %v", r.key, err))
			continue
		}
		var got, want any
		if err := json.Unmarshal([]byte(items), &got); err != nil {
			return nil, fmt.Errorf("order %s's items: %w", r.key, err)
		}
		if err := json.Unmarshal(r.items, &want); err != nil {
			return nil, err
		}
		if version != 1 || !reflect.DeepEqual(got, want) {
			problems = append(problems, fmt.Sprintf("order %s: version %d, items of %d bytes differ from the %d produced", r.key, version, len(items), len(r.items)))
		}
	}
	return problems, nil
}

func (r *memoryReport) print(out io.Writer) {
	fmt.Fprintf(out, "memory per record (go run ./test/bench -memory): %d records of about %d bytes (%.2f MiB) per run on %d partitions\n",
		r.opts.records, r.opts.bytes, mib(int64(r.opts.bytes)), r.opts.partitions)
	if r.worker != "" {
		fmt.Fprintf(out, "worker: %s\n", r.worker)
	}
	limit := r.opts.gomemlimit
	if limit == "" {
		limit = "unset"
	}
	if len(r.opts.workerEnv) > 0 {
		fmt.Fprintf(out, "worker environment: %s\n", strings.Join(r.opts.workerEnv, " "))
	}
	fmt.Fprintf(out, "GOMEMLIMIT: %s; heap = go_memstats_heap_inuse_bytes (idle and after: after a GC; peak: sampled every 50 ms)\n\n", limit)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\trecords\tMiB in all\tidle heap MiB\tpeak heap MiB\tpeak RSS MiB\theap after GC MiB\tRSS after MiB\ttook\t")
	for _, x := range r.runs {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t\n", x.kind, x.records, mib(x.bytes), mib(x.idleHeap), mib(x.peakHeap),
			mib(x.peakRSS), mib(x.heapGC), mib(x.rssAfter), x.took.Round(10*time.Millisecond))
	}
	tw.Flush()
	for _, x := range r.runs {
		if len(x.problems) == 0 {
			fmt.Fprintf(out, "%s: every record's rows written once with the content produced\n", x.kind)
		}
		for _, p := range x.problems {
			fmt.Fprintf(out, "%s: PROBLEM: %s\n", x.kind, p)
		}
		if x.profile != "" {
			fmt.Fprintf(out, "%s: heap profile after the run: go tool pprof -sample_index=inuse_space -top %s\n", x.kind, x.profile)
			fmt.Fprintf(out, "%s: what the run allocated: go tool pprof -sample_index=alloc_space -top -diff_base %s %s\n", x.kind, x.idleProfile, x.profile)
		}
	}
}

// envList is a repeatable KEY=VALUE flag.
type envList []string

func (e *envList) String() string { return strings.Join(*e, " ") }

func (e *envList) Set(kv string) error {
	*e = append(*e, kv)
	return nil
}
