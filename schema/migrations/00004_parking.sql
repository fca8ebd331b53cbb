-- Parking: events whose prerequisite does not exist yet (an order line for
-- an order not yet placed) wait here, in PostgreSQL, not in headers.

-- +goose Up
CREATE TABLE parked_events (
    event_key       text        NOT NULL PRIMARY KEY, -- a redelivery can never park twice
    consumer_group  text        NOT NULL,
    topic           text        NOT NULL,
    "partition"     integer     NOT NULL,
    "offset"        bigint      NOT NULL,
    resource        text        NOT NULL,             -- the prerequisite's ID
    event_type      text        NOT NULL,
    event           jsonb       NOT NULL,             -- the decoded event, to apply on release
    state           text        NOT NULL DEFAULT 'parked'
                    CHECK (state IN ('parked', 'released', 'dead_lettered', 'dropped')),
    attempts        integer     NOT NULL DEFAULT 0,
    parked_at       timestamptz NOT NULL DEFAULT now(),
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    resolved_at     timestamptz,
    last_error      text
);
-- Release in original order, per resource; only parked rows are indexed.
CREATE INDEX parked_events_resource_idx ON parked_events (resource, topic, "partition", "offset") WHERE state = 'parked';
-- The sweeper's queue.
CREATE INDEX parked_events_due_idx ON parked_events (next_attempt_at) WHERE state = 'parked';

-- +goose Down
DROP TABLE parked_events;
