package main

import (
	"context"
	"fmt"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
)

// E-sink-avro is E-sink on the same stream (generateSink, same seed) with
// every value in Avro, in the Confluent wire format (magic byte 0, the
// schema's 4-byte ID, the Avro binary), its schema registered under
// "<topic>-value". The worker reads the topic as format avro and maps the
// decoded record by pointers; the sink, the table and the check are
// E-sink's. E-sink-avro / E-sink is what the encoding costs.

// registryURLEnv names the schema registry's Confluent API
// (stack/with-stack.sh exports it). Unset, E-sink-avro is skipped.
const registryURLEnv = "EFFECTIVELY_TEST_REGISTRY_URL"

// sinkAvroSchema is the writer's schema: what the CloudEvent carried, flat.
const sinkAvroSchema = `{"type":"record","name":"ProductUpdated","namespace":"io.effectively.bench","fields":[
	{"name":"id","type":"string"},
	{"name":"type","type":"string"},
	{"name":"subject","type":"string"},
	{"name":"version","type":"long"},
	{"name":"name","type":"string"},
	{"name":"price_cents","type":"long"},
	{"name":"in_stock","type":"boolean"}]}`

// avroProduct is a record of sinkAvroSchema.
type avroProduct struct {
	ID         string `avro:"id"`
	Type       string `avro:"type"`
	Subject    string `avro:"subject"`
	Version    int64  `avro:"version"`
	Name       string `avro:"name"`
	PriceCents int64  `avro:"price_cents"`
	InStock    bool   `avro:"in_stock"`
}

// avroRenderer is E-sink-avro's renderer for the schema registered as
// schemaID: the wire-format header, then the record.
func avroRenderer(schemaID int) (sinkRenderer, error) {
	schema, err := avro.Parse(sinkAvroSchema)
	if err != nil {
		return nil, fmt.Errorf("parsing the Avro schema: %w", err)
	}
	header, err := (&sr.ConfluentHeader{}).AppendEncode(nil, schemaID, nil)
	if err != nil {
		return nil, err
	}
	return func(seed, seq uint64, id string, _ time.Time, p product) ([]byte, error) {
		body, err := avro.Marshal(schema, &avroProduct{
			ID: string(appendEventID(nil, seed, seq)), Type: sinkEventType, Subject: id,
			Version: p.Version, Name: p.Name, PriceCents: p.PriceCents, InStock: p.InStock,
		})
		if err != nil {
			return nil, err
		}
		return append(append(make([]byte, 0, len(header)+len(body)), header...), body...), nil
	}, nil
}

// registerSinkSchema registers sinkAvroSchema under "<topic>-value" at
// the registry url and returns its ID. The subject is deleted at the end.
func (b *bench) registerSinkSchema(ctx context.Context, url, topic string) (int, error) {
	cl, err := sr.NewClient(sr.URLs(url))
	if err != nil {
		return 0, fmt.Errorf("registry client for %s: %w", url, err)
	}
	subject := topic + "-value"
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ss, err := cl.CreateSchema(rctx, subject, sr.Schema{Schema: sinkAvroSchema, Type: sr.TypeAvro})
	if err != nil {
		return 0, fmt.Errorf("registering %s at %s (%s): %w", subject, url, registryURLEnv, err)
	}
	b.onCleanup(func(ctx context.Context) {
		for _, how := range []sr.DeleteHow{sr.SoftDelete, sr.HardDelete} {
			if _, err := cl.DeleteSubject(ctx, subject, how); err != nil {
				progress("warning: deleting subject %s: %v", subject, err)
				return
			}
		}
	})
	return ss.ID, nil
}

// produceSinkAvro creates E-sink-avro's topic, registers the schema under
// "<topic>-value" and produces the stream. The records carry no headers,
// as a Confluent serializer writes them. It returns the schema's ID too.
func (b *bench) produceSinkAvro(ctx context.Context) (*sinkStream, int, error) {
	topic, err := b.newTopic(ctx, "esinkavro")
	if err != nil {
		return nil, 0, err
	}
	id, err := b.registerSinkSchema(ctx, b.registryURL, topic)
	if err != nil {
		return nil, 0, err
	}
	render, err := avroRenderer(id)
	if err != nil {
		return nil, 0, err
	}
	st, err := b.produceSink(ctx, "E-sink-avro", topic, render, "")
	if err != nil {
		return nil, 0, err
	}
	url := b.registryURL
	st.config = func(topic, migrations string) string { return sinkAvroConfigYAML(topic, migrations, url) }
	return st, id, nil
}

// sinkAvroConfigYAML is the worker's config file for E-sink-avro:
// E-sink's, with the registry and the topic read as format avro, mapped
// by pointers (the dedupe key is the event's id, as CloudEvents' is).
func sinkAvroConfigYAML(topic, migrations, registry string) string {
	return sinkConfigYAML(topic, migrations) + fmt.Sprintf(`schema_registry:
  url: %[2]q
topics:
  - name: %[1]q
    format: avro
    key_strategy: field
    key_pointer: /id
    type_pointer: /type
    subject_pointer: /subject
    version_pointer: /version
`, topic, registry)
}
