-- The operator-action log: every action taken from the operations console
-- (a redrive, an outbox intent resolved, parked events released or dropped,
-- a replay executed or refused) with who took it (the console token's
-- name), when, on what, and what came of it. Listed by `effectively
-- actions` and on the console's Actions page. Rows are never updated.

-- +goose Up
CREATE TABLE operator_actions (
    id       bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at       timestamptz NOT NULL DEFAULT now(),
    operator text        NOT NULL,             -- the token's name
    action   text        NOT NULL,             -- dlq.redrive, outbox.resolve, parked.drop, replay.execute, ...
    target   text        NOT NULL,             -- what it was taken on: dead letter 42, intent 7, group g topic t
    outcome  text        NOT NULL CHECK (outcome IN ('ok', 'refused', 'failed')),
    result   text        NOT NULL              -- what happened, in words
);
CREATE INDEX operator_actions_at_idx ON operator_actions (at);

-- +goose Down
DROP TABLE operator_actions;
