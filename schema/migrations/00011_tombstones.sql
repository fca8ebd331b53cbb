-- Gated deletes (typed effects, config-only sinks): a deleted row leaves a
-- tombstone with the deleting version, so an older upsert that arrives
-- after the delete is stale instead of bringing the row back. key is the
-- row's key as a JSON array of its column values; table_name the table as
-- the engine quotes it. Tombstones older than dedupe.retention are pruned
-- with the claims: past the retention window a replay is not deduplicated
-- either.

-- +goose Up
CREATE TABLE effectively_tombstones (
    table_name text        NOT NULL,
    key        jsonb       NOT NULL,
    version    bigint      NOT NULL,
    deleted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (table_name, key)
);
CREATE INDEX effectively_tombstones_deleted_at_idx ON effectively_tombstones (deleted_at);

-- +goose Down
DROP TABLE effectively_tombstones;
