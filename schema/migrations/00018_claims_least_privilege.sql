-- Least privilege that holds for the claims generations. The functions of
-- 00014..00017 run DDL as the tables' owner (SECURITY DEFINER) for the
-- worker's role, which owns nothing; they took the table to create, close,
-- detach or drop from claim_generations.relname, a column the worker's role
-- could write (docs/security.md granted it INSERT, UPDATE and DELETE on
-- every table). A row naming operator_actions, then a call of
-- effectively_claims_drop, dropped that table as the owner. From here:
--
--   * No function trusts a table name from a row. Generation n's table is
--     named from n alone (effectively_claims_table: processed_events for 0,
--     effectively_claims_g<n> after), in this schema, always qualified; it
--     is touched only when it is a partition of this schema's
--     effectively_claims (pg_inherits) or, for the drop of a detached one,
--     a plain table of the same owner that carries the closed constraint.
--     A row whose relname differs from the derived name is refused, not
--     followed.
--   * claim_generations, whose states drive that DDL, is written by the
--     owner only: the functions do every write (effectively_claims_expire
--     is new: it marks a closed generation dropped, which the pruner did
--     with an UPDATE). Every other role's INSERT, UPDATE, DELETE and
--     TRUNCATE on it is revoked, and a statement trigger refuses a write by
--     any role that is not a member of the owner — so a GRANT ON ALL TABLES
--     run again after this migration does not give the worker the rows back.
--   * effectively_claims_create creates only the generation after the open
--     one (the only one the engine ever creates).
--   * Every SECURITY DEFINER function has search_path = pg_catalog, this
--     schema, pg_temp (pg_catalog first, pg_temp last), names every object
--     of the schema qualified, and calls the built-ins it relies on as
--     pg_catalog's: pg_catalog first hides an object of the same argument
--     types further down the path, but not a format(text, text, text),
--     which PostgreSQL prefers to pg_catalog's format(text, VARIADIC "any")
--     wherever it sits — one in this schema would have run as the owner.
--     (Only the owner may create in this schema; the qualification keeps
--     it so if that is ever not true.) They are STRICT (a NULL argument
--     does nothing).
--   * EXECUTE is revoked from PUBLIC (PostgreSQL's default grants it to
--     every role) and granted to the roles that may insert claims — the
--     worker's role, which runs the pruner — as they stand at this
--     migration; docs/security.md grants it to the worker by name.
--
-- A worker of the previous release keeps claiming, rotating, detaching and
-- dropping (the functions keep their signatures, and its role keeps EXECUTE
-- through its INSERT on effectively_claims); its pruner's marking of an
-- expired generation — an UPDATE of claim_generations — is refused until it
-- is replaced, and the expired generation is dropped by the next pruner of
-- this release. The down migration puts 00017's functions and grants back.

-- +goose Up
-- +goose StatementBegin
DO $do$
DECLARE
    s text := current_schema();
    f text;
    r record;
BEGIN
    -- The name of generation n's table, from n alone; NULL for n < 0.
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.effectively_claims_table(n integer) RETURNS text
LANGUAGE sql IMMUTABLE STRICT SET search_path = pg_catalog, pg_temp AS $b$
SELECT CASE WHEN n = 0 THEN 'processed_events' WHEN n > 0 THEN 'effectively_claims_g' || n END
$b$ $f$, s);

    -- Generation n's table when it is a partition of this schema's
    -- effectively_claims, in this schema; NULL otherwise.
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.effectively_claims_partition(n integer) RETURNS regclass
LANGUAGE sql STABLE STRICT SET search_path = pg_catalog, pg_temp AS $b$
SELECT c.oid::regclass
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace ns ON ns.oid = c.relnamespace
JOIN pg_catalog.pg_inherits i ON i.inhrelid = c.oid
JOIN pg_catalog.pg_class p ON p.oid = i.inhparent
WHERE ns.nspname = %1$L AND c.relname = %1$I.effectively_claims_table(n)
  AND p.relnamespace = ns.oid AND p.relname = 'effectively_claims'
$b$ $f$, s);

    -- Creates generation n's (empty) table unless its row exists; n must be
    -- the generation after the open one.
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.effectively_claims_create(n integer) RETURNS boolean
LANGUAGE plpgsql STRICT SECURITY DEFINER SET search_path = pg_catalog, %1$I, pg_temp AS $b$
DECLARE
    s CONSTANT text := %1$L;
    t CONSTANT text := %1$I.effectively_claims_table(n);
    cur integer;
BEGIN
    IF EXISTS (SELECT 1 FROM %1$I.claim_generations WHERE generation = n) THEN
        RETURN false;
    END IF;
    SELECT generation INTO cur FROM %1$I.claim_generations WHERE opened_at IS NOT NULL AND closed_at IS NULL;
    IF cur IS NULL OR n <> cur::bigint + 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = pg_catalog.format('claims generation %%s cannot be created: only the one after the open generation (%%s) is', n, coalesce(cur::text, 'none'));
    END IF;
    INSERT INTO %1$I.claim_generations (generation, relname) VALUES (n, t) ON CONFLICT (generation) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    EXECUTE pg_catalog.format('CREATE TABLE %%I.%%I (LIKE %%I.effectively_claims INCLUDING DEFAULTS,
        PRIMARY KEY (event_key),
        CHECK (generation = %%s),
        CHECK (length(payload_hash) = 32),
        CHECK (disposition IN (''applied'', ''stale'', ''parked'', ''dead_lettered'')))
        WITH (autovacuum_enabled = false, toast.autovacuum_enabled = false)', s, t, s, n);
    EXECUTE pg_catalog.format('ALTER TABLE %%I.effectively_claims ATTACH PARTITION %%I.%%I FOR VALUES IN (%%s)', s, s, t, n);
    RETURN true;
END $b$ $f$, s);

    -- Closes the open generation n and opens n + 1, as in 00016.
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.effectively_claims_rotate(n integer, lock_timeout_ms integer) RETURNS text
LANGUAGE plpgsql STRICT SECURITY DEFINER SET search_path = pg_catalog, %1$I, pg_temp AS $b$
DECLARE
    s CONSTANT text := %1$L;
    t CONSTANT text := %1$I.effectively_claims_table(n);
    stored text;
    rel regclass;
BEGIN
    PERFORM pg_catalog.set_config('lock_timeout', lock_timeout_ms::text, true);
    SELECT relname INTO stored FROM %1$I.claim_generations WHERE generation = n AND opened_at IS NOT NULL AND closed_at IS NULL FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'not_open';
    END IF;
    rel := %1$I.effectively_claims_partition(n);
    IF stored IS DISTINCT FROM t OR rel IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
            MESSAGE = pg_catalog.format('claims generation %%s is open, but claim_generations names its table %%L and the partition of %%I.effectively_claims it must be is %%L: refusing to close it', n, stored, s, t);
    END IF;
    IF EXISTS (SELECT 1 FROM pg_locks WHERE relation = rel::oid AND granted AND mode = 'ShareUpdateExclusiveLock') THEN
        RETURN 'busy';
    END IF;
    EXECUTE pg_catalog.format('ALTER TABLE %%I.%%I ADD CONSTRAINT effectively_claims_closed CHECK (false) NOT VALID', s, t);
    INSERT INTO %1$I.claim_generation_offsets (generation, topic, "partition", max_offset)
    SELECT n, topic, "partition", pg_catalog.max(next_offset) - 1 FROM %1$I.consumer_offsets
    GROUP BY topic, "partition" HAVING pg_catalog.max(next_offset) > 0
    ON CONFLICT DO NOTHING;
    UPDATE %1$I.claim_generations SET closed_at = pg_catalog.clock_timestamp() WHERE generation = n;
    UPDATE %1$I.claim_generations SET opened_at = pg_catalog.clock_timestamp() WHERE generation = n + 1 AND opened_at IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'claims generation %% is missing or already open', n + 1;
    END IF;
    RETURN 'rotated';
END $b$ $f$, s);

    -- Marks the closed generation n dropped (the pruner's step once it has
    -- expired and its parked claims are moved); false when n is not closed
    -- or already dropped.
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.effectively_claims_expire(n integer) RETURNS boolean
LANGUAGE plpgsql STRICT SECURITY DEFINER SET search_path = pg_catalog, %1$I, pg_temp AS $b$
BEGIN
    UPDATE %1$I.claim_generations SET dropped_at = pg_catalog.now() WHERE generation = n AND closed_at IS NOT NULL AND dropped_at IS NULL;
    RETURN FOUND;
END $b$ $f$, s);

    -- Detaches the table of generation n, once marked dropped, as in 00015.
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.effectively_claims_detach(n integer, lock_timeout_ms integer) RETURNS text
LANGUAGE plpgsql STRICT SECURITY DEFINER SET search_path = pg_catalog, %1$I, pg_temp AS $b$
DECLARE
    s CONSTANT text := %1$L;
    t CONSTANT text := %1$I.effectively_claims_table(n);
    stored text;
    rel regclass;
BEGIN
    PERFORM pg_catalog.set_config('lock_timeout', lock_timeout_ms::text, true);
    SELECT relname INTO stored FROM %1$I.claim_generations WHERE generation = n AND dropped_at IS NOT NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'claims generation %% is not marked dropped', n;
    END IF;
    IF stored IS DISTINCT FROM t THEN
        RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
            MESSAGE = pg_catalog.format('claim_generations names %%L as the table of claims generation %%s, which is %%L: refusing to detach it', stored, n, t);
    END IF;
    rel := %1$I.effectively_claims_partition(n);
    IF rel IS NULL THEN
        RETURN 'gone';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_locks WHERE relation = rel::oid AND granted AND mode = 'ShareUpdateExclusiveLock') THEN
        RETURN 'busy';
    END IF;
    EXECUTE pg_catalog.format('ALTER TABLE %%I.effectively_claims DETACH PARTITION %%I.%%I', s, s, t);
    RETURN 'detached';
END $b$ $f$, s);

    -- Drops the table of generation n, once marked dropped, as in 00014: an
    -- attached one is detached first; a detached one is dropped only if it
    -- is what a detached generation is — a plain table of this schema, of
    -- the claims' owner, inheriting from nothing, closed by the constraint
    -- the rotation adds.
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.effectively_claims_drop(n integer, lock_timeout_ms integer) RETURNS text
LANGUAGE plpgsql STRICT SECURITY DEFINER SET search_path = pg_catalog, %1$I, pg_temp AS $b$
DECLARE
    s CONSTANT text := %1$L;
    t CONSTANT text := %1$I.effectively_claims_table(n);
    stored text;
    rel regclass;
    attached boolean;
BEGIN
    PERFORM pg_catalog.set_config('lock_timeout', lock_timeout_ms::text, true);
    SELECT relname INTO stored FROM %1$I.claim_generations WHERE generation = n AND dropped_at IS NOT NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'claims generation %% is not marked dropped', n;
    END IF;
    IF stored IS DISTINCT FROM t THEN
        RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
            MESSAGE = pg_catalog.format('claim_generations names %%L as the table of claims generation %%s, which is %%L: refusing to drop it', stored, n, t);
    END IF;
    rel := %1$I.effectively_claims_partition(n);
    attached := rel IS NOT NULL;
    IF NOT attached THEN
        SELECT c.oid INTO rel FROM pg_class c WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = s) AND c.relname = t;
        IF NOT FOUND THEN
            RETURN 'gone';
        END IF;
        IF NOT EXISTS (
            SELECT 1 FROM pg_class c JOIN pg_class p ON p.relnamespace = c.relnamespace AND p.relname = 'effectively_claims'
            WHERE c.oid = rel AND c.relkind = 'r' AND c.relowner = p.relowner
              AND NOT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = c.oid)
              AND EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = c.oid AND contype = 'c' AND conname = 'effectively_claims_closed'))
        THEN
            RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
                MESSAGE = pg_catalog.format('%%I.%%I is not a detached claims generation (a table of the claims'' owner closed by effectively_claims_closed): refusing to drop it', s, t);
        END IF;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_locks WHERE relation = rel::oid AND granted AND mode = 'ShareUpdateExclusiveLock') THEN
        RETURN 'busy';
    END IF;
    IF attached THEN
        EXECUTE pg_catalog.format('ALTER TABLE %%I.effectively_claims DETACH PARTITION %%I.%%I', s, s, t);
    END IF;
    EXECUTE pg_catalog.format('DROP TABLE %%I.%%I', s, t);
    RETURN 'dropped';
END $b$ $f$, s);

    -- claim_generations is the owner's: a write by any role that is not a
    -- member of the table's owner is refused, whatever was granted. The
    -- functions above write it as the owner (current_user inside a
    -- SECURITY DEFINER function); a migration or a superuser is a member.
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.effectively_claim_generations_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $b$
BEGIN
    IF NOT pg_catalog.pg_has_role(current_user, (SELECT relowner FROM pg_class WHERE oid = TG_RELID), 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = pg_catalog.format('permission denied for table %%I: the role %%I may not %%s it', TG_TABLE_NAME, current_user, TG_OP),
            HINT = 'claim_generations drives the DDL of the claims generations; only the schema owner''s functions (effectively_claims_create, _rotate, _expire) write it, and the worker''s role calls them (docs/security.md)';
    END IF;
    RETURN NULL;
END $b$ $f$, s);
    EXECUTE format('DROP TRIGGER IF EXISTS effectively_claim_generations_guard ON %1$I.claim_generations', s);
    EXECUTE format('CREATE TRIGGER effectively_claim_generations_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON %1$I.claim_generations
        FOR EACH STATEMENT EXECUTE FUNCTION %1$I.effectively_claim_generations_guard()', s);

    -- Nobody but the owner holds a write privilege on claim_generations.
    FOR r IN SELECT DISTINCT a.grantee FROM pg_class c, aclexplode(c.relacl) a
             WHERE c.oid = format('%I.claim_generations', s)::regclass AND a.grantee <> c.relowner
               AND a.privilege_type IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE')
    LOOP
        EXECUTE format('REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON %I.claim_generations FROM %s', s,
            CASE WHEN r.grantee = 0 THEN 'PUBLIC' ELSE r.grantee::regrole::text END);
    END LOOP;

    -- EXECUTE on what the pruner calls: not PUBLIC's, the roles' that may
    -- insert claims (the worker's). The helpers and the guard: the owner's.
    FOREACH f IN ARRAY ARRAY['effectively_claims_create(integer)', 'effectively_claims_rotate(integer, integer)',
        'effectively_claims_expire(integer)', 'effectively_claims_detach(integer, integer)', 'effectively_claims_drop(integer, integer)']
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %I.%s FROM PUBLIC', s, f);
        FOR r IN SELECT DISTINCT a.grantee FROM pg_class c, aclexplode(c.relacl) a
                 WHERE c.oid = format('%I.effectively_claims', s)::regclass AND a.grantee <> c.relowner AND a.privilege_type = 'INSERT'
        LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %I.%s TO %s', s, f,
                CASE WHEN r.grantee = 0 THEN 'PUBLIC' ELSE r.grantee::regrole::text END);
        END LOOP;
    END LOOP;
    FOREACH f IN ARRAY ARRAY['effectively_claims_table(integer)', 'effectively_claims_partition(integer)', 'effectively_claim_generations_guard()'] LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %I.%s FROM PUBLIC', s, f);
    END LOOP;
END $do$;
-- +goose StatementEnd

-- +goose Down
-- 00017's functions (create from 00017, rotate from 00016, detach from
-- 00015, drop from 00014) and grants: EXECUTE for PUBLIC, and
-- claim_generations' rows for the roles that may insert claims, whose
-- pruner of that release updates it.
-- +goose StatementBegin
DO $do$
DECLARE
    s text := current_schema();
    f text;
    r record;
BEGIN
    EXECUTE format('DROP TRIGGER effectively_claim_generations_guard ON %I.claim_generations', s);
    EXECUTE format('DROP FUNCTION %I.effectively_claim_generations_guard()', s);
    FOR r IN SELECT DISTINCT a.grantee FROM pg_class c, aclexplode(c.relacl) a
             WHERE c.oid = format('%I.effectively_claims', s)::regclass AND a.grantee <> c.relowner AND a.privilege_type = 'INSERT'
    LOOP
        EXECUTE format('GRANT INSERT, UPDATE, DELETE ON %I.claim_generations TO %s', s,
            CASE WHEN r.grantee = 0 THEN 'PUBLIC' ELSE r.grantee::regrole::text END);
    END LOOP;

    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.effectively_claims_create(n integer) RETURNS boolean
LANGUAGE plpgsql CALLED ON NULL INPUT SECURITY DEFINER SET search_path = %1$I, pg_temp AS $b$
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

    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.effectively_claims_rotate(n integer, lock_timeout_ms integer) RETURNS text
LANGUAGE plpgsql CALLED ON NULL INPUT SECURITY DEFINER SET search_path = %1$I, pg_temp AS $b$
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

    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.effectively_claims_detach(n integer, lock_timeout_ms integer) RETURNS text
LANGUAGE plpgsql CALLED ON NULL INPUT SECURITY DEFINER SET search_path = %1$I, pg_temp AS $b$
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

    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.effectively_claims_drop(n integer, lock_timeout_ms integer) RETURNS text
LANGUAGE plpgsql CALLED ON NULL INPUT SECURITY DEFINER SET search_path = %1$I, pg_temp AS $b$
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

    FOREACH f IN ARRAY ARRAY['effectively_claims_create(integer)', 'effectively_claims_rotate(integer, integer)',
        'effectively_claims_detach(integer, integer)', 'effectively_claims_drop(integer, integer)']
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %I.%s TO PUBLIC', s, f);
    END LOOP;
    EXECUTE format('DROP FUNCTION %I.effectively_claims_expire(integer)', s);
    EXECUTE format('DROP FUNCTION %I.effectively_claims_partition(integer)', s);
    EXECUTE format('DROP FUNCTION %I.effectively_claims_table(integer)', s);
END $do$;
-- +goose StatementEnd
