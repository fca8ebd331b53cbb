-- The reference domain's tables. Releases before the public API created
-- them in the engine's first migration: on such a database they exist
-- already, with their rows, and this migration adopts them as they are
-- (IF NOT EXISTS is for that upgrade only; concurrent migrators are
-- serialised by goose's advisory lock).

-- +goose Up

-- Reference domain: absolute, version-gated state.
CREATE TABLE IF NOT EXISTS accounts (
    id         text        NOT NULL PRIMARY KEY,
    version    bigint      NOT NULL CHECK (version >= 1),
    name       text        NOT NULL,
    email      text        NOT NULL,
    plan       text        NOT NULL,
    status     text        NOT NULL CHECK (status IN ('open', 'closed')),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Reference domain: relative effects, one row per event key (the ledger
-- pattern); balances are derived, so they can always be recomputed.
CREATE TABLE IF NOT EXISTS ledger_entries (
    event_key    text        NOT NULL PRIMARY KEY,
    account_id   text        NOT NULL REFERENCES accounts (id),
    currency     char(3)     NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    amount_cents bigint      NOT NULL CHECK (amount_cents <> 0),
    event_type   text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
-- The order in which ledger entries were written (parked entries released
-- late must still land in their original order).
ALTER TABLE ledger_entries ADD COLUMN IF NOT EXISTS seq bigint GENERATED ALWAYS AS IDENTITY;
CREATE INDEX IF NOT EXISTS ledger_entries_account_idx ON ledger_entries (account_id, currency);

CREATE OR REPLACE VIEW account_balances AS
SELECT account_id, currency, sum(amount_cents) AS balance_cents
FROM ledger_entries
GROUP BY account_id, currency;

-- +goose Down
DROP VIEW account_balances;
DROP TABLE ledger_entries;
DROP TABLE accounts;
