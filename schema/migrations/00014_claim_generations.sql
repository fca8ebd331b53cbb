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

-- The DDL of generations runs in the pruner of `effectively run`, whose
-- role owns nothing (docs/security.md): these functions run it as the
-- owner of the tables (SECURITY DEFINER, with the search path pinned to
-- this schema). Each does one step, checks the state it acts on, and is
-- safe to call twice. EXECUTE is PostgreSQL's default for PUBLIC; calling
-- them needs USAGE on this schema, and they only create, close or drop
-- what claim_generations says.
-- +goose StatementBegin
DO $do$
DECLARE
    s text := current_schema();
BEGIN
    -- Creates generation n's (empty) table unless its row exists: the
    -- primary key is the claim, the origin index serves the audit.
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.effectively_claims_create(n integer) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = %1$I, pg_temp AS $b$
DECLARE
    t text := 'effectively_claims_g' || n;
BEGIN
    INSERT INTO claim_generations (generation, relname) VALUES (n, t) ON CONFLICT (generation) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %%I (LIKE effectively_claims INCLUDING DEFAULTS,
        PRIMARY KEY (event_key),
        CHECK (generation = %%s),
        CHECK (length(payload_hash) = 32),
        CHECK (disposition IN (''applied'', ''stale'', ''parked'', ''dead_lettered'')))', t, n);
    EXECUTE format('CREATE INDEX %%I ON %%I (topic, "partition", "offset")', t || '_origin_idx', t);
    EXECUTE format('ALTER TABLE effectively_claims ATTACH PARTITION %%I FOR VALUES IN (%%s)', t, n);
    RETURN true;
END $b$ $f$, s);

    -- Closes the open generation n and opens n + 1 (created before): the
    -- check constraint's ACCESS EXCLUSIVE lock waits for every transaction
    -- that touched n's table, so the close's time, read after it, is later
    -- than every claim in n. Claims queue behind that lock while it waits,
    -- so it is not asked for while a vacuum holds the table (a vacuum
    -- gives way only after deadlock_timeout): 'busy', try at the next
    -- pass. Returns 'rotated', 'not_open' (another rotation closed n) or
    -- 'busy'.
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.effectively_claims_rotate(n integer, lock_timeout_ms integer) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = %1$I, pg_temp AS $b$
DECLARE
    t text;
BEGIN
    PERFORM set_config('lock_timeout', lock_timeout_ms::text, true);
    SELECT relname INTO t FROM claim_generations WHERE generation = n AND opened_at IS NOT NULL AND closed_at IS NULL FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'not_open';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_locks WHERE relation = to_regclass(quote_ident(t)) AND granted AND mode = 'ShareUpdateExclusiveLock') THEN
        RETURN 'busy';
    END IF;
    EXECUTE format('ALTER TABLE %%I ADD CONSTRAINT effectively_claims_closed CHECK (false) NOT VALID', t);
    UPDATE claim_generations SET closed_at = clock_timestamp() WHERE generation = n;
    UPDATE claim_generations SET opened_at = clock_timestamp() WHERE generation = n + 1 AND opened_at IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'claims generation %% is missing or already open', n + 1;
    END IF;
    RETURN 'rotated';
END $b$ $f$, s);

    -- Drops the table of generation n, once claim_generations marks it
    -- dropped: detach (ACCESS EXCLUSIVE on the parent for a moment, like
    -- any DROP of a partition), then drop. Not while a vacuum holds the
    -- table ('busy'). Returns 'dropped', 'gone' or 'busy'.
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.effectively_claims_drop(n integer, lock_timeout_ms integer) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = %1$I, pg_temp AS $b$
DECLARE
    t text;
BEGIN
    PERFORM set_config('lock_timeout', lock_timeout_ms::text, true);
    SELECT relname INTO t FROM claim_generations WHERE generation = n AND dropped_at IS NOT NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'claims generation %% is not marked dropped', n;
    END IF;
    IF to_regclass(quote_ident(t)) IS NULL THEN
        RETURN 'gone';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_locks WHERE relation = to_regclass(quote_ident(t)) AND granted AND mode = 'ShareUpdateExclusiveLock') THEN
        RETURN 'busy';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass(quote_ident(t))) THEN
        EXECUTE format('ALTER TABLE effectively_claims DETACH PARTITION %%I', t);
    END IF;
    EXECUTE format('DROP TABLE %%I', t);
    RETURN 'dropped';
END $b$ $f$, s);
END $do$;
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
    DROP FUNCTION effectively_claims_create(integer);
    DROP FUNCTION effectively_claims_rotate(integer, integer);
    DROP FUNCTION effectively_claims_drop(integer, integer);
    ALTER TABLE processed_events DROP CONSTRAINT IF EXISTS effectively_claims_closed;
    ALTER TABLE processed_events DROP CONSTRAINT processed_events_generation_check;
    ALTER TABLE processed_events DROP COLUMN generation;
END $$;
-- +goose StatementEnd
