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
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kzap"
)

// produceLine is one line of a JSON-lines input file: the record key, the
// value (any JSON; sent as its bytes) and optional headers.
type produceLine struct {
	Key     string            `json:"key"`
	Value   json.RawMessage   `json:"value"`
	Headers map[string]string `json:"headers,omitempty"`
}

func newProduceCmd(c *cli) *cobra.Command {
	var (
		topic      string
		file       string
		partitions int32
	)
	cmd := &cobra.Command{
		Use:   "produce",
		Short: "Send events to a topic (creating it if missing) with an idempotent producer",
		Long: `Send events to a topic with an idempotent producer, keyed by resource ID.

--file reads JSON lines: {"key": "acct-1", "value": {...CloudEvent...}, "headers": {"ce_id": "..."}}.
The topic is created with --partitions partitions when it does not exist.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if topic == "" {
				topic = c.cfg.Kafka.Topics[0]
			}
			cl, err := kgo.NewClient(
				kgo.SeedBrokers(c.cfg.Kafka.Brokers...),
				kgo.DefaultProduceTopic(topic),
				kgo.WithLogger(kzap.New(c.log.Named("kafka"), kzap.Level(kgo.LogLevelWarn))),
				kgo.DialTimeout(5*time.Second),
				kgo.ProducerLinger(5*time.Millisecond),
			)
			if err != nil {
				return err
			}
			defer cl.Close()
			if err := ensureTopic(ctx, cl, c.cfg.Kafka.Brokers, topic, partitions); err != nil {
				return err
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
	return cmd
}

// ensureTopic creates topic when it does not exist.
func ensureTopic(ctx context.Context, cl *kgo.Client, brokers []string, topic string, partitions int32) error {
	ctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	if err := cl.Ping(ctx); err != nil {
		return fmt.Errorf("cannot reach Kafka at %s (kafka.brokers): %w; fix: start the broker (make stack-up) or set kafka.brokers",
			strings.Join(brokers, ","), err)
	}
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("creating topic %s: %w", topic, err)
	}
	return nil
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
