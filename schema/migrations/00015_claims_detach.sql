-- Dropping an expired claims generation in two transactions: detach it from
-- effectively_claims (a catalog change, the parent's ACCESS EXCLUSIVE lock
-- held for about a millisecond), then drop the detached table. In one
-- transaction the parent's lock was held until the drop committed, and a
-- drop commits only once the table's files are unlinked: 0.2 s for half a
-- gigabyte at rest, up to 0.8 s under load, during which every claim
-- waited. Detached, the table is read by nothing (claims and lookups go
-- through the parent), so its drop holds up no claim.
--
-- effectively_claims_drop (00014) stays as it was: it drops a table that
-- is already detached, and still detaches one that is not, for a worker of
-- the previous release.

-- +goose Up
-- +goose StatementBegin
DO $do$
DECLARE
    s text := current_schema();
BEGIN
    -- Detaches the table of generation n, once claim_generations marks it
    -- dropped. Not while a vacuum holds the table ('busy'). Returns
    -- 'detached', 'gone' (no such table, or not attached).
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.effectively_claims_detach(n integer, lock_timeout_ms integer) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = %1$I, pg_temp AS $b$
DECLARE
    t text;
BEGIN
    PERFORM set_config('lock_timeout', lock_timeout_ms::text, true);
    SELECT relname INTO t FROM claim_generations WHERE generation = n AND dropped_at IS NOT NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'claims generation %% is not marked dropped', n;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass(quote_ident(t))) THEN
        RETURN 'gone';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_locks WHERE relation = to_regclass(quote_ident(t)) AND granted AND mode = 'ShareUpdateExclusiveLock') THEN
        RETURN 'busy';
    END IF;
    EXECUTE format('ALTER TABLE effectively_claims DETACH PARTITION %%I', t);
    RETURN 'detached';
END $b$ $f$, s);
END $do$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION effectively_claims_detach(integer, integer);
