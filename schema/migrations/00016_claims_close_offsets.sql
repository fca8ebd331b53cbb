-- Claims without the origin index. Every generation's table had an index on
-- (topic, "partition", "offset") for one reader: the pruner, which, as it
-- dropped a generation, read from it the highest offset per source
-- partition of the claims it held, so that the audit could tell a pruned
-- claim from a missing one (pruned_offsets). That index cost every claim an
-- index insertion — about 4 µs of PostgreSQL CPU per event of the ~28 the
-- benchmark measured, one sixth of the database's work.
--
-- The same bound now comes from the consumer positions when a generation
-- closes: the rotation, once its lock has waited for every transaction that
-- claimed into the generation, records per source partition the highest
-- offset any consumer group had processed (consumer_offsets advances in the
-- transaction of the claims). Every record at or below it was settled
-- before the close, so if its claim is gone, retention dropped it — which
-- is what pruned_offsets says. It is at least the highest claim offset the
-- index gave (it also covers the duplicates and dead letters settled after
-- the last claim), read from a table of one row per source partition
-- rather than from the claims.
--
-- Generations closed before this migration get their offsets from their
-- origin index here, once. The open generation and the one created ahead
-- of it lose the index (a catalog change each; left in place if a lock
-- does not come within 5 s — it then goes with its table).

-- +goose Up
CREATE TABLE claim_generation_offsets (
    generation  integer NOT NULL,
    topic       text    NOT NULL,
    "partition" integer NOT NULL,
    max_offset  bigint  NOT NULL,
    PRIMARY KEY (generation, topic, "partition")
);

-- +goose StatementBegin
DO $do$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT generation, relname FROM claim_generations
             WHERE closed_at IS NOT NULL AND dropped_at IS NULL AND to_regclass(quote_ident(relname)) IS NOT NULL
    LOOP
        -- A loose scan of the origin index: one probe per source partition.
        WITH RECURSIVE tp AS (
            (SELECT topic, "partition" FROM effectively_claims WHERE generation = g.generation ORDER BY topic, "partition" LIMIT 1)
            UNION ALL
            SELECT n.topic, n."partition" FROM tp, LATERAL (
                SELECT topic, "partition" FROM effectively_claims
                WHERE generation = g.generation AND (topic, "partition") > (tp.topic, tp."partition")
                ORDER BY topic, "partition" LIMIT 1) n
        )
        INSERT INTO claim_generation_offsets (generation, topic, "partition", max_offset)
        SELECT g.generation, tp.topic, tp."partition",
               (SELECT max("offset") FROM effectively_claims c WHERE c.generation = g.generation AND c.topic = tp.topic AND c."partition" = tp."partition")
        FROM tp;
    END LOOP;

    PERFORM set_config('lock_timeout', '5s', true);
    FOR g IN SELECT generation, relname FROM claim_generations WHERE closed_at IS NULL LOOP
        BEGIN
            IF g.generation = 0 THEN
                DROP INDEX IF EXISTS processed_events_origin_idx;
            ELSE
                EXECUTE format('DROP INDEX IF EXISTS %I', g.relname || '_origin_idx');
            END IF;
        EXCEPTION WHEN lock_not_available THEN
            RAISE NOTICE 'the origin index of claims generation % stays until its table is dropped (no lock within 5 s)', g.generation;
        END;
    END LOOP;
END $do$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $do$
DECLARE
    s text := current_schema();
BEGIN
    -- Creates generation n's (empty) table unless its row exists: the
    -- primary key is the claim.
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
    EXECUTE format('ALTER TABLE effectively_claims ATTACH PARTITION %%I FOR VALUES IN (%%s)', t, n);
    RETURN true;
END $b$ $f$, s);

    -- Closes the open generation n and opens n + 1 (created before), as in
    -- 00014, and records where the consumers stood at the close: the check
    -- constraint's ACCESS EXCLUSIVE lock has waited for every transaction
    -- that claimed into n, and each advanced its partition's position with
    -- its claims, so every record at or below these offsets was settled
    -- before the close. Returns 'rotated', 'not_open' or 'busy'.
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
    INSERT INTO claim_generation_offsets (generation, topic, "partition", max_offset)
    SELECT n, topic, "partition", max(next_offset) - 1 FROM consumer_offsets
    GROUP BY topic, "partition" HAVING max(next_offset) > 0
    ON CONFLICT DO NOTHING;
    UPDATE claim_generations SET closed_at = clock_timestamp() WHERE generation = n;
    UPDATE claim_generations SET opened_at = clock_timestamp() WHERE generation = n + 1 AND opened_at IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'claims generation %% is missing or already open', n + 1;
    END IF;
    RETURN 'rotated';
END $b$ $f$, s);
END $do$;
-- +goose StatementEnd

-- +goose Down
-- The functions of 00014 again. Generations created meanwhile have no
-- origin index: a pruner of the previous release reads their offsets
-- with a scan of the generation as it drops it.
-- +goose StatementBegin
DO $do$
DECLARE
    s text := current_schema();
BEGIN
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
END $do$;
-- +goose StatementEnd
DROP TABLE claim_generation_offsets;
