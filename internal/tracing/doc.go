// Package tracing is the worker's OpenTelemetry tracing: off unless an
// OTEL_* exporter variable asks for it, and then spans for the batch
// transaction, each event's handling, each outbox call, the database and the
// Kafka client, exported over OTLP/HTTP.
//
// Off, New returns a Tracing whose wrappers hand back what they are given:
// no wrapper, no hook, no span and no allocation is added to the hot path.
// On, the spans continue each producer's trace: an event's W3C trace
// context (the CloudEvents distributed-tracing extension, or traceparent
// record headers; see event.Event.TraceParent) parents its handling span,
// the batch span links to it, and the outbox intent keeps it so that the
// delivery's HTTP span is part of the same trace.
package tracing
