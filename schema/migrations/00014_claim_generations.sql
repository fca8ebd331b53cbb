-- Claims in generations: retention drops whole partitions instead of
-- deleting rows (dedupe/generations.go explains the design and why
-- insert-if-absent stays exact across generations).
--
-- effectively_claims is partitioned by generation. Today's processed_events
-- becomes generation 0 in place: no row is copied, and a worker of the
-- previous release, which inserts into processed_events by name, keeps
-- working (its claims are generation 0 claims) until the first rotation
-- closes generation 0 (dedupe.generation_interval after this migration);
-- from then on its inserts fail a check constraint and its partitions retry
-- until it is replaced: it can never claim a key a new worker claimed.
--
-- The migration holds no lock that blocks claims for longer than a
-- catalog change: the new column is metadata only (a constant default), the
-- proof that every row is generation 0 is a NOT VALID check validated under
-- SHARE UPDATE EXCLUSIVE (inserts go on while it reads the table), and
-- attaching the table with that check in place reads no row. So it runs
-- without a transaction, one step at a time, each step safe to run again
-- if a step before it was the last to run.

-- +goose NO TRANSACTION
-- +goose Up
ALTER TABLE processed_events ADD COLUMN IF NOT EXISTS generation integer NOT NULL DEFAULT 0;

-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = 'processed_events'::regclass AND conname = 'processed_events_generation_check') THEN
        ALTER TABLE processed_events ADD CONSTRAINT processed_events_generation_check CHECK (generation = 0) NOT VALID;
    END IF;
END $$;
-- +goose StatementEnd

ALTER TABLE processed_events VALIDATE CONSTRAINT processed_events_generation_check;

-- +goose StatementBegin
DO $$
BEGIN
    IF to_regclass('effectively_claims') IS NOT NULL THEN
        RETURN;
    END IF;
    -- The parent has no unique index (PostgreSQL's would have to include
    -- the generation): each generation's table has its own primary key on
    -- event_key, and dedupe.ClaimAll checks the older generations first.
    CREATE TABLE effectively_claims (
        event_key      text        NOT NULL,
        key_strategy   text        NOT NULL,
        payload_hash   bytea       NOT NULL,
        event_type     text        NOT NULL,
        subject        text        NOT NULL,
        disposition    text        NOT NULL,
        consumer_group text        NOT NULL,
        topic          text        NOT NULL,
        "partition"    integer     NOT NULL,
        "offset"       bigint      NOT NULL,
        claimed_at     timestamptz NOT NULL DEFAULT now(),
        updated_at     timestamptz NOT NULL DEFAULT now(),
        generation     integer     NOT NULL
    ) PARTITION BY LIST (generation);

    -- One row per generation: created (the next one, empty), opened (the
    -- current one, which claims go into), closed (no claim may go in any
    -- more), dropped (its table is gone). Exactly one is open.
    CREATE TABLE claim_generations (
        generation integer     NOT NULL PRIMARY KEY,
        relname    text        NOT NULL UNIQUE,
        created_at timestamptz NOT NULL DEFAULT now(),
        opened_at  timestamptz,
        closed_at  timestamptz,
        dropped_at timestamptz,
        CHECK (closed_at IS NULL OR opened_at IS NOT NULL),
        CHECK (dropped_at IS NULL OR closed_at IS NOT NULL)
    );
    CREATE UNIQUE INDEX claim_generations_one_open ON claim_generations ((true)) WHERE opened_at IS NOT NULL AND closed_at IS NULL;

    ALTER TABLE effectively_claims ATTACH PARTITION processed_events FOR VALUES IN (0);
    -- Generation 0 is open from now; `migrate` then closes it at once if
    -- it holds no claim (dedupe.PrepareGenerations), so a new database
    -- claims into generation 1.
    INSERT INTO claim_generations (generation, relname, opened_at) VALUES (0, 'processed_events', now());
END $$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM effectively_claims WHERE generation > 0) THEN
        RAISE EXCEPTION 'claims live in generations after 0; they cannot go back into processed_events without a copy';
    END IF;
    ALTER TABLE effectively_claims DETACH PARTITION processed_events;
    DROP TABLE effectively_claims;
    DROP TABLE claim_generations;
    ALTER TABLE processed_events DROP CONSTRAINT IF EXISTS effectively_claims_closed;
    ALTER TABLE processed_events DROP CONSTRAINT processed_events_generation_check;
    ALTER TABLE processed_events DROP COLUMN generation;
END $$;
-- +goose StatementEnd
