-- The tables of the orders example: the newest state of every order, and
-- one row per webhook event. `effectively migrate` applies this directory
-- (postgres.migrations) after the engine's own migrations, with its own
-- version table, orders_migrations_schema_version.

-- +goose Up

-- orders: the order's newest state (sink orders, mode upsert). The sink's
-- key must be covered by a primary key or unique constraint; version is
-- the gate (an older version is stale and writes nothing).
CREATE TABLE orders (
    id          text          PRIMARY KEY,
    version     bigint        NOT NULL,
    status      varchar(20)   NOT NULL,
    customer_id text          NOT NULL,
    email       text,
    total       numeric(12,2) NOT NULL,
    currency    char(3)       NOT NULL,
    items       jsonb         NOT NULL,
    gift        boolean,
    placed_at   timestamptz   NOT NULL,
    updated_at  timestamptz   NOT NULL
);

-- order_events: one row per webhook event (sink order_events, mode
-- insert), keyed by the event key the worker deduplicates by: a re-sent
-- webhook writes nothing.
CREATE TABLE order_events (
    event_key     text        PRIMARY KEY,
    event_id      text        NOT NULL,
    order_id      text        NOT NULL,
    type          text        NOT NULL,
    order_version bigint      NOT NULL,
    occurred_at   timestamptz NOT NULL,
    received_at   timestamptz NOT NULL
);
CREATE INDEX order_events_order_idx ON order_events (order_id, order_version);

-- +goose Down
DROP TABLE order_events;
DROP TABLE orders;
