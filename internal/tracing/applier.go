package tracing

import (
	"context"
	"maps"
	"slices"
	"sort"
	"strconv"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/consumer"
	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/handling"
)

// Applier wraps next so that each batch runs in a span, "apply <topic>": a
// new root (a batch holds many producers' events) linked to the trace
// context of each of its events, with the topic, partition, first and last
// offset, record count and the count of each disposition. Off, it returns
// next itself.
func (t *Tracing) Applier(next consumer.Applier) consumer.Applier {
	if !t.Enabled() {
		return next
	}
	return &applier{next: next, t: t}
}

type applier struct {
	next consumer.Applier
	t    *Tracing
}

func (a *applier) Positions(ctx context.Context, group, topic string, partitions []int32) (map[int32]consumer.Position, error) {
	return a.next.Positions(ctx, group, topic, partitions)
}

func (a *applier) Apply(ctx context.Context, b consumer.Batch) error {
	first, last := b.Records[0].Offset, b.Records[len(b.Records)-1].Offset
	ctx, span := a.t.tracer.Start(ctx, "apply "+b.Topic,
		trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "kafka"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", b.Topic),
			attribute.String("messaging.destination.partition.id", strconv.Itoa(int(b.Partition))),
			keyGroup.String(b.Group),
			attribute.Int64("effectively.batch.first_offset", first),
			attribute.Int64("effectively.batch.last_offset", last),
			attribute.Int("messaging.batch.message_count", len(b.Records)),
		))
	bt := &batchTrace{t: a.t, span: span, topic: b.Topic, partition: b.Partition,
		events: map[string]trace.Span{}, counts: map[dedupe.Disposition]int{}}
	err := a.next.Apply(context.WithValue(ctx, batchKey{}, bt), b)
	bt.end(err)
	return err
}

// batchKey carries a batch's *batchTrace to the handler wrapper and
// Settled, through the pipeline's context.
type batchKey struct{}

func batchFrom(ctx context.Context) *batchTrace {
	bt, _ := ctx.Value(batchKey{}).(*batchTrace)
	return bt
}

// batchTrace is one batch's span and its events' spans, open until the
// batch's transaction has ended.
type batchTrace struct {
	t         *Tracing
	span      trace.Span
	topic     string
	partition int32
	mu        sync.Mutex
	// events are the spans of the batch's events by event key; settled
	// has the keys whose disposition is on their span (a repeat of the
	// key in the batch gets a span of its own, in extra).
	events  map[string]trace.Span
	settled map[string]bool
	extra   []trace.Span
	linked  map[string]bool
	counts  map[dedupe.Disposition]int
}

// link links the batch span to ev's producer, once per event.
func (bt *batchTrace) link(ev event.Event, sc trace.SpanContext) {
	if !sc.IsValid() || bt.linked[ev.Key] {
		return
	}
	if bt.linked == nil {
		bt.linked = map[string]bool{}
	}
	bt.linked[ev.Key] = true
	bt.span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{keyEventKey.String(ev.Key)}})
}

// open keeps an event's span open until the batch ends. A span already open
// for the key (the batch is redone one event at a time after a statement
// failed) ends first, marked as redone.
func (bt *batchTrace) open(key string, span trace.Span) {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	if prev, ok := bt.events[key]; ok {
		prev.SetStatus(codes.Error, "the batch failed and was redone one event at a time")
		prev.End()
		clear(bt.counts) // the redo settles every event again
	}
	bt.events[key] = span
	delete(bt.settled, key)
}

// end ends the events' spans and the batch's, with the error if the batch
// failed (then nothing of it committed: the dispositions were not kept).
func (bt *batchTrace) end(err error) {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	for _, s := range append(slices.Collect(maps.Values(bt.events)), bt.extra...) {
		if err != nil {
			s.SetStatus(codes.Error, "the batch's transaction failed and is retried: "+err.Error())
		}
		s.End()
	}
	ds := make([]string, 0, len(bt.counts))
	for d := range bt.counts {
		ds = append(ds, string(d))
	}
	sort.Strings(ds)
	attrs := make([]attribute.KeyValue, 0, len(ds)+1)
	attrs = append(attrs, attribute.StringSlice("effectively.batch.dispositions", ds))
	for _, d := range ds {
		attrs = append(attrs, attribute.Int("effectively.batch."+d, bt.counts[dedupe.Disposition(d)]))
	}
	bt.span.SetAttributes(attrs...)
	if err != nil {
		bt.span.RecordError(err)
		bt.span.SetStatus(codes.Error, err.Error())
	}
	bt.span.End()
}

// eventSpan starts the span of ev's processing: a child of the producer's
// span when ev carries a trace context (else of ctx's span: the batch's),
// linked to the batch's span. offset < 0: unknown.
func (t *Tracing) eventSpan(ctx context.Context, bt *batchTrace, ev event.Event, topic string, partition int32, offset int64) (context.Context, trace.Span) {
	parent := t.remote(ctx, ev.TraceParent, ev.TraceState)
	attrs := []attribute.KeyValue{
		keyEventType.String(ev.Type), keyEventKey.String(ev.Key), keySubject.String(ev.Subject),
		attribute.String("cloudevents.event_id", ev.ID), attribute.String("cloudevents.event_source", ev.Source),
		attribute.String("messaging.destination.name", topic),
		attribute.String("messaging.destination.partition.id", strconv.Itoa(int(partition))),
	}
	if offset >= 0 {
		attrs = append(attrs, attribute.Int64("messaging.kafka.offset", offset))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...)}
	if bt != nil {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: bt.span.SpanContext()}))
		if sc := trace.SpanContextFromContext(parent); sc.IsRemote() {
			bt.mu.Lock()
			bt.link(ev, sc)
			bt.mu.Unlock()
		}
	}
	return t.tracer.Start(parent, "process "+ev.Type, opts...)
}

// WrapHandler wraps a handler so that each event's processing runs in a
// span, "process <type>", from the handler call to the end of its batch,
// with the event's disposition; the handler's context carries it, so a
// handler's own spans are its children. For handlers.Registry.Wrapped.
func (t *Tracing) WrapHandler(_ string, h handlers.Handler) handlers.Handler {
	th := tracedHandler{next: h, t: t}
	if pf, ok := h.(handlers.Prefetcher); ok {
		return tracedPrefetcher{tracedHandler: th, pf: pf}
	}
	return th
}

type tracedHandler struct {
	next handlers.Handler
	t    *Tracing
}

func (h tracedHandler) Handle(ctx context.Context, e *handlers.Effects, ev event.Event) error {
	bt := batchFrom(ctx)
	o := e.Origin()
	ctx, span := h.t.eventSpan(ctx, bt, ev, o.Topic, o.Partition, o.Offset)
	err := h.next.Handle(ctx, e, ev)
	if err != nil {
		span.RecordError(err)
		if !event.IsPermanent(err) {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.AddEvent("handler returned", trace.WithAttributes(attribute.Int("effectively.statements", handling.EffectsOf(e).Queued())))
	if bt == nil {
		span.End() // not under a traced batch (the parking sweeper)
		return err
	}
	bt.open(ev.Key, span)
	return err
}

type tracedPrefetcher struct {
	tracedHandler
	pf handlers.Prefetcher
}

// Prefetch runs in a span of its own, "prefetch <type>", a child of the
// producer's span; the prefetch client's HTTP spans are its children.
func (h tracedPrefetcher) Prefetch(ctx context.Context, env handlers.Env, ev event.Event) (event.Event, error) {
	parent := h.t.remote(ctx, ev.TraceParent, ev.TraceState)
	opts := []trace.SpanStartOption{trace.WithAttributes(keyEventType.String(ev.Type), keyEventKey.String(ev.Key))}
	if bt := batchFrom(ctx); bt != nil {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: bt.span.SpanContext()}))
	}
	ctx, span := h.t.tracer.Start(parent, "prefetch "+ev.Type, opts...)
	defer span.End()
	out, err := h.pf.Prefetch(ctx, env, ev)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return out, err
}

// Settled is the pipeline's SettledFunc: it puts each event's disposition on
// its span and counts it for the batch's. An event whose handler did not run
// (a duplicate, a conflict, parked, undecodable) gets a span here when it
// carries a trace context, so its producer's trace shows what became of it.
// Off, it is nil.
func (t *Tracing) Settled() func(ctx context.Context, ev event.Event, d dedupe.Disposition, reason event.Reason) {
	if !t.Enabled() {
		return nil
	}
	return func(ctx context.Context, ev event.Event, d dedupe.Disposition, reason event.Reason) {
		bt := batchFrom(ctx)
		if bt == nil {
			return
		}
		bt.mu.Lock()
		bt.counts[d]++
		span, ok := bt.events[ev.Key]
		if ok && bt.settled[ev.Key] {
			ok = false // a repeat of the key in this batch
		}
		if ok {
			if bt.settled == nil {
				bt.settled = map[string]bool{}
			}
			bt.settled[ev.Key] = true
		}
		bt.mu.Unlock()
		if !ok {
			if ev.TraceParent == "" || ev.Key == "" {
				return
			}
			_, span = t.eventSpan(ctx, bt, ev, bt.topic, bt.partition, -1)
			bt.mu.Lock()
			bt.extra = append(bt.extra, span)
			bt.mu.Unlock()
		}
		span.SetAttributes(keyDisposition.String(string(d)))
		if reason != "" {
			span.SetAttributes(keyReason.String(string(reason)))
		}
	}
}
