-- +goose Up
-- The replica of the source's customers table, never older than a state
-- it has shown, and one row per change of it.
CREATE TABLE customers (
    id         bigint PRIMARY KEY,
    version    bigint NOT NULL, -- the change's position in the source's log (LSN); numeric from 00003
    name       text   NOT NULL,
    status     text   NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE customer_changes (
    event_key  text   PRIMARY KEY,
    id         bigint NOT NULL,
    lsn        bigint NOT NULL,
    op         text   NOT NULL,
    status     text
);

-- +goose Down
DROP TABLE customer_changes;
DROP TABLE customers;
