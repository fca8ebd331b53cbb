-- +goose Up
-- A derived total: each customer's number of changes, kept from the
-- history's rows (each adds its `changes`, 1, once) and always
-- recomputable from them.
ALTER TABLE customer_changes ADD COLUMN changes bigint NOT NULL DEFAULT 1;
CREATE TABLE customer_change_counts (
    id         bigint PRIMARY KEY,
    changes    bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE customer_change_counts;
ALTER TABLE customer_changes DROP COLUMN changes;
