-- Redrive: an operator re-applies a dead letter after a fix, through the
-- same claim. A resolved dead letter records what became of it.

-- +goose Up
ALTER TABLE dead_letters
    ADD COLUMN resolved_at timestamptz,
    ADD COLUMN resolution  text CHECK (resolution IN ('applied', 'stale', 'parked', 'duplicate'));
CREATE INDEX dead_letters_topic_idx ON dead_letters (topic, first_seen_at);

-- +goose Down
DROP INDEX dead_letters_topic_idx;
ALTER TABLE dead_letters DROP COLUMN resolution, DROP COLUMN resolved_at;
