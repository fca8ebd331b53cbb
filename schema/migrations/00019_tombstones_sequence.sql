-- A tombstone keeps the deleting version as the row's version column holds
-- it: a Debezium change's order is numeric Version.Sequence (the commit it
-- follows, then its own LSN in 20 digits after the point; see
-- event.Event.Sequence), which bigint would round to the Version alone.
-- Every bigint version converts exactly; the comparisons (ts.version >=
-- x.v) are numeric either way. The table is rewritten once; tombstones
-- live only for dedupe.retention.

-- +goose Up
ALTER TABLE effectively_tombstones ALTER COLUMN version TYPE numeric;

-- +goose Down
-- Rounds a Version.Sequence to its Version: run it only without Debezium
-- tombstones.
ALTER TABLE effectively_tombstones ALTER COLUMN version TYPE bigint;
