-- Retention pruning (dedupe.Pruner) and what it leaves behind for the audit.
-- The pruner deletes expired claims, published dead letters, finished outbox
-- intents and resolved parked events in small batches, oldest first. The
-- watermarks let the audit tell a record whose claim was pruned from one
-- whose claim is missing.

-- +goose Up

-- Per pruned table: rows older than pruned_before may have been deleted.
CREATE TABLE prune_watermarks (
    table_name    text        NOT NULL PRIMARY KEY,
    pruned_before timestamptz NOT NULL,
    rows_pruned   bigint      NOT NULL DEFAULT 0,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- Per source partition: the highest origin offset of a pruned claim or dead
-- letter. The worker applies a partition in offset order, so when the claim
-- of offset N was old enough to prune, every record up to N had been
-- processed before the cutoff too: a record at or below max_offset with no
-- claim and no dead letter may have been pruned; one above it is missing.
CREATE TABLE pruned_offsets (
    topic       text        NOT NULL,
    "partition" integer     NOT NULL,
    max_offset  bigint      NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, "partition")
);

-- The pruner's queues, oldest first. processed_events already has its
-- claimed_at index (00001). Partial, so each is as small as what may go.
CREATE INDEX dead_letters_prune_idx ON dead_letters (last_seen_at) WHERE published_at IS NOT NULL;
CREATE INDEX outbox_prune_idx ON outbox (updated_at) WHERE state IN ('sent', 'suppressed');
CREATE INDEX parked_events_prune_idx ON parked_events ((coalesce(resolved_at, parked_at))) WHERE state <> 'parked';

-- +goose Down
DROP INDEX parked_events_prune_idx;
DROP INDEX outbox_prune_idx;
DROP INDEX dead_letters_prune_idx;
DROP TABLE pruned_offsets;
DROP TABLE prune_watermarks;
