package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/effectively-io/effectively/config"
)

// measurement is one run of one kind.
type measurement struct {
	records       int64
	total, steady time.Duration
	cpu           cpuUse
	rss           int64
	diag          string // what the run's own metrics say
	// client is the CPU seconds of the process that drove the database:
	// the worker (B3, E, E-sink, E-sink-avro) or this program (B0, B2);
	// pg is this stack's PostgreSQL's (its postmaster and children).
	client, pg float64
	sink       *sinkCheck // E-sink's and E-sink-avro's verification
}

// rate is the run's throughput: records over the time from the first
// record to done.
func (m measurement) rate() float64 { return float64(m.records) / m.steady.Seconds() }

// report is everything the benchmark prints.
type report struct {
	opts           options
	started        time.Time
	wall           time.Duration
	loadStart      string
	loadEnd        string
	worker         string
	topic          string
	valueAvg       float64
	produceTook    time.Duration
	counts         []int64
	expected       string
	runs           map[string][]measurement
	latency        *latencyResult
	warnings       []string
	latencySkipped string
	replay         *replayResult
	sinkExpected   string
	sinkTopic      string
	sinkAvroTopic  string
	sinkAvroSchema int    // the registered schema's ID
	sinkAvroSkip   string // why E-sink-avro did not run, when it did not
	pgScope        string // what the PostgreSQL CPU figures count
}

func (r *report) warn(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	progress("WARNING: %s", msg)
	r.warnings = append(r.warnings, msg)
}

// run produces the topic, runs the rounds and the latency run.
func (b *bench) run(ctx context.Context) (*report, error) {
	rep := &report{opts: b.opts, started: time.Now(), loadStart: loadAvg(), runs: map[string][]measurement{}}
	rep.pgScope = "this stack's postmaster and its children"
	if b.pgPid == 0 {
		rep.pgScope = "every process named postgres on the machine"
	}
	if out, err := exec.CommandContext(ctx, b.bin, "version").Output(); err == nil {
		rep.worker = strings.TrimSpace(string(out))
	}
	progress("bench %s: nproc %d, load average %s", b.id, runtime.NumCPU(), rep.loadStart)

	var todo []string
	for _, k := range kinds {
		if !b.opts.skip[k] {
			todo = append(todo, k)
		}
	}
	if slices.Contains(todo, "E-sink") {
		st, err := b.produceSinkJSON(ctx)
		if err != nil {
			return nil, err
		}
		b.sinks["E-sink"] = st
		rep.sinkTopic, rep.sinkExpected = st.topic, st.exp.summary()
	}
	if slices.Contains(todo, "E-sink-avro") {
		// Without a registry E-sink-avro is skipped; the other kinds run.
		skip := func(why string) {
			rep.sinkAvroSkip = why
			todo = slices.DeleteFunc(todo, func(k string) bool { return k == "E-sink-avro" })
		}
		if b.registryURL == "" {
			skip(registryURLEnv + " is unset (stack/with-stack.sh exports it)")
			progress("note: E-sink-avro skipped: %s", rep.sinkAvroSkip)
		} else if st, id, err := b.produceSinkAvro(ctx); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			skip("its setup failed (see warnings)")
			rep.warn("E-sink-avro skipped: %v", err)
		} else {
			b.sinks["E-sink-avro"] = st
			rep.sinkAvroTopic, rep.sinkAvroSchema = st.topic, id
			if rep.sinkExpected == "" {
				rep.sinkExpected = st.exp.summary()
			}
		}
	}
	if slices.ContainsFunc(todo, func(k string) bool { return !strings.HasPrefix(k, "E-sink") }) || !b.opts.skip["replay"] {
		if err := b.produceMain(ctx); err != nil {
			return nil, err
		}
		rep.topic, rep.counts, rep.expected = b.topic, b.counts, b.exp.Summary()
		rep.valueAvg, rep.produceTook = b.valueAvg, b.produceTook
	}

	data := &memData{}
	for i := range b.opts.runs {
		for _, k := range todo {
			progress("round %d/%d: %s", i+1, b.opts.runs, k)
			m, err := b.measure(ctx, k, data, rep)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if err != nil {
				rep.warn("%s run %d failed: %v", k, i+1, err)
				continue
			}
			progress("%s run %d: %d records, %.0f events/s (steady %s; start → done %s)",
				k, i+1, m.records, m.rate(), m.steady.Round(time.Millisecond), m.total.Round(time.Millisecond))
			rep.runs[k] = append(rep.runs[k], m)
		}
	}
	data = nil // let the collector have it before the latency run

	if !b.opts.skip["replay"] {
		progress("bounded replay")
		res, err := b.runReplay(ctx)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		switch {
		case err != nil:
			rep.warn("bounded replay failed: %v", err)
		case res.dispositions["applied"] != 0:
			rep.warn("bounded replay applied %d events anew over an applied topic (want 0)", res.dispositions["applied"])
			fallthrough
		default:
			rep.replay = &res
		}
	}

	if b.opts.skip["latency"] {
		rep.latencySkipped = "skipped"
	} else {
		res, err := b.runLatency(ctx)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			rep.warn("latency run failed: %v", err)
		} else {
			rep.latency = &res
		}
	}
	b.mu.Lock()
	rep.warnings = append(rep.warnings, b.warnings...)
	b.mu.Unlock()
	rep.loadEnd = loadAvg()
	rep.wall = time.Since(rep.started)
	return rep, nil
}

// memData is the workload in memory, built on first use: B2's records,
// B0's precomputed batches.
type memData struct {
	b2 *b2Data
	b0 *b0Data
}

// pgCPU is the CPU seconds of this stack's PostgreSQL in u.
func (b *bench) pgCPU(u cpuUse) float64 {
	if b.pgPid == 0 {
		return u.byName["postgres"]
	}
	return u.tree(b.pgPid)
}

// measure runs one kind once.
func (b *bench) measure(ctx context.Context, kind string, data *memData, rep *report) (measurement, error) {
	if (kind == "B2" || kind == "B0") && data.b2 == nil {
		progress("generating the workload in memory for B2 and B0")
		d, err := b.b2Records()
		if err != nil {
			return measurement{}, err
		}
		data.b2 = d
	}
	baseline := func(r baselineRun, err error) (measurement, error) {
		for _, p := range r.problems {
			rep.warn("%s run %d: %s", kind, len(rep.runs[kind])+1, p)
		}
		return measurement{records: r.records, total: r.total, steady: r.steady, cpu: r.cpu,
			client: r.cpu.pid(os.Getpid()), pg: b.pgCPU(r.cpu)}, err
	}
	worker := func(r workerRun, err error) (measurement, error) {
		for _, p := range r.problems {
			rep.warn("%s run %d: %s", kind, len(rep.runs[kind])+1, p)
		}
		return measurement{records: r.records, total: r.total, steady: r.steady, cpu: r.cpu, rss: r.rss,
			diag: workerDiag(r, b.opts.partitions), client: r.cpu.pid(r.pid), pg: b.pgCPU(r.cpu), sink: r.sink}, err
	}
	switch kind {
	case "B1":
		r, err := b.runB1(ctx)
		return measurement{records: r.records, total: r.total, steady: r.steady, cpu: r.cpu, client: r.cpu.pid(os.Getpid())}, err
	case "B2":
		return baseline(b.runB2(ctx, data.b2))
	case "B0":
		if data.b0 == nil {
			progress("precomputing B0's batches")
			d, err := b.b0Precompute(data.b2)
			if err != nil {
				return measurement{}, err
			}
			data.b0 = d
			if b.opts.skip["B2"] {
				data.b2 = nil // B2's records are only needed by B2
			}
		}
		return baseline(b.runB0(ctx, data.b0))
	case "B3":
		return worker(b.runWorker(ctx, "b3", int64(b.opts.naiveEvents), false,
			"EFFECTIVELY_CONSUMER_BATCH_MAX_RECORDS=1", "EFFECTIVELY_CONSUMER_BATCH_LINGER=0s"))
	case "T":
		sink, err := b.otlpSink()
		if err != nil {
			return measurement{}, err
		}
		return worker(b.runWorker(ctx, "t", int64(b.opts.events), true, "OTEL_EXPORTER_OTLP_ENDPOINT="+sink))
	case "E":
		return worker(b.runWorker(ctx, "e", int64(b.opts.events), true))
	case "E-sink", "E-sink-avro":
		return worker(b.runSink(ctx, kind))
	}
	return measurement{}, fmt.Errorf("unknown kind %s", kind)
}

// workerDiag summarises the worker's own metrics of a run: batch sizes,
// the time inside Apply, and what became of the records.
func workerDiag(r workerRun, partitions int) string {
	if len(r.metrics) == 0 {
		return ""
	}
	s := r.metrics
	batches := value(s, "effectively_batch_records_count", nil)
	if batches == 0 {
		return ""
	}
	recs := value(s, "effectively_batch_records_sum", nil)
	apply := value(s, "effectively_batch_apply_seconds_sum", nil)
	var sb strings.Builder
	fmt.Fprintf(&sb, "%.0f batches of %.1f records avg, %.2f ms in Apply per batch avg; Apply busy %.0f%% of %d partitions × run",
		batches, recs/batches, 1000*apply/batches, 100*apply/(float64(partitions)*r.total.Seconds()), partitions)
	var parts []string
	for _, d := range []string{"applied", "duplicate", "stale", "parked", "dead_lettered"} {
		if n := value(s, "effectively_events_total", map[string]string{"disposition": d}); n > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", d, n))
		}
	}
	if len(parts) > 0 {
		fmt.Fprintf(&sb, "; %s", strings.Join(parts, ", "))
	}
	if fetched := value(s, "effectively_kafka_fetch_bytes_total", nil); fetched > 0 {
		fmt.Fprintf(&sb, "; Kafka fetched %.0f MiB uncompressed, %.0f B per record applied", fetched/(1<<20), fetched/float64(r.records))
	}
	if cpu := value(s, "process_cpu_seconds_total", nil); cpu > 0 {
		fmt.Fprintf(&sb, "; worker CPU %.1fs, %d goroutines", cpu, int(value(s, "go_goroutines", nil)))
	}
	return sb.String()
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (r *report) rates(kind string) []float64 {
	var out []float64
	for _, m := range r.runs[kind] {
		out = append(out, m.rate())
	}
	return out
}

func (r *report) medianRate(kind string) float64 { return median(r.rates(kind)) }

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func ms(s float64) string { return fmt.Sprintf("%.1f ms", 1000*s) }

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// print writes the report as plain tables.
func (r *report) print(out io.Writer) {
	o := r.opts
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "effectively benchmark (make bench): prints, never asserts\n\n")
	fmt.Fprintf(w, "started\t%s, wall time %s\n", r.started.Format(time.RFC3339), r.wall.Round(time.Second))
	fmt.Fprintf(w, "machine\tnproc %d, %s/%s; load average %s at start, %s at end\n", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, r.loadStart, r.loadEnd)
	def := config.Default()
	fmt.Fprintf(w, "worker\t%s %s; defaults (batch_max_records %d, batch_linger %s, pool of 8 connections) but http.addr on a free port\n",
		o.bin, r.worker, def.Consumer.BatchMaxRecords, def.Consumer.BatchLinger)
	if r.topic != "" {
		fmt.Fprintf(w, "workload\tseed %d, start time %s, %d records, %d partitions, %d accounts, 10%% duplicates, 10%% out of order, value %.0f B avg\n",
			o.seed, startTime.Format(time.RFC3339), o.events, o.partitions, o.accounts, r.valueAvg)
		fmt.Fprintf(w, "expected\t%s\n", r.expected)
		fmt.Fprintf(w, "topic\t%s, produced in %s; records per partition %v\n", r.topic, r.produceTook.Round(time.Millisecond), r.counts)
	}
	if r.sinkTopic != "" {
		fmt.Fprintf(w, "E-sink\tthe stock binary, config only (a sinks section: %s → table %s, gated upsert), on its own topic %s: %s; seed %d, 10%% re-sends, 20%% of updates after the product's next\n",
			sinkEventType, sinkTable, r.sinkTopic, r.sinkExpected, o.seed)
	}
	switch {
	case r.sinkAvroTopic != "":
		fmt.Fprintf(w, "E-sink-avro\tE-sink's stream (same seed, products, re-sends and disorder) with each value in Avro, Confluent wire format (schema ID %d, subject %s-value), no headers; the stock binary reads it as format avro (key_strategy field /id; type, subject, version by pointer) into E-sink's sink and table; on its own topic %s\n",
			r.sinkAvroSchema, r.sinkAvroTopic, r.sinkAvroTopic)
	case r.sinkAvroSkip != "":
		fmt.Fprintf(w, "E-sink-avro\tskipped: %s\n", r.sinkAvroSkip)
	}
	fmt.Fprintf(w, "method\t%d runs of each, alternating %s; events/s = records / steady time: B1 group assigned → all read, B2 and B0 whole run, B3, E, E-sink and E-sink-avro first record applied → done (stored positions polled every 100 ms)\n", o.runs, strings.Join(kinds, " "))
	if !o.skip["B0"] {
		fmt.Fprintf(w, "B0\tE's statements from memory: per batch of %d (partitioned as Kafka did, one goroutine per partition, the worker's pool of 8), BEGIN, lock position, claim (unnest … ON CONFLICT DO NOTHING RETURNING), read earlier claims' hashes, gated upsert accounts + insert-once ledger_entries (handlers.Effects with precomputed rows), stale dispositions + advance, COMMIT\n",
			def.Consumer.BatchMaxRecords)
	}
	if !o.skip["B3"] {
		fmt.Fprintf(w, "B3\tthe first %d records of the same topic (stops once the stored positions sum to %d), one goroutine per partition, batch_max_records 1, batch_linger 0s\n", o.naiveEvents, o.naiveEvents)
	}
	w.Flush()

	fmt.Fprintln(out)
	hdr := "\trecords\tmedian ev/s"
	for i := range o.runs {
		hdr += fmt.Sprintf("\trun %d ev/s", i+1)
	}
	hdr += "\tmedian start→done\tmedian steady"
	fmt.Fprintln(w, hdr)
	names := map[string]string{"B1": "B1 consume-only", "B2": "B2 database ceiling (pipeline, no Kafka)", "B0": "B0 database limit (E's SQL only)",
		"B3": "B3 naive worker", "E": "E effectively", "E-sink": "E-sink config-only sink", "E-sink-avro": "E-sink-avro config-only sink, Avro", "T": "T effectively, tracing on"}
	for _, k := range kinds {
		ms := r.runs[k]
		if len(ms) == 0 {
			why := map[bool]string{true: "skipped", false: "no successful run"}[o.skip[k]]
			if k == "E-sink-avro" && r.sinkAvroSkip != "" {
				why = "skipped: " + r.sinkAvroSkip
			}
			fmt.Fprintf(w, "%s\t%s\n", names[k], why)
			continue
		}
		var totals, steadies []float64
		line := fmt.Sprintf("%s\t%d\t%.0f", names[k], ms[0].records, r.medianRate(k))
		for i := range o.runs {
			if i < len(ms) {
				line += fmt.Sprintf("\t%.0f", ms[i].rate())
			} else {
				line += "\t-"
			}
		}
		for _, m := range ms {
			totals = append(totals, m.total.Seconds())
			steadies = append(steadies, m.steady.Seconds())
		}
		line += fmt.Sprintf("\t%.2fs\t%.2fs", median(totals), median(steadies))
		fmt.Fprintln(w, line)
	}
	w.Flush()

	fmt.Fprintln(out)
	fmt.Fprintln(w, "target (medians)\tvalue\ttarget")
	e := r.medianRate("E")
	for _, k := range []string{"E", "E-sink"} {
		if v := r.medianRate(k); v > 0 {
			fmt.Fprintf(w, "%s\t%.0f ev/s\t≥ 40000\t%s\n", k, v, verdict(v >= 40000))
		}
	}
	for _, k := range []string{"E-sink", "E-sink-avro"} {
		ms := r.runs[k]
		if len(ms) == 0 {
			continue
		}
		bad, checked := 0, 0
		for _, m := range ms {
			if m.sink != nil {
				checked++
				bad += m.sink.Regressions
			}
		}
		fmt.Fprintf(w, "%s version regressions\t%d (%d runs checked)\t0\t%s\n", k, bad, checked, verdict(bad == 0 && checked == len(ms)))
	}
	if j, a := r.medianRate("E-sink"), r.medianRate("E-sink-avro"); j > 0 && a > 0 {
		fmt.Fprintf(w, "E-sink-avro / E-sink (ev/s)\t%.2f\t≥ 0.85\t%s\n", a/j, verdict(a/j >= 0.85))
	} else if !o.skip["E-sink-avro"] {
		fmt.Fprintf(w, "E-sink-avro / E-sink (ev/s)\t-\n")
	}
	for _, x := range []struct {
		base   string
		target float64
	}{{"B0", 0.5}, {"B3", 25}, {"B2", 0.6}, {"B1", 0}} {
		bv := r.medianRate(x.base)
		if e == 0 || bv == 0 {
			fmt.Fprintf(w, "E/%s\t-\n", x.base)
			continue
		}
		ratio := e / bv
		if x.target > 0 {
			fmt.Fprintf(w, "E/%s\t%.2f\t≥ %g\t%s\n", x.base, ratio, x.target, verdict(ratio >= x.target))
		} else {
			fmt.Fprintf(w, "E/%s\t%.2f\t(none)\n", x.base, ratio)
		}
	}
	if t := r.medianRate("T"); t > 0 && e > 0 {
		fmt.Fprintf(w, "T/E (tracing on / off)\t%.2f\t(none)\n", t/e)
	}
	w.Flush()

	fmt.Fprintln(out)
	r.printCPU(w)
	w.Flush()

	fmt.Fprintln(out)
	for _, k := range []string{"E", "E-sink", "E-sink-avro"} {
		var peak int64
		for _, m := range r.runs[k] {
			peak = max(peak, m.rss)
		}
		if peak > 0 {
			fmt.Fprintf(w, "worker peak RSS (VmHWM, max over %s runs)\t%.1f MiB\ttarget ≤ 256 MiB\t%s\n", k, mib(peak), verdict(peak <= 256<<20))
		} else if k == "E" {
			fmt.Fprintf(w, "worker peak RSS (VmHWM, max over E runs)\t-\n")
		}
	}
	w.Flush()

	fmt.Fprintln(out)
	r.printReplay(out)

	fmt.Fprintln(out)
	switch l := r.latency; {
	case r.latencySkipped != "":
		fmt.Fprintf(out, "latency: %s\n", r.latencySkipped)
	case l == nil:
		fmt.Fprintln(out, "latency: failed (see warnings)")
	default:
		fmt.Fprintf(out, "end-to-end latency (effectively_end_to_end_seconds: record timestamp → batch committed), caught-up worker with defaults,\n")
		fmt.Fprintf(out, "offered %d events/s for %s in 10 ms ticks (achieved %.0f/s, %d records, %d accounts, own topic and schema, after a %s warm-up);\n",
			l.offered, l.duration, l.achieved, l.produced, l.accounts, o.latencyWarmup)
		fmt.Fprintf(out, "timestamps are set when a record is handed to the producer (5 ms linger included); histogram change over the paced run: %.0f observations\n", l.observed)
		for _, q := range []struct {
			name string
			r    quantileResult
		}{{"p50", l.p50}, {"p99", l.p99}} {
			if !q.r.ok {
				fmt.Fprintf(w, "%s\t-\n", q.name)
				continue
			}
			fmt.Fprintf(w, "%s\t%s\tinterpolated linearly in bucket (%s, %s], width %s (%.0f%% of its upper bound)\n",
				q.name, ms(q.r.v), ms(q.r.lo), ms(q.r.hi), ms(q.r.hi-q.r.lo), 100*(q.r.hi-q.r.lo)/q.r.hi)
		}
		fmt.Fprintf(w, "latency worker peak RSS\t%.1f MiB\n", mib(l.rss))
		w.Flush()
	}

	fmt.Fprintln(out)
	fmt.Fprintln(out, "diagnostics (CPU seconds by process name over each run, machine-wide: other sessions on the machine count too)")
	for _, k := range kinds {
		for i, m := range r.runs[k] {
			fmt.Fprintf(out, "  %s run %d: start→done %.2fs; CPU: %s\n", k, i+1, m.total.Seconds(), m.cpu)
			if m.diag != "" {
				fmt.Fprintf(out, "     worker metrics: %s\n", m.diag)
			}
			if m.sink != nil {
				fmt.Fprintf(out, "     table %s against the newest produced versions: %s\n", sinkTable, m.sink)
			}
		}
	}
	if l := r.latency; l != nil {
		fmt.Fprintf(out, "  latency paced run: CPU: %s\n", l.cpu)
	}

	fmt.Fprintln(out)
	if len(r.warnings) == 0 {
		fmt.Fprintln(out, "warnings: none (each E, B2 and B0 run checked: claims = expected distinct events, ledger totals = expected; each E-sink and E-sink-avro run: every product at its newest produced version and columns, claims = distinct events)")
	} else {
		fmt.Fprintln(out, "warnings:")
		for _, msg := range r.warnings {
			fmt.Fprintf(out, "  WARNING: %s\n", msg)
		}
	}
}

// printCPU prints the CPU per event of the runs that drive the database:
// the driving process (the worker, or this program for B2 and B0) and this
// stack's PostgreSQL, medians over the runs.
func (r *report) printCPU(w io.Writer) {
	fmt.Fprintf(w, "CPU per event (medians)\tdriver µs\tPostgreSQL µs\tdriver\n")
	perEvent := func(k string) (client, pg float64) {
		var cs, ps []float64
		for _, m := range r.runs[k] {
			if m.records > 0 {
				cs = append(cs, 1e6*m.client/float64(m.records))
				ps = append(ps, 1e6*m.pg/float64(m.records))
			}
		}
		return median(cs), median(ps)
	}
	for _, k := range []string{"B0", "B2", "E", "E-sink", "E-sink-avro"} {
		if len(r.runs[k]) == 0 {
			continue
		}
		c, p := perEvent(k)
		switch k {
		case "E-sink-avro":
			fmt.Fprintf(w, "%s\t%.1f\t%.1f\tthe worker process\n", k, c, p)
		case "E", "E-sink":
			fmt.Fprintf(w, "%s\t%.1f\t%.1f\tthe worker process; targets worker ≤ 12 µs %s, PostgreSQL ≤ 20 µs %s\n",
				k, c, p, verdict(c <= 12), verdict(p <= 20))
		default:
			fmt.Fprintf(w, "%s\t%.1f\t%.1f\tthis program\n", k, c, p)
		}
	}
	if len(r.runs["E-sink"]) > 0 && len(r.runs["E-sink-avro"]) > 0 {
		jc, jp := perEvent("E-sink")
		ac, ap := perEvent("E-sink-avro")
		if jc > 0 && jp > 0 {
			fmt.Fprintf(w, "E-sink-avro / E-sink\t%.2f\t%.2f\tthe ratios of the medians above: Avro over JSON\n", ac/jc, ap/jp)
		}
	}
	fmt.Fprintf(w, "\tPostgreSQL: %s; per event = CPU seconds of the run / records (re-sends included)\n", r.pgScope)
}
