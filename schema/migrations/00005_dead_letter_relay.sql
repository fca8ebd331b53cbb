-- The dead-letter relay (deadletter.Relay) publishes each dead letter to its
-- topic's dead-letter topic, exactly once across restarts and crashes. It
-- publishes in Kafka transactions under a stable transactional ID, records
-- where each dead letter landed, and keeps per-partition cursors on the
-- dead-letter topics: everything the relay wrote below a cursor is marked
-- published here, so after a crash it only has to read a partition from its
-- cursor to find what it published but had not marked yet.

-- +goose Up

-- Where a published dead letter landed (NULL while unpublished).
ALTER TABLE dead_letters
    ADD COLUMN dlq_topic     text,
    ADD COLUMN dlq_partition integer,
    ADD COLUMN dlq_offset    bigint;

-- The relay's queue: unpublished dead letters, in id order. Partial, so it
-- stays as small as the backlog.
CREATE INDEX dead_letters_unpublished_idx ON dead_letters (id) WHERE published_at IS NULL;

-- Per dead-letter topic partition: every record the relay published below
-- next_offset is marked in dead_letters. A cursor row exists before the
-- relay first writes to its partition.
CREATE TABLE dead_letter_relay_cursors (
    dlq_topic   text        NOT NULL,
    "partition" integer     NOT NULL CHECK ("partition" >= 0),
    next_offset bigint      NOT NULL CHECK (next_offset >= 0),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (dlq_topic, "partition")
);

-- +goose Down
DROP TABLE dead_letter_relay_cursors;
DROP INDEX dead_letters_unpublished_idx;
ALTER TABLE dead_letters
    DROP COLUMN dlq_offset,
    DROP COLUMN dlq_partition,
    DROP COLUMN dlq_topic;
