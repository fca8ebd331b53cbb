package test

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/effectively-io/effectively/internal/cetest"
)

// otlpSpan is one span an OTLP receiver got, with its resource's attributes.
type otlpSpan struct {
	name, traceID, spanID, parentID string
	kind                            tracepb.Span_SpanKind
	attrs, resource                 map[string]string
	links                           []string // traceID/spanID
}

// otlpReceiver is an in-process OTLP/HTTP trace receiver (POST /v1/traces,
// protobuf), what a collector is to the worker.
type otlpReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	spans    []otlpSpan
	requests int
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			gz, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = gz
		}
		b, err := io.ReadAll(body)
		var msg coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &msg)
		}
		if req.URL.Path != "/v1/traces" || err != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.requests++
		for _, rs := range msg.ResourceSpans {
			res := kvs(rs.GetResource().GetAttributes())
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					sp := otlpSpan{name: s.Name, traceID: hex.EncodeToString(s.TraceId), spanID: hex.EncodeToString(s.SpanId),
						parentID: hex.EncodeToString(s.ParentSpanId), kind: s.Kind, attrs: kvs(s.Attributes), resource: res}
					for _, l := range s.Links {
						sp.links = append(sp.links, hex.EncodeToString(l.TraceId)+"/"+hex.EncodeToString(l.SpanId))
					}
					r.spans = append(r.spans, sp)
				}
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.Close)
	return r
}

func kvs(attrs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(attrs))
	for _, a := range attrs {
		v := a.GetValue()
		switch {
		case v.GetStringValue() != "":
			out[a.Key] = v.GetStringValue()
		case v.GetArrayValue() != nil:
			var parts []string
			for _, e := range v.GetArrayValue().Values {
				parts = append(parts, e.GetStringValue())
			}
			out[a.Key] = strings.Join(parts, ",")
		default:
			b, _ := json.Marshal(v.GetIntValue())
			out[a.Key] = string(b)
		}
	}
	return out
}

func (r *otlpReceiver) snapshot() (spans []otlpSpan, requests int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]otlpSpan(nil), r.spans...), r.requests
}

// headerServer answers 200 and keeps the traceparent of each account's
// request (the mail API).
type headerServer struct {
	mu     sync.Mutex
	parent map[string]string
}

func newHeaderServer(t *testing.T) (*headerServer, string) {
	t.Helper()
	s := &headerServer{parent: map[string]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.parent[requestAccount(r, body)] = r.Header.Get("traceparent")
		s.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return s, srv.URL
}

func (s *headerServer) snapshot() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.parent))
	for k, v := range s.parent {
		out[k] = v
	}
	return out
}

// producerContext is a producer's span: its traceparent, trace and span ID.
type producerContext struct{ parent, traceID, spanID string }

func newProducerContext(traceID, spanID string) producerContext {
	return producerContext{parent: "00-" + traceID + "-" + spanID + "-01", traceID: traceID, spanID: spanID}
}

// tracedAccounts are three account.opened events, each carrying its
// producer's trace context another way: inside the structured envelope
// (the CloudEvents distributed-tracing extension), as a plain traceparent
// header, and as the binary mode's ce_traceparent header.
func tracedAccounts(topic string) (recs []*kgo.Record, producers map[string]producerContext) {
	producers = map[string]producerContext{
		"acct-tr1": newProducerContext("11111111111111111111111111111111", "1111111111111111"),
		"acct-tr2": newProducerContext("22222222222222222222222222222222", "2222222222222222"),
		"acct-tr3": newProducerContext("33333333333333333333333333333333", "3333333333333333"),
	}
	data := func(name string) map[string]any {
		return map[string]any{"name": name, "email": name + "@example.com", "plan": "pro"}
	}
	env := map[string]any{"specversion": "1.0", "id": "tr-1", "source": cetest.Source, "type": "account.opened", "subject": "acct-tr1",
		"resourceversion": 1, "data": data("One"), "traceparent": producers["acct-tr1"].parent, "tracestate": "vendor=one"}
	v, _ := json.Marshal(env)
	structured := &kgo.Record{Topic: topic, Key: []byte("acct-tr1"), Value: v,
		Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/cloudevents+json")}}}
	plain := cetest.Account(topic, "tr-2", "account.opened", "acct-tr2", 1, "Two")
	plain.Headers = append(plain.Headers, kgo.RecordHeader{Key: "traceparent", Value: []byte(producers["acct-tr2"].parent)})
	d3, _ := json.Marshal(data("Three"))
	binary := &kgo.Record{Topic: topic, Key: []byte("acct-tr3"), Value: d3, Headers: []kgo.RecordHeader{
		{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte("tr-3")},
		{Key: "ce_source", Value: []byte(cetest.Source)}, {Key: "ce_type", Value: []byte("account.opened")},
		{Key: "ce_subject", Value: []byte("acct-tr3")}, {Key: "ce_resourceversion", Value: []byte("1")},
		{Key: "ce_traceparent", Value: []byte(producers["acct-tr3"].parent)},
		{Key: "content-type", Value: []byte("application/json")},
	}}
	// The first event again: a duplicate, whose producer's trace shows it.
	again := &kgo.Record{Topic: topic, Key: structured.Key, Value: structured.Value, Headers: structured.Headers}
	return []*kgo.Record{structured, plain, binary, again}, producers
}

// A produced event's trace continues through the worker, on the real stack
// with the real binary exporting over OTLP/HTTP to an in-process receiver:
// for each of three events (trace context in the envelope, in a traceparent
// header, in binary mode's ce_traceparent), its "process account.opened"
// span is a child of the producer's span, applied; the batch's span links
// to the producer; the outbox's HTTP call to the mail API is in the same
// trace and the mail API receives that call span's context; the batch's
// statements have database spans. The duplicate's span says duplicate.
func TestTraceContinuesFromProducerToOutboxCall(t *testing.T) {
	t.Parallel()
	recv := newOTLPReceiver(t)
	mail, mailURL := newHeaderServer(t)
	r := newRig(t, 1, "EFFECTIVELY_TARGETS_MAIL_URL="+mailURL+"/welcome",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+recv.URL, "OTEL_BSP_SCHEDULE_DELAY=100", "EFFECTIVELY_KAFKA_INSTANCE_ID=traced-1")
	recs, producers := tracedAccounts(r.topic)
	produceRecords(t, r.topic, recs...)
	w := r.worker(t)
	waitUntil(t, "the three welcome mails sent", 2*time.Minute, func(context.Context) bool {
		return r.db.Count(t, `SELECT count(*) FROM outbox WHERE state = 'sent'`) == 3
	})
	require.Equal(t, int64(3), r.db.Count(t, `SELECT count(*) FROM outbox WHERE trace_parent IS NOT NULL`), "each intent kept its event's trace context")
	require.Equal(t, int64(1), r.db.Count(t, `SELECT count(*) FROM outbox WHERE trace_state = 'vendor=one'`))
	w.signal(t, syscall.SIGTERM) // flushes the last spans
	require.Equal(t, 0, w.wait(t, time.Minute), tail(w.stderr.String(), 20))

	spans, _ := recv.snapshot()
	byID := map[string]otlpSpan{}
	for _, s := range spans {
		byID[s.spanID] = s
	}
	var batch *otlpSpan
	for i, s := range spans {
		if s.name == "apply "+r.topic {
			batch = &spans[i]
		}
	}
	require.NotNil(t, batch, "a batch span")
	require.Equal(t, r.topic, batch.attrs["messaging.destination.name"])
	require.Equal(t, "effectively", batch.resource["service.name"])
	require.Equal(t, "traced-1", batch.resource["service.instance.id"])
	require.NotEmpty(t, batch.resource["service.version"])

	received := mail.snapshot()
	for acct, p := range producers {
		// The event's span: a child of the producer's span.
		var processed []otlpSpan
		for _, s := range spans {
			if s.name == "process account.opened" && s.traceID == p.traceID {
				processed = append(processed, s)
			}
		}
		wantSpans := 1
		if acct == "acct-tr1" {
			wantSpans = 2 // and its duplicate
		}
		require.Len(t, processed, wantSpans, "%s: its event's spans in the producer's trace", acct)
		dispositions := map[string]bool{}
		for _, s := range processed {
			require.Equal(t, p.spanID, s.parentID, "%s: the producer's span is the parent", acct)
			require.Equal(t, acct, s.attrs["effectively.event.subject"])
			dispositions[s.attrs["effectively.disposition"]] = true
		}
		require.True(t, dispositions["applied"], "%s applied: %v", acct, dispositions)
		if acct == "acct-tr1" {
			require.True(t, dispositions["duplicate"], "the redelivery is a duplicate: %v", dispositions)
		}
		// Some batch span links to the producer.
		linked := false
		for _, s := range spans {
			if strings.HasPrefix(s.name, "apply ") {
				for _, l := range s.links {
					linked = linked || l == p.traceID+"/"+p.spanID
				}
			}
		}
		require.True(t, linked, "%s: a batch span links to its producer", acct)

		// The outbox call: an HTTP client span in the producer's trace,
		// whose context the mail API received.
		got := received[acct]
		require.NotEmpty(t, got, "%s: the mail API got a traceparent", acct)
		parts := strings.Split(got, "-")
		require.Len(t, parts, 4, got)
		require.Equal(t, p.traceID, parts[1], "%s: the call continues the producer's trace", acct)
		call, ok := byID[parts[2]]
		require.True(t, ok, "%s: the call's span %s was exported", acct, parts[2])
		require.Equal(t, tracepb.Span_SPAN_KIND_CLIENT, call.kind)
		require.Equal(t, p.traceID, call.traceID)
		require.Equal(t, p.spanID, call.parentID, "%s: the call is a child of the event's producer context stored with the intent", acct)
		require.Equal(t, http.MethodPost, call.attrs["http.request.method"])
	}

	// The database: statements of the batch's transaction are spans in the
	// batch's trace.
	db := 0
	for _, s := range spans {
		if s.traceID == batch.traceID && s.attrs["db.system.name"] == "postgresql" {
			db++
		}
	}
	require.Positive(t, db, "the batch's statements have database spans")
}

// Off by default: a worker with no OTEL_* exporter variable (here
// OTEL_TRACES_EXPORTER=none beside an endpoint, so that the receiver would
// see anything sent) exports nothing, and its outbox call makes no span: the
// mail API receives the producer's traceparent exactly as produced.
func TestTracingOffExportsNothing(t *testing.T) {
	t.Parallel()
	recv := newOTLPReceiver(t)
	mail, mailURL := newHeaderServer(t)
	r := newRig(t, 1, "EFFECTIVELY_TARGETS_MAIL_URL="+mailURL+"/welcome",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+recv.URL, "OTEL_TRACES_EXPORTER=none", "OTEL_BSP_SCHEDULE_DELAY=100")
	recs, producers := tracedAccounts(r.topic)
	produceRecords(t, r.topic, recs...)
	w := r.worker(t)
	waitUntil(t, "the three welcome mails sent", 2*time.Minute, func(context.Context) bool {
		return r.db.Count(t, `SELECT count(*) FROM outbox WHERE state = 'sent'`) == 3
	})
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute), tail(w.stderr.String(), 20))
	require.NotContains(t, w.stderr.String(), "tracing on")
	spans, requests := recv.snapshot()
	require.Zero(t, requests, "nothing exported")
	require.Empty(t, spans)
	got := mail.snapshot()
	for acct, p := range producers {
		require.Equal(t, p.parent, got[acct], "%s: the producer's trace context, passed through untouched", acct)
	}
}
