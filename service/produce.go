package service

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kzap"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/internal/broker"
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

// Workload generates sample records for `produce --events N` (and its
// flags), for demos, tests and benchmarks of a build's own domain.
type Workload interface {
	// Flags registers the generator's flags on the produce command.
	Flags(fs *pflag.FlagSet)
	// Check validates the flags; active reports whether they ask for a
	// generated workload (otherwise produce sends --file). file is --file.
	Check(fs *pflag.FlagSet, file string) (active bool, err error)
	// Produce sends the generated workload to topic with cl and waits for
	// every acknowledgement.
	Produce(ctx context.Context, cl *kgo.Client, topic string, stdout, stderr io.Writer) error
}

// Workload sets the generator of `produce --events`.
func (a *App) Workload(w Workload) { a.workload = w }

func newProduceCmd(c *CLI) *cobra.Command {
	var (
		topic      string
		file       string
		partitions int32
		recreate   bool
		yes        bool
	)
	cmd := &cobra.Command{
		Use:   "produce",
		Short: "Send events to a topic (creating it if missing) with an idempotent producer",
		Long: `Send events to a topic with an idempotent producer, keyed by resource ID.

A build with a workload generator (the reference build's, say)
also takes --events N and the generator's flags instead of --file.

--file reads JSON lines: {"key": "acct-1", "value": {...CloudEvent...}, "headers": {"ce_id": "..."}}.
The topic is created with --partitions partitions when it does not exist.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			generate := false
			if w := c.app.workload; w != nil {
				var err error
				if generate, err = w.Check(cmd.Flags(), file); err != nil {
					return usageError{err: err}
				}
			}
			if topic == "" {
				topic = c.cfg.Kafka.Topics[0]
			}
			if recreate {
				if err := confirm(ctx, c, yes, 1, fmt.Sprintf("delete topic %s and every record in it", topic)); err != nil {
					return err
				}
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
			if generate {
				return c.app.workload.Produce(ctx, cl, topic, c.stdout, c.stderr)
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
	cmd.Flags().BoolVar(&recreate, "recreate", false, "delete the topic and create it empty first (demos and tests; destroys its records; asks first unless --yes)")
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask before a destructive step (--recreate)")
	if c.app.workload != nil {
		c.app.workload.Flags(cmd.Flags())
	}
	return cmd
}

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
