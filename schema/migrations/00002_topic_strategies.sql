-- The key strategy each topic's claims were made with. A claim's key depends
-- on the strategy; changing it while claims are retained would give a
-- redelivered event a new key, and a second effect.

-- +goose Up
CREATE TABLE topic_strategies (
    topic        text        NOT NULL PRIMARY KEY,
    key_strategy text        NOT NULL,
    since        timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE topic_strategies;
