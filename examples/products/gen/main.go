// Command gen registers the products example's schemas (v1, then v2 under
// BACKWARD compatibility) in the schema registry and produces its stream
// to Kafka: product versions in Avro, Protobuf or JSON Schema with re-sends, disorder,
// the schema's evolution mid-stream and poison. With -expect it writes the
// end state the stream implies (every product's newest version, the
// distinct versions, the poison by dead-letter reason) as JSON.
//
// It reads the brokers and the registry from EFFECTIVELY_KAFKA_BROKERS and
// EFFECTIVELY_SCHEMA_REGISTRY_URL (defaults: the local stack's).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/effectively-io/effectively/examples/products/workload"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run() error {
	topic := flag.String("topic", "shop.products", "the topic to produce to (its subject is <topic>-value)")
	format := flag.String("format", "avro", "avro, protobuf or jsonschema")
	n := flag.Int("products", 1000, "products (each with one to five versions)")
	seed := flag.Uint64("seed", 42, "the stream's seed")
	poison := flag.Bool("poison", true, "add poison records (unknown schema ID, bytes of no value, wrong magic byte)")
	expect := flag.String("expect", "", "write the expected end state to this file")
	flag.Parse()
	brokers := env("EFFECTIVELY_KAFKA_BROKERS", "127.0.0.1:19092")
	registry := env("EFFECTIVELY_SCHEMA_REGISTRY_URL", "http://127.0.0.1:18081/apis/ccompat/v7")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	v1, v2, err := workload.Schemas(*format)
	if err != nil {
		return fmt.Errorf("-format: %w", err)
	}
	rc, err := sr.NewClient(sr.URLs(registry))
	if err != nil {
		return err
	}
	subject := *topic + "-value"
	for _, r := range rc.SetCompatibility(ctx, sr.SetCompatibility{Level: sr.CompatBackward}, subject) {
		if r.Err != nil {
			return fmt.Errorf("setting %s's compatibility at %s: %w", subject, registry, r.Err)
		}
	}
	var ids [2]int
	for i, s := range []sr.Schema{v1, v2} {
		ss, err := rc.CreateSchema(ctx, subject, s)
		if err != nil {
			return fmt.Errorf("registering %s v%d at %s: %w", subject, i+1, registry, err)
		}
		ids[i] = ss.ID
	}
	enc, err := workload.NewEncoder(*format, ids[0], ids[1])
	if err != nil {
		return err
	}
	s, err := workload.Generate(workload.Config{Products: *n, Poison: *poison, Seed: *seed}, enc)
	if err != nil {
		return err
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.DefaultProduceTopic(*topic), kgo.AllowAutoTopicCreation())
	if err != nil {
		return err
	}
	defer cl.Close()
	recs := make([]*kgo.Record, len(s.Records))
	for i, r := range s.Records {
		recs[i] = &kgo.Record{Key: r.Key, Value: r.Value}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("producing to %s at %s: %w", *topic, brokers, err)
	}
	fmt.Printf("produced %d records to %s: %d product versions of %d products (schema %s v1 = ID %d, v2 = ID %d from record %d on), %d re-sent, %d swapped, poison %v\n",
		len(s.Records), *topic, s.Events, len(s.Newest), subject, ids[0], ids[1], s.FirstV2, s.Resent, s.Swapped, s.Poison)
	if *expect != "" {
		b, err := json.MarshalIndent(s, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(*expect, b, 0o600)
	}
	return nil
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
