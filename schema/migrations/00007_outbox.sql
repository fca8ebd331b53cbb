-- The transactional outbox: a handler never calls the outside world inside
-- its transaction; it records an intent here, committed with its effect, and
-- the dispatcher delivers it afterwards. See DESIGN.md, invariant 8.

-- +goose Up
CREATE TABLE outbox (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_key       text        NOT NULL,
    operation       text        NOT NULL,             -- warehouse.reserve, notify.welcome, ...
    resource        text        NOT NULL,             -- intents of one resource are delivered in id order
    method          text        NOT NULL,
    target          text        NOT NULL,             -- the URL the call goes to
    request         jsonb       NOT NULL,             -- the request body
    idempotency_key text        NOT NULL,             -- derived from (event_key, operation)
    -- The target honours Idempotency-Key, so a call may be repeated. When
    -- false (a notification API), an intent caught mid-call becomes 'unknown' and is
    -- never repeated without an operator.
    idempotent      boolean     NOT NULL,
    state           text        NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'sending', 'sent', 'unknown', 'suppressed', 'dead_lettered')),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    -- While 'sending': when the dispatcher that claimed the intent must have
    -- recorded the outcome (its call timeout plus a grace period).
    lease_until     timestamptz,
    last_status     integer,                          -- the last HTTP status received
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz,
    -- An intent that exists is never recorded again: a redelivery or a
    -- replay of the event inserts nothing.
    UNIQUE (event_key, operation),
    CHECK ((state = 'sending') = (lease_until IS NOT NULL))
);
-- The dispatcher's queue: due pending intents.
CREATE INDEX outbox_due_idx ON outbox (next_attempt_at, id) WHERE state = 'pending';
-- Per-resource order: is an earlier intent of this resource still open?
CREATE INDEX outbox_open_resource_idx ON outbox (resource, id) WHERE state IN ('pending', 'sending');
-- Expired leases (a dispatcher that died mid-call).
CREATE INDEX outbox_sending_idx ON outbox (lease_until) WHERE state = 'sending';
-- What an operator must look at.
CREATE INDEX outbox_attention_idx ON outbox (state, id) WHERE state IN ('unknown', 'dead_lettered');

-- +goose Down
DROP TABLE outbox;
