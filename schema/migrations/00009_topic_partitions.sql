-- The partition count of each topic when a worker last started or saw it
-- change. Keys hash over the partition count, so a change moves resources
-- to other partitions and breaks per-resource order until the old
-- partitions drain; the worker warns when it finds a count it did not
-- record.

-- +goose Up
CREATE TABLE topic_partitions (
    topic      text        NOT NULL PRIMARY KEY,
    partitions integer     NOT NULL CHECK (partitions > 0),
    seen_at    timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE topic_partitions;
