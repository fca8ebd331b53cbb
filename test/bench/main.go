// Command bench is `make bench`: the throughput, latency and memory benchmark
// of the worker against four baselines, on the real stack. It prints; it
// never asserts.
//
//   - B1 consume-only: a franz-go group consumer reads the topic, no database.
//   - B2 database ceiling: pipeline.Applier.ApplyBatch (the worker's whole
//     pipeline: decoding, handlers, the transaction) on the same records,
//     partitioned as Kafka did, with the worker's connection count and batch
//     size, no Kafka.
//   - B0 database limit: E's statements alone (lock, claim, typed effects,
//     dispositions, advance), sent from precomputed batches through the
//     engine's own dedupe functions and handlers.Effects (b0.go).
//   - B3 naive worker: the real binary with one record per transaction, on
//     the first naive-events records of the same topic.
//   - E: the real binary with its defaults.
//   - E-sink: the real binary as a config-only sink on an upsert-only topic
//     with re-sends and disorder, checked against the newest version
//     produced of every key (sink.go).
//   - E-sink-avro: E-sink on the same stream encoded as Avro in the
//     Confluent wire format, its schema in the registry (sinkavro.go);
//     E-sink-avro / E-sink is what the encoding costs.
//   - T (with -trace): E with tracing on, exporting over OTLP/HTTP to a
//     sink in this process that discards what it receives; T/E is what
//     tracing costs (E itself runs with tracing off, the default).
//   - replay: after a first pass of E on a schema of its own, `effectively
//     replay --replay-group` over the same range (every record a duplicate).
//
// The runs alternate (B1, B2, B0, B3, E, E-sink, E-sink-avro, B1, …) so
// that a noisy neighbour hurts every kind alike; medians are compared.
// Then, with a caught-up worker, a fixed offered rate measures the
// end-to-end latency from the worker's own histogram.
//
// It reads EFFECTIVELY_TEST_POSTGRES_URL, EFFECTIVELY_TEST_KAFKA_BROKERS and
// EFFECTIVELY_TEST_REGISTRY_URL (stack/with-stack.sh exports them; without
// the registry E-sink-avro is skipped) and runs bin/effectively from the
// current directory (make runs it from the repository root after `make
// build`). Every topic, group, schema and registry subject it creates is
// uniquely named and removed at the end.
//
// Three other modes replace the benchmark: -soak (make soak, soak.go), a
// paced load at a share of the measured maximum for a long time with short
// retention, sampled every 10 s; -scale 1,2,3 (make scale, scale.go), the
// same topic drained by 1, 2 and 3 worker processes against one database;
// and -memory (make bench-memory, memory.go), the worker's heap and RSS
// with records of about 1 MiB on every partition.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the command-line flags.
type options struct {
	events          int
	accounts        int
	partitions      int
	runs            int
	naiveEvents     int
	latencyRate     int
	latencyDuration time.Duration
	latencyWarmup   time.Duration
	seed            uint64
	bin             string
	skip            map[string]bool
	pruneClaims     int // -prune-claims: the pruning measurement (prune.go), off when 0
	pruneRows       int // -prune-rows: the row-by-row retention measurement (prunerows.go), off when 0
	sinkEvents      int // E-sink's and E-sink-avro's records (0: -events)
	sinkProducts    int // their products (0: a tenth of their records)
	trace           bool
	soak            soakOptions   // -soak: the soak (soak.go) instead of the benchmark
	memory          memoryOptions // -memory: the memory per record (memory.go) instead of the benchmark
	scale           []int         // -scale: worker processes to compare (scale.go) instead of the benchmark
}

// kinds are the measurements, in the order a round runs them.
var kinds = []string{"B1", "B2", "B0", "B3", "E", "E-sink", "E-sink-avro", "T"}

func parseFlags(args []string) (options, error) {
	var o options
	var skip string
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.IntVar(&o.events, "events", 1_000_000, "records in the pre-produced topic (re-sends included)")
	fs.IntVar(&o.accounts, "accounts", 100_000, "accounts the workload opens")
	fs.IntVar(&o.partitions, "partitions", 8, "partitions of the benchmark topics")
	fs.IntVar(&o.runs, "runs", 3, "runs of each of B1, B2, B0, B3, E, E-sink and E-sink-avro (alternating); medians are reported")
	fs.IntVar(&o.naiveEvents, "naive-events", 100_000, "B3 stops once this many records of the topic are applied (a prefix)")
	fs.IntVar(&o.latencyRate, "latency-rate", 5000, "offered rate of the latency run, events/s")
	fs.DurationVar(&o.latencyDuration, "latency-duration", 30*time.Second, "length of the paced latency run")
	fs.DurationVar(&o.latencyWarmup, "latency-warmup", 2*time.Second, "paced warm-up before the latency run (not counted)")
	fs.Uint64Var(&o.seed, "seed", 20260101, "workload seed")
	fs.StringVar(&o.bin, "bin", "bin/effectively", "the worker binary (make bench builds it)")
	fs.IntVar(&o.pruneClaims, "prune-claims", 0, "also measure retention's cost: the worker on a schema holding this many claims, in the open generation with the pruner off, then in two closed generations (one expired, dropped during the run) with the pruner rotating every 5 s, in -runs pairs (e.g. 5000000; 0: off)")
	fs.IntVar(&o.pruneRows, "prune-rows", 0, "also measure the row-by-row retention of dead letters, outbox intents, parked history and tombstones: this many expired rows of each deleted by the pruner alone (e.g. 500000; 0: off)")
	fs.IntVar(&o.sinkEvents, "sink-events", 0, "records in the upsert-only topics of E-sink and E-sink-avro (re-sends included; 0: -events)")
	fs.IntVar(&o.sinkProducts, "sink-products", 0, "products the E-sink and E-sink-avro topics update (0: a tenth of -sink-events)")
	fs.BoolVar(&o.trace, "trace", false, "also run T: E with tracing on (OTLP/HTTP to a discarding sink), in each round")
	o.soak.flags(fs)
	o.memory.flags(fs)
	fs.Func("scale", "instead of the benchmark, drain the -events topic with each of these numbers of worker processes against one database, e.g. 1,2,3 (scale.go; the last -scale given counts)", func(v string) error {
		o.scale = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return fmt.Errorf("want a comma list of process counts ≥ 1, e.g. 1,2,3")
			}
			if !slices.Contains(o.scale, n) {
				o.scale = append(o.scale, n)
			}
		}
		return nil
	})
	fs.StringVar(&skip, "skip", "", "comma-separated measurements to skip: B1,B2,B0,B3,E,E-sink,E-sink-avro,T,latency,replay")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.skip = map[string]bool{}
	for _, s := range strings.Split(skip, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		k := ""
		for _, name := range append(slices.Clone(kinds), "latency", "replay") {
			if strings.EqualFold(s, name) {
				k = name
			}
		}
		if k == "" {
			return o, fmt.Errorf("-skip %q: want a comma list of %s, latency, replay", s, strings.Join(kinds, ", "))
		}
		o.skip[k] = true
	}
	switch {
	case o.events < 1:
		return o, errors.New("-events: want at least 1")
	case o.accounts < 1:
		return o, errors.New("-accounts: want at least 1")
	case o.partitions < 1:
		return o, errors.New("-partitions: want at least 1")
	case o.runs < 1:
		return o, errors.New("-runs: want at least 1")
	case o.naiveEvents < 1:
		return o, errors.New("-naive-events: want at least 1")
	case o.latencyRate < 1 || o.latencyDuration <= 0:
		return o, errors.New("-latency-rate and -latency-duration: want positive values")
	case o.sinkEvents < 0 || o.sinkProducts < 0:
		return o, errors.New("-sink-events and -sink-products: want 0 (the default) or more")
	}
	if modes := btoi(o.soak.on) + btoi(len(o.scale) > 0) + btoi(o.memory.on); modes > 1 {
		return o, errors.New("-soak, -scale and -memory: want one of them")
	}
	if err := o.soak.validate(); err != nil {
		return o, err
	}
	if err := o.memory.validate(); err != nil {
		return o, err
	}
	o.naiveEvents = min(o.naiveEvents, o.events)
	if o.sinkEvents == 0 {
		o.sinkEvents = o.events
	}
	if o.sinkProducts == 0 {
		o.sinkProducts = max(1, o.sinkEvents/10)
	}
	if !o.trace {
		o.skip["T"] = true
	}
	return o, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	opts, err := parseFlags(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	b, err := newBench(ctx, opts)
	if err != nil {
		return err
	}
	defer b.cleanup()
	switch {
	case opts.soak.on:
		rep, err := b.runSoak(ctx)
		if err != nil {
			return err
		}
		return rep.output(os.Stdout)
	case len(opts.scale) > 0:
		rep, err := b.runScale(ctx)
		if err != nil {
			return err
		}
		rep.print(os.Stdout)
		return nil
	case opts.memory.on:
		rep, err := b.runMemory(ctx)
		if err != nil {
			return err
		}
		rep.print(os.Stdout)
		return nil
	}
	rep, err := b.run(ctx)
	if err != nil {
		return err
	}
	rep.print(os.Stdout)
	if opts.pruneClaims > 0 {
		pr, err := b.runPrune(ctx, opts.pruneClaims)
		if err != nil {
			return err
		}
		printPrune(os.Stdout, pr)
	}
	if opts.pruneRows > 0 {
		rr, err := b.runRowPruning(ctx, opts.pruneRows)
		if err != nil {
			return err
		}
		printRowPruning(os.Stdout, rr)
	}
	return nil
}
