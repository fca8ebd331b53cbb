-- account_balances becomes a running total kept by the ledger's
-- insert-once (handlers.Total): each entry adds its amount in the statement
-- that inserts it, once. It was a view summing ledger_entries; the entries
-- stay the facts, so a balance can always be recomputed from them (the
-- backfill below does exactly that). Stop the workers of the previous
-- build before migrating: one of them would insert entries without adding
-- them.

-- +goose Up
DROP VIEW IF EXISTS account_balances;
CREATE TABLE account_balances (
    account_id    text        NOT NULL REFERENCES accounts (id),
    currency      char(3)     NOT NULL,
    balance_cents bigint      NOT NULL DEFAULT 0,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account_id, currency)
);
INSERT INTO account_balances (account_id, currency, balance_cents)
SELECT account_id, currency, sum(amount_cents) FROM ledger_entries GROUP BY account_id, currency;

-- +goose Down
DROP TABLE account_balances;
CREATE VIEW account_balances AS
SELECT account_id, currency, sum(amount_cents) AS balance_cents
FROM ledger_entries
GROUP BY account_id, currency;
