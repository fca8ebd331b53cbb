-- The core of exactly-once effects: claims, positions and dead letters.
-- Releases before the public API created the reference example's tables here
-- too; they now come from the example's own migrations (which adopt them
-- where this file created them). See DESIGN.md, "Invariants" and "Clarifications".

-- +goose Up

-- One row per distinct event key, database-wide. The primary key is the
-- claim: INSERT ... ON CONFLICT DO NOTHING decides which delivery applies.
CREATE TABLE processed_events (
    event_key      text        NOT NULL PRIMARY KEY,
    key_strategy   text        NOT NULL,
    payload_hash   bytea       NOT NULL CHECK (length(payload_hash) = 32),
    event_type     text        NOT NULL,
    subject        text        NOT NULL,
    disposition    text        NOT NULL CHECK (disposition IN ('applied', 'stale', 'parked', 'dead_lettered')),
    consumer_group text        NOT NULL,
    topic          text        NOT NULL,
    "partition"    integer     NOT NULL,
    "offset"       bigint      NOT NULL,
    claimed_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);
-- Retention pruning deletes oldest claims first in bounded batches.
CREATE INDEX processed_events_claimed_at_idx ON processed_events (claimed_at);
-- The audit maps a topic range back to claims.
CREATE INDEX processed_events_origin_idx ON processed_events (topic, "partition", "offset");

-- The authoritative position of each (group, topic, partition): written in
-- the same transaction as the effects, only ever moved forward by the worker
-- (replay --execute lowers it and bumps reset_epoch).
CREATE TABLE consumer_offsets (
    consumer_group text        NOT NULL,
    topic          text        NOT NULL,
    "partition"    integer     NOT NULL,
    next_offset    bigint      NOT NULL CHECK (next_offset >= 0),
    reset_epoch    integer     NOT NULL DEFAULT 0,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, topic, "partition")
);

-- Every record that could not be applied, with its reason and origin. Unique
-- on the origin, so a redelivered record never makes a second dead letter.
CREATE TABLE dead_letters (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer_group text        NOT NULL,
    topic          text        NOT NULL,
    "partition"    integer     NOT NULL,
    "offset"       bigint      NOT NULL,
    event_key      text,
    record_key     bytea,
    value_prefix   bytea,
    value_size     integer     NOT NULL DEFAULT 0,
    headers        jsonb       NOT NULL DEFAULT '[]',
    reason         text        NOT NULL,
    error          text        NOT NULL,
    attempts       integer     NOT NULL DEFAULT 1,
    first_seen_at  timestamptz NOT NULL DEFAULT now(),
    last_seen_at   timestamptz NOT NULL DEFAULT now(),
    published_at   timestamptz,
    UNIQUE (topic, "partition", "offset")
);
CREATE INDEX dead_letters_reason_idx ON dead_letters (reason, first_seen_at);

-- +goose Down
DROP TABLE dead_letters;
DROP TABLE consumer_offsets;
DROP TABLE processed_events;
