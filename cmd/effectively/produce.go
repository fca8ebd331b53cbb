package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kzap"

	"github.com/effectively-io/effectively/broker"
	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/workload"
)

// produceLine is one line of a JSON-lines input file: the record key, the
// value (any JSON; sent as its bytes) and optional headers.
type produceLine struct {
	Key     string            `json:"key"`
	Value   json.RawMessage   `json:"value"`
	Headers map[string]string `json:"headers,omitempty"`
}

// produceMaxBuffered bounds the records handed to the client but not yet
// acknowledged: Produce blocks beyond it, so memory stays flat however many
// records are generated. There is deliberately no kgo.RecordDeliveryTimeout:
// franz-go measures it from the record's timestamp, and generated records
// are backdated by up to --time-span, so they would time out at once.
// SIGINT stops a producer that cannot deliver.
const produceMaxBuffered = 10_000

// generateFlags are produce's workload-generation flags.
type generateFlags struct {
	accounts    int
	events      int
	duplicates  float64
	outOfOrder  float64
	ledgerShare float64
	seed        uint64
	source      string
	timeSpan    time.Duration
	expect      string
	progress    bool
}

// generationOnly names the flags that mean nothing without --events.
var generationOnly = []string{"accounts", "duplicates", "out-of-order", "ledger-share", "seed", "source", "time-span", "expect", "progress"}

func (f *generateFlags) register(fs *pflag.FlagSet) {
	fs.IntVar(&f.events, "events", 0, "generate a workload of this many records (re-sends included) instead of reading --file")
	fs.IntVar(&f.accounts, "accounts", 1000, "accounts the generated workload opens")
	fs.Float64Var(&f.duplicates, "duplicates", 0.1, "fraction of generated records that re-send an earlier record (same id and payload)")
	fs.Float64Var(&f.outOfOrder, "out-of-order", 0.1, "fraction of generated updates, closes and ledger events swapped with the account's next event (at most 0.5)")
	fs.Float64Var(&f.ledgerShare, "ledger-share", workload.DefaultLedgerShare, "fraction of generated events that are ledger credits and debits")
	fs.Uint64Var(&f.seed, "seed", 1, "workload seed: the same flags and seed give the same events (ids evt-<seed>-<n>; reusing a seed on a topic re-sends its events)")
	fs.StringVar(&f.source, "source", workload.DefaultSource, "CloudEvents source of generated events")
	fs.DurationVar(&f.timeSpan, "time-span", 0, "spread generated record timestamps evenly over this span, ending now (0: all now)")
	fs.StringVar(&f.expect, "expect", "", "write the expected end state of the generated workload to this JSON file")
	fs.BoolVar(&f.progress, "progress", false, "print generation progress to stderr every second")
}

// generator checks the flags and returns the workload generator, nil when
// --events is not set.
func (f *generateFlags) generator(fs *pflag.FlagSet, file string) (*workload.Generator, error) {
	switch {
	case f.events < 0:
		return nil, fmt.Errorf("--events %d: want a number of records > 0 (or leave it out to send --file)", f.events)
	case f.events > 0 && file != "":
		return nil, errors.New("--events and --file are mutually exclusive: generate a workload with --events, or send a file with --file")
	case f.events == 0:
		for _, name := range generationOnly {
			if fs.Changed(name) {
				return nil, fmt.Errorf("--%s applies to workload generation only: add --events N", name)
			}
		}
		return nil, nil
	case f.ledgerShare < 0 || f.ledgerShare > 1:
		return nil, fmt.Errorf("--ledger-share %v: want a fraction from 0 to 1", f.ledgerShare)
	}
	share := f.ledgerShare
	if share == 0 {
		share = -1 // the generator's "none"; its 0 means the default
	}
	g, err := workload.NewGenerator(workload.Config{
		Accounts:    f.accounts,
		Events:      f.events,
		Duplicates:  f.duplicates,
		OutOfOrder:  f.outOfOrder,
		LedgerShare: share,
		Seed:        f.seed,
		Source:      f.source,
		StartTime:   time.Now().Add(-f.timeSpan),
		TimeSpan:    f.timeSpan,
	})
	if err != nil {
		return nil, fmt.Errorf("--%w", err) // its messages start with the flag's name
	}
	return g, nil
}

func newProduceCmd(c *cli) *cobra.Command {
	var (
		topic      string
		file       string
		partitions int32
		recreate   bool
		gen        generateFlags
	)
	cmd := &cobra.Command{
		Use:   "produce",
		Short: "Send events to a topic (creating it if missing) with an idempotent producer",
		Long: `Send events to a topic with an idempotent producer, keyed by resource ID.

--events N generates a workload of the reference domain instead: N records of
account and ledger events (CloudEvents, structured mode) over --accounts
accounts, with --duplicates re-sends and --out-of-order swaps; the same flags
and --seed give the same events. --expect FILE writes the end state a correct
worker reaches, for a later comparison with the database.

--file reads JSON lines: {"key": "acct-1", "value": {...CloudEvent...}, "headers": {"ce_id": "..."}}.
The topic is created with --partitions partitions when it does not exist.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			g, err := gen.generator(cmd.Flags(), file)
			if err != nil {
				return usageError{err: err}
			}
			if topic == "" {
				topic = c.cfg.Kafka.Topics[0]
			}
			cl, err := newKafkaClient(c.cfg, c.log.Named("kafka"),
				kgo.DefaultProduceTopic(topic),
				kgo.WithLogger(kzap.New(c.log.Named("kafka"), kzap.Level(kgo.LogLevelWarn))),
				kgo.ProducerLinger(5*time.Millisecond),
				kgo.MaxBufferedRecords(produceMaxBuffered),
				// A new topic's partitions answer NOT_LEADER for a moment
				// after metadata names their leader; the default 5 s
				// minimum between metadata refreshes would stall them.
				kgo.MetadataMinAge(250*time.Millisecond),
			)
			if err != nil {
				return err
			}
			defer cl.Close()
			if err := ensureTopic(ctx, cl, c.cfg.Kafka, topic, partitions, recreate); err != nil {
				return err
			}
			if g != nil {
				return produceGenerated(ctx, cl, g, &gen, topic, c.stdout, c.stderr)
			}
			if file == "" {
				return nil
			}
			var in io.Reader = os.Stdin
			if file != "-" {
				f, err := os.Open(file)
				if err != nil {
					return fmt.Errorf("--file: %w", err)
				}
				defer f.Close()
				in = f
			}
			n, err := produceLines(ctx, cl, in)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "produced %d records to %s\n", n, topic)
			return nil
		},
	}
	cmd.Flags().StringVar(&topic, "topic", "", "topic to produce to (default: the first of kafka.topics)")
	cmd.Flags().StringVar(&file, "file", "", "JSON-lines file of records to send ('-' for stdin)")
	cmd.Flags().Int32Var(&partitions, "partitions", 8, "partitions of the topic when it is created")
	cmd.Flags().BoolVar(&recreate, "recreate", false, "delete the topic and create it empty first (demos and tests; destroys its records)")
	gen.register(cmd.Flags())
	return cmd
}

// produceGenerated sends every record of g asynchronously, keyed by account
// ID with the generator's timestamps, and waits for every acknowledgement.
// It writes the expected state (--expect) only when every record was
// acknowledged: otherwise it would describe records the topic lacks.
func produceGenerated(ctx context.Context, cl *kgo.Client, g *workload.Generator, f *generateFlags, topic string, stdout, stderr io.Writer) error {
	headers := []kgo.RecordHeader{{Key: "content-type", Value: []byte(workload.ContentType)}}
	var (
		acked, failed atomic.Int64
		errMu         sync.Mutex
		firstErr      error
	)
	promise := func(_ *kgo.Record, err error) {
		if err == nil {
			acked.Add(1)
			return
		}
		if failed.Add(1) == 1 {
			errMu.Lock()
			firstErr = err
			errMu.Unlock()
		}
	}
	start := time.Now()
	nextReport := start.Add(time.Second)
	sent, complete := 0, false
	for ctx.Err() == nil {
		r, ok := g.Next()
		if !ok {
			complete = true
			break
		}
		// Produce blocks while produceMaxBuffered records are unacknowledged.
		cl.Produce(ctx, &kgo.Record{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp, Headers: headers}, promise)
		sent++
		if f.progress && sent%1024 == 0 {
			if now := time.Now(); now.After(nextReport) {
				nextReport = now.Add(time.Second)
				fmt.Fprintf(stderr, "produce: %d records sent, %d acknowledged, %d failed, %.0f records/s\n",
					sent, acked.Load(), failed.Load(), float64(acked.Load())/now.Sub(start).Seconds())
			}
		}
	}
	if err := cl.Flush(ctx); err != nil {
		// Interrupted: fail what is still buffered, so that every promise
		// has run before the counts are read.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_ = cl.AbortBufferedRecords(actx)
		cancel()
	}
	elapsed := time.Since(start)
	exp := g.Expected()
	nAcked, nFailed := acked.Load(), failed.Load()
	rate := float64(nAcked) / max(elapsed.Seconds(), 1e-9)
	switch {
	case !complete || ctx.Err() != nil:
		return fmt.Errorf("producing to %s: interrupted after sending %d of %d records (%d acknowledged, %d failed): %w",
			topic, sent, f.events, nAcked, nFailed, context.Cause(ctx))
	case nFailed > 0:
		errMu.Lock()
		defer errMu.Unlock()
		return fmt.Errorf("producing to %s: %d of %d records failed (%d acknowledged), first: %w", topic, nFailed, sent, nAcked, firstErr)
	}
	if f.expect != "" {
		if err := exp.WriteFile(f.expect); err != nil {
			return fmt.Errorf("--expect: %w", err)
		}
	}
	fmt.Fprintf(stdout, "produced %d records to %s (%d distinct, %d duplicates, %d out of order) in %s: %.0f records/s\n",
		nAcked, topic, exp.Distinct, exp.Duplicates, exp.OutOfOrder, elapsed.Round(time.Millisecond), rate)
	return nil
}

// ensureTopic creates topic when it does not exist, or, with recreate,
// deletes it and creates it empty.
func ensureTopic(ctx context.Context, cl *kgo.Client, k config.Kafka, topic string, partitions int32, recreate bool) error {
	brokers := k.Brokers
	ctx, cancel := context.WithTimeout(ctx, 2*startupTimeout)
	defer cancel()
	if err := cl.Ping(ctx); err != nil {
		if explained := broker.Explain(err, k); explained != err {
			return explained
		}
		return fmt.Errorf("cannot reach Kafka at %s (kafka.brokers): %w; fix: start the broker (make stack-up) or set kafka.brokers",
			strings.Join(brokers, ","), err)
	}
	adm := kadm.NewClient(cl)
	if recreate {
		resp, err := adm.DeleteTopic(ctx, topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("deleting topic %s: %w", topic, err)
		}
	}
	for {
		resp, err := adm.CreateTopic(ctx, partitions, 1, nil, topic)
		if err == nil {
			err = resp.Err
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, kerr.TopicAlreadyExists) && !recreate:
			return nil
		case errors.Is(err, kerr.TopicAlreadyExists):
			// The deletion is still being applied; try again shortly.
			select {
			case <-ctx.Done():
				return fmt.Errorf("recreating topic %s: the old one is still being deleted: %w", topic, ctx.Err())
			case <-time.After(200 * time.Millisecond):
			}
		case errors.Is(err, kerr.TopicAuthorizationFailed) && !recreate:
			// A principal without CREATE may still write to an existing topic.
			if d, lerr := adm.ListTopics(ctx, topic); lerr == nil && d.Has(topic) && d[topic].Err == nil {
				return nil
			}
			return &broker.Denied{Principal: broker.Principal(k), Operation: "CREATE", ResourceType: "topic", Resource: topic, Err: err}
		default:
			return fmt.Errorf("creating topic %s: %w", topic, broker.Explain(err, k))
		}
	}
}

// produceLines sends each JSON line of in and waits for every
// acknowledgement.
func produceLines(ctx context.Context, cl *kgo.Client, in io.Reader) (int, error) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var recs []*kgo.Record
	for line := 1; sc.Scan(); line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var pl produceLine
		if err := json.Unmarshal(sc.Bytes(), &pl); err != nil {
			return 0, fmt.Errorf("--file line %d: %w", line, err)
		}
		r := &kgo.Record{Key: []byte(pl.Key), Value: []byte(pl.Value)}
		for k, v := range pl.Headers {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
		recs = append(recs, r)
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading --file: %w", err)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return 0, fmt.Errorf("producing: %w", err)
	}
	return len(recs), nil
}
