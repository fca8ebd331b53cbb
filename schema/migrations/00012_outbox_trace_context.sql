-- Trace context: an intent keeps the W3C traceparent and tracestate of the
-- event that caused it, so its delivery continues the producer's trace (the
-- dispatcher sends them as the traceparent and tracestate headers; with
-- tracing on, its HTTP client span is their child). Null: the event carried
-- none, or the intent was recorded before this migration.

-- +goose Up
ALTER TABLE outbox ADD COLUMN trace_parent text, ADD COLUMN trace_state text;

-- +goose Down
ALTER TABLE outbox DROP COLUMN trace_parent, DROP COLUMN trace_state;
