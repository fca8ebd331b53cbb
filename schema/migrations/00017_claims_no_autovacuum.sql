-- Claims generations without autovacuum. A generation's table only grows
-- while it is open and is dropped whole when it expires, so vacuuming it
-- buys nothing: there is no space to reclaim that the drop does not
-- reclaim, and the visibility map and frozen pages it would build go with
-- the table. Yet PostgreSQL vacuums a table that only takes inserts
-- (autovacuum_vacuum_insert_threshold, 1,000 rows plus a fifth of the
-- table) and analyzes it: in a soak at 36,000 events/s the open generation
-- was vacuumed about once a minute, 25–28 s each, and a rotation that
-- finds a vacuum or an analyze holding the table reports 'busy' and
-- waits for the next pass, so generations ran half again as long as
-- configured and the vacuums' reads competed with the claims.
--
-- What a generation still gets: the few claims whose disposition is set
-- after the claim (stale, parked, dead-lettered) leave a dead row each,
-- which stays until the drop; and an anti-wraparound vacuum, which
-- PostgreSQL runs whatever this setting says, if a generation outlives
-- autovacuum_freeze_max_age transactions. The planner needs no statistics
-- for the claims' statements: each is an equality on the primary key.
--
-- Existing generations get the setting too, each under lock_timeout 5 s
-- (ALTER TABLE … SET takes the lock a vacuum holds; an autovacuum in its
-- way is cancelled after deadlock_timeout); one whose lock does not come
-- keeps autovacuum until it is dropped.

-- +goose Up
-- +goose StatementBegin
DO $do$
DECLARE
    s text := current_schema();
    g record;
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
        CHECK (disposition IN (''applied'', ''stale'', ''parked'', ''dead_lettered'')))
        WITH (autovacuum_enabled = false, toast.autovacuum_enabled = false)', t, n);
    EXECUTE format('ALTER TABLE effectively_claims ATTACH PARTITION %%I FOR VALUES IN (%%s)', t, n);
    RETURN true;
END $b$ $f$, s);

    PERFORM set_config('lock_timeout', '5s', true);
    FOR g IN SELECT generation, relname FROM claim_generations
             WHERE dropped_at IS NULL AND to_regclass(quote_ident(relname)) IS NOT NULL
    LOOP
        BEGIN
            EXECUTE format('ALTER TABLE %I SET (autovacuum_enabled = false, toast.autovacuum_enabled = false)', g.relname);
        EXCEPTION WHEN lock_not_available THEN
            RAISE NOTICE 'claims generation % keeps autovacuum until it is dropped (no lock within 5 s)', g.generation;
        END;
    END LOOP;
END $do$;
-- +goose StatementEnd

-- +goose Down
-- 00016's function again; the generations kept get autovacuum back.
-- +goose StatementBegin
DO $do$
DECLARE
    s text := current_schema();
    g record;
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
    EXECUTE format('ALTER TABLE effectively_claims ATTACH PARTITION %%I FOR VALUES IN (%%s)', t, n);
    RETURN true;
END $b$ $f$, s);

    FOR g IN SELECT relname FROM claim_generations
             WHERE dropped_at IS NULL AND to_regclass(quote_ident(relname)) IS NOT NULL
    LOOP
        EXECUTE format('ALTER TABLE %I RESET (autovacuum_enabled, toast.autovacuum_enabled)', g.relname);
    END LOOP;
END $do$;
-- +goose StatementEnd
