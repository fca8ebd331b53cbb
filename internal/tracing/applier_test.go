package tracing_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/cetest"
	"github.com/effectively-io/effectively/internal/consumer"
	"github.com/effectively-io/effectively/internal/handling"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/internal/pipeline"
	"github.com/effectively-io/effectively/internal/tracing"
)

const (
	topic   = "things"
	typeSet = "thing.set"
)

// registry is a handler of the tests' own: thing.set upserts a thing.
func registry(tb testing.TB, db pgtest.DB) *handlers.Registry {
	tb.Helper()
	_, err := db.Pool.Exec(context.Background(), `CREATE TABLE things (id text PRIMARY KEY, color text NOT NULL)`)
	require.NoError(tb, err)
	reg := &handlers.Registry{}
	reg.HandleFunc(typeSet, func(_ context.Context, fx *handlers.Effects, ev event.Event) error {
		var d struct{ Color string }
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return event.Permanent(err)
		}
		fx.Exec(nil, `INSERT INTO things (id, color) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET color = excluded.color`, ev.Subject, d.Color)
		return nil
	})
	return reg
}

// newApplier wires the pipeline the way the worker does: the handlers
// wrapped and SettledFunc set only when tracing is on, the applier wrapped
// by tr.Applier.
func newApplier(tb testing.TB, tr *tracing.Tracing, extra func(*handlers.Registry)) consumer.Applier {
	tb.Helper()
	db := pgtest.New(tb)
	dec, err := event.NewDecoder(event.DecoderConfig{Topic: topic})
	require.NoError(tb, err)
	reg := registry(tb, db)
	if extra != nil {
		extra(reg)
	}
	opts := pipeline.Options{Decoders: map[string]*event.Decoder{topic: dec}, Handlers: reg, SettledFunc: tr.Settled()}
	if tr.Enabled() {
		opts.Handlers = handling.Of(reg).Wrapped(tr.WrapHandler)
	}
	return tr.Applier(pipeline.NewApplier(db.Pool, opts))
}

// set is a thing.set record; a non-empty parent is its producer's
// traceparent, in the envelope.
func set(id, subject, parent string) *kgo.Record {
	env := map[string]any{"specversion": "1.0", "id": id, "source": cetest.Source, "type": typeSet,
		"subject": subject, "data": map[string]any{"color": "blue"}}
	if parent != "" {
		env["traceparent"] = parent
	}
	v, err := json.Marshal(env)
	if err != nil {
		panic(err)
	}
	return &kgo.Record{Topic: topic, Key: []byte(subject), Value: v,
		Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/cloudevents+json")}}}
}

func batch(first int64, recs ...*kgo.Record) consumer.Batch {
	for i, r := range recs {
		r.Offset = first + int64(i)
	}
	return consumer.Batch{Group: "g", Topic: topic, Records: recs}
}

const (
	producerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerSpan  = "00f067aa0ba902b7"
)

func attr(s tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.Emit()
		}
	}
	return ""
}

// The spans of one batch, with the SDK's in-memory exporter: the batch's
// root span with its offsets and dispositions, linked to the producer; the
// event with a trace context processed under its producer's span, its
// redelivery in the batch a duplicate there too; the event without one
// under the batch's span. A failed batch marks its spans as errors.
func TestBatchSpans(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tr, err := tracing.New(context.Background(), tracing.Options{ServiceName: "test", Exporter: exp, Syncer: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tr.Shutdown(context.Background())) })
	a := newApplier(t, tr, func(r *handlers.Registry) {
		r.HandleFunc("test.flaky", func(context.Context, *handlers.Effects, event.Event) error { return errors.New("the flake") })
	})
	parent := "00-" + producerTrace + "-" + producerSpan + "-01"
	require.NoError(t, a.Apply(context.Background(), batch(0, set("e1", "a1", parent), set("e2", "a2", ""), set("e1", "a1", parent))))

	spans := exp.GetSpans()
	var root tracetest.SpanStub
	var processed []tracetest.SpanStub
	for _, s := range spans {
		switch s.Name {
		case "apply " + topic:
			root = s
		case "process " + typeSet:
			processed = append(processed, s)
		}
	}
	require.Equal(t, "apply "+topic, root.Name, "the batch span: %v", spans)
	require.False(t, root.Parent.IsValid(), "a new root")
	require.Equal(t, trace.SpanKindConsumer, root.SpanKind)
	require.Equal(t, "0", attr(root, "effectively.batch.first_offset"))
	require.Equal(t, "2", attr(root, "effectively.batch.last_offset"))
	require.Equal(t, "3", attr(root, "messaging.batch.message_count"))
	require.Equal(t, `["applied","duplicate"]`, attr(root, "effectively.batch.dispositions"))
	require.Equal(t, "2", attr(root, "effectively.batch.applied"))
	require.Equal(t, "1", attr(root, "effectively.batch.duplicate"))
	require.Len(t, root.Links, 1, "one link per event with a trace context")
	require.Equal(t, producerTrace, root.Links[0].SpanContext.TraceID().String())
	require.Equal(t, producerSpan, root.Links[0].SpanContext.SpanID().String())

	require.Len(t, processed, 3)
	byDisposition := map[string][]tracetest.SpanStub{}
	for _, s := range processed {
		byDisposition[attr(s, "effectively.event.subject")+" "+attr(s, "effectively.disposition")] = append(byDisposition[attr(s, "effectively.event.subject")+" "+attr(s, "effectively.disposition")], s)
		require.Equal(t, root.SpanContext, s.Links[0].SpanContext, "linked to its batch")
	}
	for _, k := range []string{"a1 applied", "a1 duplicate"} {
		require.Len(t, byDisposition[k], 1, k)
		s := byDisposition[k][0]
		require.Equal(t, producerTrace, s.SpanContext.TraceID().String(), k)
		require.Equal(t, producerSpan, s.Parent.SpanID().String(), "%s: the producer's span is the parent", k)
	}
	require.Len(t, byDisposition["a2 applied"], 1)
	require.Equal(t, root.SpanContext.SpanID(), byDisposition["a2 applied"][0].Parent.SpanID(), "no trace context: under the batch")

	// A batch whose handler fails transiently: nothing commits, and its
	// spans say so.
	exp.Reset()
	flaky := &kgo.Record{Topic: topic, Key: []byte("a3"), Value: []byte(`{"specversion":"1.0","id":"f1","source":"s","type":"test.flaky","subject":"a3","traceparent":"` + parent + `"}`),
		Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/cloudevents+json")}}}
	require.ErrorContains(t, a.Apply(context.Background(), batch(3, flaky)), "the flake")
	spans = exp.GetSpans()
	require.Len(t, spans, 2, "%v", spans)
	for _, s := range spans {
		require.Equal(t, codes.Error, s.Status.Code, s.Name)
	}
}

// discard is an exporter that drops spans (the benchmark's collector).
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkApply is the apply path (decode, claim, handlers, record, commit)
// of a batch of 100 thing.set events (an upsert each) that carry a trace context, on
// the real PostgreSQL, wired as the worker wires it: tracing off (the
// default) against on (spans made and batched to an exporter that drops
// them). Off must allocate exactly what the pipeline alone does: compare
// allocs/op with -benchmem; ns/op is the database's and noisy.
//
//	go test ./tracing -run '^$' -bench Apply -benchmem -count 5
func BenchmarkApply(b *testing.B) {
	const perBatch = 100
	parent := "00-" + producerTrace + "-" + producerSpan + "-01"
	for _, mode := range []string{"baseline", "off", "on"} {
		b.Run(mode, func(b *testing.B) {
			var a consumer.Applier
			switch mode {
			case "baseline": // no tracing wiring at all
				db := pgtest.New(b)
				dec, err := event.NewDecoder(event.DecoderConfig{Topic: topic})
				require.NoError(b, err)
				a = pipeline.NewApplier(db.Pool, pipeline.Options{Decoders: map[string]*event.Decoder{topic: dec}, Handlers: registry(b, db)})
			case "off":
				tr, err := tracing.New(context.Background(), tracing.Options{LookupEnvFunc: env()})
				require.NoError(b, err)
				a = newApplier(b, tr, nil)
			case "on":
				tr, err := tracing.New(context.Background(), tracing.Options{Exporter: discard{}})
				require.NoError(b, err)
				b.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
				a = newApplier(b, tr, nil)
			}
			ctx := context.Background()
			var offset int64
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				recs := make([]*kgo.Record, perBatch)
				for j := range recs {
					id := fmt.Sprintf("%d-%d", i, j)
					recs[j] = set("e"+id, "t"+id, parent)
				}
				bt := batch(offset, recs...)
				offset += perBatch
				b.StartTimer()
				if err := a.Apply(ctx, bt); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*perBatch), "ns/event")
		})
	}
}
