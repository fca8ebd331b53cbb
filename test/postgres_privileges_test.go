package test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/examples/accounts"
	"github.com/effectively-io/effectively/internal/kafkatest"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/schema"
)

// grantsBefore18 is the owner's grant block of docs/security.md before
// migration 18: what a deployment of the previous release ran. It gave the
// worker's role INSERT, UPDATE and DELETE on claim_generations.
const grantsBefore18 = `
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA effectively TO effectively_worker;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA effectively TO effectively_worker;
ALTER DEFAULT PRIVILEGES FOR ROLE effectively_owner IN SCHEMA effectively
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO effectively_worker;
ALTER DEFAULT PRIVILEGES FOR ROLE effectively_owner IN SCHEMA effectively
    GRANT USAGE ON SEQUENCES TO effectively_worker;`

// definerFuncs are the engine's SECURITY DEFINER functions, the only ones
// the worker's role may execute.
var definerFuncs = []string{
	"effectively_claims_create(integer)",
	"effectively_claims_detach(integer,integer)",
	"effectively_claims_drop(integer,integer)",
	"effectively_claims_expire(integer)",
	"effectively_claims_rotate(integer,integer)",
}

// ownerOnlyFuncs are the functions only the owner executes (the definer
// functions' helpers and claim_generations' guard).
var ownerOnlyFuncs = []string{
	"effectively_claims_table(integer)",
	"effectively_claims_partition(integer)",
	"effectively_claim_generations_guard()",
}

// The worker's DML-only role, made exactly as docs/security.md says, finds
// no way to DDL through the engine's functions, on a PostgreSQL instance of
// the test's own (roles are the cluster's).
//
// At migration 17, as the previous release left it, the hole is shown to
// be real: the worker forges a claim_generations row naming a table of
// the owner's, calls effectively_claims_drop, and the table is gone. Then
// `migrate` applies 18 and, as the worker:
//
//   - forged rows (INSERT, UPDATE, DELETE, TRUNCATE, COPY, a writable CTE,
//     an upsert) naming tables with quotes, dots, schemas and statements
//     are refused — also after an operator re-runs the old grant block;
//   - a row the owner forged (as a row altered before the upgrade would
//     be) is refused by each function, not followed;
//   - each SECURITY DEFINER function called with hostile arguments (out of
//     range, NULL, a name for a number, the wrong state) does nothing;
//   - search_path tricks, with a schema of the worker's own and TEMP (more
//     than the page grants), shadow nothing: tables, functions and an
//     operator of the worker's in front of the schema, and in pg_temp;
//   - even with CREATE on the engine's schema (a misconfiguration), a
//     format() of exact argument types there, which PostgreSQL prefers to
//     pg_catalog's variadic one, is never called: a whole pruner cycle
//     runs as it should;
//   - no function, trigger or privilege of the owner's can be changed, no
//     partition of the worker's attached, no overload added;
//
// and every table of the owner's is still there, with its rows. Every
// SECURITY DEFINER function has its search path pinned (pg_catalog, the
// schema, pg_temp) and is executable by the worker's role and no one else.
// The down migration puts 17's functions and grants back, and up again
// takes them away. Finally the worker's role runs what the page says it may:
// the worker binary claims through rotations its own pruner makes (every
// event one effect, duplicates found across generations), `prune` drops
// expired generations, and `dlq list`, `parked list`, `outbox list`,
// `status` and `audit` run.
func TestWorkerRoleReachesNoDDL(t *testing.T) {
	t.Parallel()
	port, _ := ownPostgres(t)
	stackDir := os.Getenv("EFFECTIVELY_STACK_DIR")
	if stackDir == "" {
		stackDir = "/var/tmp/effectively"
	}
	pg := tlsPostgres{port: port, dir: filepath.Join(stackDir, "pg-"+port)}
	create, grants := securityDocSQL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	su, err := pgx.Connect(ctx, pg.socketDSN("postgres"))
	require.NoError(t, err)
	defer su.Close(context.Background())
	_, err = su.Exec(ctx, create)
	require.NoError(t, err, "the first SQL block of docs/security.md:\n%s", create)
	ownerPW, workerPW := randomPassword(t), randomPassword(t)
	for role, pw := range map[string]string{"effectively_owner": ownerPW, "effectively_worker": workerPW} {
		_, err := su.Exec(ctx, fmt.Sprintf("ALTER ROLE %s PASSWORD '%s'", role, pw))
		require.NoError(t, err)
	}
	// A role that is neither: what PUBLIC may do, it may.
	_, err = su.Exec(ctx, `CREATE ROLE effectively_bystander NOLOGIN`)
	require.NoError(t, err)
	tcp := func(user, pw string) string {
		return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%s/effectively?sslmode=disable", user, pw, port)
	}
	ownerURL, workerURL := tcp("effectively_owner", ownerPW), tcp("effectively_worker", workerPW)
	owner, err := pgxpool.New(ctx, ownerURL)
	require.NoError(t, err)
	defer owner.Close()
	db := pgtest.DB{Schema: "effectively", URL: ownerURL, Pool: owner}
	ownerExec := func(q string, args ...any) {
		t.Helper()
		_, err := owner.Exec(ctx, q, args...)
		require.NoError(t, err, q)
	}

	// The previous release: the engine at 17 with generation 0 closed, 1
	// open and 2 created ahead (as its migrate left a new database, but for
	// generation 0's drop), and the grants its page printed.
	gooseUp(t, db, schema.Migrations(), schema.VersionTable, 17)
	gooseUp(t, db, accounts.Migrations().FS, accounts.Migrations().Table, 0)
	ownerExec(`SELECT effectively_claims_create(1)`)
	ownerExec(`SELECT effectively_claims_rotate(0, 1000)`)
	ownerExec(`SELECT effectively_claims_create(2)`)
	ownerExec(grantsBefore18)

	worker, err := pgx.Connect(ctx, workerURL)
	require.NoError(t, err)
	defer func() { worker.Close(context.Background()) }()
	workerExec := func(q string, args ...any) {
		t.Helper()
		_, err := worker.Exec(ctx, q, args...)
		require.NoError(t, err, q)
	}
	exists := func(table string) bool {
		t.Helper()
		return db.Count(t, `SELECT count(*) FROM pg_class WHERE relnamespace = 'effectively'::regnamespace AND relname = $1`, table) == 1
	}

	t.Run("at 17 the worker drops a table of the owner's", func(t *testing.T) {
		ownerExec(`CREATE TABLE decoy (id int)`)
		workerExec(`INSERT INTO claim_generations (generation, relname, opened_at, closed_at, dropped_at) VALUES (1000, 'decoy', now(), now(), now())`)
		var res string
		require.NoError(t, worker.QueryRow(ctx, `SELECT effectively_claims_drop(1000, 1000)`).Scan(&res))
		require.Equal(t, "dropped", res)
		require.False(t, exists("decoy"), "the hole migration 18 closes: a forged row drops any table as the owner")
		workerExec(`DELETE FROM claim_generations WHERE generation = 1000`)
	})

	code, stdout, stderr := runCmd(t, []string{"EFFECTIVELY_POSTGRES_URL=" + ownerURL}, "migrate")
	require.Equal(t, 0, code, "migrate as the owner: %s\n%s", stdout, stderr)
	require.Contains(t, stdout, "effectively migrations at version 19 (applied [18 19])")
	requirePrivileges(t, owner, "after migrating a deployment of 17")
	// A new deployment runs the page's grant block after migrate; on this
	// one it changes nothing.
	ownerExec(grants)
	requirePrivileges(t, owner, "after the grant block of docs/security.md")

	// What no attack may change: every table of the owner's, the rows of
	// claim_generations and of a table the worker writes, the partitions.
	ownerExec(`INSERT INTO operator_actions (operator, action, target, outcome, result) VALUES ('test', 'test', 'test', 'ok', 'kept')`)
	targets := []string{"operator_actions", "accounts", "ledger_entries", "consumer_offsets", "dead_letters", "outbox",
		"claim_generations", "claim_generation_offsets", "effectively_schema_version", "effectively_claims"}
	snapshot := func() string {
		t.Helper()
		var s string
		require.NoError(t, owner.QueryRow(ctx, `SELECT
  (SELECT string_agg(format('%s %s %s %s %s', generation, relname, opened_at IS NOT NULL, closed_at IS NOT NULL, dropped_at IS NOT NULL), '; ' ORDER BY generation) FROM claim_generations)
  || ' | ' || (SELECT string_agg(c.relname, ',' ORDER BY c.relname) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'effectively_claims'::regclass)
  || ' | ' || (SELECT count(*) FROM operator_actions)::text
  || ' | ' || coalesce((SELECT string_agg(tgname || ':' || tgenabled::text, ',') FROM pg_trigger WHERE tgrelid = 'claim_generations'::regclass), 'no trigger')`).Scan(&s))
		return s
	}
	before := snapshot()
	t.Logf("kept through every attack: %s", before)
	require.Equal(t, "0 processed_events t t f; 1 effectively_claims_g1 t f f; 2 effectively_claims_g2 f f f"+
		" | effectively_claims_g1,effectively_claims_g2,processed_events | 1 | effectively_claim_generations_guard:O", before)
	unchanged := func(t *testing.T) {
		t.Helper()
		for _, table := range targets {
			require.True(t, exists(table), "%s is still there", table)
		}
		require.Equal(t, before, snapshot())
	}
	hostile := []string{"operator_actions", `"operator_actions"`, "effectively.operator_actions", `effectively"."operator_actions`,
		"public.operator_actions", "pg_catalog.pg_class", "operator_actions; DROP TABLE accounts; --", `accounts" CASCADE; --`,
		"OPERATOR_ACTIONS", "effectively_claims", "../accounts", ""}

	t.Run("forged claim_generations rows are refused", func(t *testing.T) {
		for i, name := range hostile {
			gen := 1000 + i
			refused(t, worker, "42501", `INSERT INTO claim_generations (generation, relname, opened_at, closed_at, dropped_at) VALUES ($1, $2, now(), now(), now())`, gen, name)
			refused(t, worker, "42501", `INSERT INTO claim_generations (generation, relname) VALUES (0, $1) ON CONFLICT (generation) DO UPDATE SET relname = excluded.relname, dropped_at = now()`, name)
			refused(t, worker, "42501", `UPDATE claim_generations SET relname = $1 WHERE generation = 0`, name)
			refused(t, worker, "42501", `WITH w AS (UPDATE claim_generations SET relname = $1, dropped_at = now() WHERE generation = 0 RETURNING 1) SELECT count(*) FROM w`, name)
			_, err := worker.CopyFrom(ctx, pgx.Identifier{"claim_generations"}, []string{"generation", "relname"}, pgx.CopyFromRows([][]any{{int32(gen), name}}))
			requireCode(t, err, "42501", "COPY "+name)
		}
		refused(t, worker, "42501", `UPDATE claim_generations SET dropped_at = now() WHERE generation = 0`)
		refused(t, worker, "42501", `UPDATE claim_generations SET closed_at = NULL, opened_at = NULL`)
		refused(t, worker, "42501", `DELETE FROM claim_generations WHERE generation = 1`)
		refused(t, worker, "42501", `TRUNCATE claim_generations`)
		unchanged(t)
	})

	t.Run("an old grant run again: the guard still refuses", func(t *testing.T) {
		ownerExec(grantsBefore18)
		ownerExec(`GRANT TRUNCATE ON claim_generations TO effectively_worker`)
		for _, q := range []string{
			`INSERT INTO claim_generations (generation, relname, opened_at, closed_at, dropped_at) VALUES (1000, 'operator_actions', now(), now(), now())`,
			`UPDATE claim_generations SET relname = 'operator_actions', dropped_at = now() WHERE generation = 0`,
			`UPDATE claim_generations SET dropped_at = now() WHERE false`,
			`DELETE FROM claim_generations WHERE generation = 1`,
			`TRUNCATE claim_generations`,
		} {
			err := refused(t, worker, "42501", q)
			require.Contains(t, err.Error(), "the role effectively_worker may not", q)
		}
		ownerExec(`REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON claim_generations FROM effectively_worker`)
		unchanged(t)
	})

	t.Run("a row altered before the upgrade is not followed", func(t *testing.T) {
		// As the owner (who may write it): generation 0's row names another
		// table and is marked dropped; generation 1's names another table.
		for _, name := range hostile {
			ownerExec(`UPDATE claim_generations SET relname = $1, dropped_at = now() WHERE generation = 0`, name)
			refused(t, worker, "55000", `SELECT effectively_claims_detach(0, 1000)`)
			refused(t, worker, "55000", `SELECT effectively_claims_drop(0, 1000)`)
			ownerExec(`UPDATE claim_generations SET relname = 'processed_events', dropped_at = NULL WHERE generation = 0`)
			ownerExec(`UPDATE claim_generations SET relname = $1 WHERE generation = 1`, name+"_1")
			refused(t, worker, "55000", `SELECT effectively_claims_rotate(1, 1000)`)
			ownerExec(`UPDATE claim_generations SET relname = 'effectively_claims_g1' WHERE generation = 1`)
		}
		unchanged(t)
	})

	t.Run("hostile arguments do nothing", func(t *testing.T) {
		answers := []struct {
			q    string
			want any // a value, or nil for NULL
		}{
			{`SELECT effectively_claims_create(0)::text`, "false"}, // exists
			{`SELECT effectively_claims_create(1)::text`, "false"},
			{`SELECT effectively_claims_create(2)::text`, "false"},
			{`SELECT effectively_claims_create(NULL)::text`, nil},
			{`SELECT effectively_claims_rotate(-1, 1000)`, "not_open"},
			{`SELECT effectively_claims_rotate(0, 1000)`, "not_open"}, // closed
			{`SELECT effectively_claims_rotate(2, 1000)`, "not_open"}, // created, not open
			{`SELECT effectively_claims_rotate(2147483647, 1000)`, "not_open"},
			{`SELECT effectively_claims_rotate(NULL, NULL)`, nil},
			{`SELECT effectively_claims_rotate(1, NULL)`, nil},
			{`SELECT effectively_claims_expire(1)::text`, "false"}, // open
			{`SELECT effectively_claims_expire(2)::text`, "false"},
			{`SELECT effectively_claims_expire(-1)::text`, "false"},
			{`SELECT effectively_claims_expire(99)::text`, "false"},
			{`SELECT effectively_claims_expire(NULL)::text`, nil},
			{`SELECT effectively_claims_detach(NULL, 1000)`, nil},
			{`SELECT effectively_claims_drop(NULL, 1000)`, nil},
		}
		for _, a := range answers {
			var got *string
			require.NoError(t, worker.QueryRow(ctx, a.q).Scan(&got), a.q)
			if a.want == nil {
				require.Nil(t, got, a.q)
			} else {
				require.NotNil(t, got, a.q)
				require.Equal(t, a.want, *got, a.q)
			}
		}
		for _, c := range []struct{ code, q string }{
			{"22023", `SELECT effectively_claims_create(-1)`},
			{"22023", `SELECT effectively_claims_create(3)`}, // not the one after the open one
			{"22023", `SELECT effectively_claims_create(2147483647)`},
			{"22023", `SELECT effectively_claims_rotate(1, -1)`},   // lock_timeout refuses it
			{"P0001", `SELECT effectively_claims_detach(0, 1000)`}, // closed, not marked dropped
			{"P0001", `SELECT effectively_claims_detach(1, 1000)`},
			{"P0001", `SELECT effectively_claims_detach(-1, 1000)`},
			{"P0001", `SELECT effectively_claims_drop(0, 1000)`},
			{"P0001", `SELECT effectively_claims_drop(1, 1000)`},
			{"P0001", `SELECT effectively_claims_drop(2, 1000)`},
			{"P0001", `SELECT effectively_claims_drop(2147483647, 0)`},
			{"22P02", `SELECT effectively_claims_drop('operator_actions', 1000)`},
			{"22P02", `SELECT effectively_claims_detach('effectively.operator_actions', 1000)`},
			{"22P02", `SELECT effectively_claims_create('1; DROP TABLE accounts')`},
			{"42883", `SELECT effectively_claims_drop('operator_actions'::text, 1000)`},
			{"42883", `SELECT effectively_claims_drop(0::bigint + 4294967296, 1000)`},
			// The helpers and the guard are the owner's.
			{"42501", `SELECT effectively_claims_table(1)`},
			{"42501", `SELECT effectively_claims_partition(1)`},
			{"42501", `SELECT effectively_claim_generations_guard()`},
			// Nothing of the owner's can be changed or added to.
			{"42501", `CREATE FUNCTION effectively_claims_drop(text, integer) RETURNS text LANGUAGE sql AS 'SELECT 1::text'`},
			{"42501", `CREATE OR REPLACE FUNCTION effectively_claims_table(n integer) RETURNS text LANGUAGE sql AS 'SELECT ''operator_actions'''`},
			{"42501", `ALTER FUNCTION effectively_claims_drop(integer, integer) RESET search_path`},
			{"42501", `ALTER FUNCTION effectively_claims_drop(integer, integer) SECURITY INVOKER`},
			{"42501", `ALTER FUNCTION effectively_claims_drop(integer, integer) OWNER TO effectively_worker`},
			{"42501", `GRANT EXECUTE ON FUNCTION effectively_claims_table(integer) TO effectively_worker`},
			{"42501", `ALTER TABLE claim_generations DISABLE TRIGGER effectively_claim_generations_guard`},
			{"42501", `DROP TRIGGER effectively_claim_generations_guard ON claim_generations`},
			{"42501", `SET session_replication_role = replica`},
			{"42501", `CREATE TABLE effectively_claims_g3 (LIKE effectively_claims)`},
			{"42501", `ALTER TABLE effectively_claims DETACH PARTITION effectively_claims_g2`},
			{"42501", `ALTER TABLE processed_events DROP CONSTRAINT effectively_claims_closed`},
		} {
			refused(t, worker, c.code, c.q)
		}
		unchanged(t)
	})

	t.Run("search_path tricks shadow nothing", func(t *testing.T) {
		// More than the page grants: a schema of the worker's own, and
		// temporary tables.
		_, err := su.Exec(ctx, `CREATE SCHEMA evil AUTHORIZATION effectively_worker; GRANT TEMPORARY ON DATABASE effectively TO effectively_worker`)
		require.NoError(t, err)
		defer func() {
			_, err := su.Exec(context.Background(), `DROP SCHEMA evil CASCADE; REVOKE TEMPORARY ON DATABASE effectively FROM effectively_worker`)
			require.NoError(t, err)
		}()
		tricky, err := pgx.Connect(ctx, workerURL)
		require.NoError(t, err)
		defer tricky.Close(context.Background())
		for _, q := range []string{
			// Look-alike tables, every generation naming the owner's table,
			// every state set.
			`CREATE TABLE evil.claim_generations (LIKE effectively.claim_generations)`,
			`INSERT INTO evil.claim_generations (generation, relname, created_at, opened_at, closed_at, dropped_at)
			 SELECT g, 'operator_actions', now(), now(), now(), now() FROM generate_series(-1, 5) g`,
			`CREATE TEMP TABLE claim_generations (LIKE effectively.claim_generations)`,
			`INSERT INTO pg_temp.claim_generations SELECT * FROM evil.claim_generations`,
			`CREATE TABLE evil.effectively_claims (LIKE effectively.effectively_claims)`,
			`CREATE TEMP TABLE effectively_claims (LIKE effectively.effectively_claims)`,
			`CREATE TABLE evil.consumer_offsets (LIKE effectively.consumer_offsets)`,
			// Look-alike functions: the helpers, and built-ins the functions
			// call, with exact argument types (which PostgreSQL prefers to a
			// variadic "any" one whatever the path's order).
			`CREATE FUNCTION evil.effectively_claims_table(integer) RETURNS text LANGUAGE sql AS $$SELECT 'operator_actions'$$`,
			`CREATE FUNCTION evil.effectively_claims_partition(integer) RETURNS regclass LANGUAGE sql AS $$SELECT 'effectively.operator_actions'::regclass$$`,
			`CREATE FUNCTION pg_temp.effectively_claims_table(integer) RETURNS text LANGUAGE sql AS $$SELECT 'operator_actions'$$`,
			`CREATE FUNCTION evil.format(text, text, text) RETURNS text LANGUAGE sql AS $$SELECT 'DROP TABLE effectively.operator_actions'$$`,
			`CREATE FUNCTION evil.format(text, text, text, text) RETURNS text LANGUAGE sql AS $$SELECT 'DROP TABLE effectively.operator_actions'$$`,
			`CREATE FUNCTION evil.format(text, text, text, integer) RETURNS text LANGUAGE sql AS $$SELECT 'DROP TABLE effectively.operator_actions'$$`,
			`CREATE FUNCTION evil.set_config(text, text, boolean) RETURNS text LANGUAGE sql AS $$SELECT 'x'$$`,
			`CREATE FUNCTION evil.pg_has_role(name, oid, text) RETURNS boolean LANGUAGE sql AS $$SELECT true$$`,
			`CREATE FUNCTION evil.always(integer, integer) RETURNS boolean LANGUAGE sql AS $$SELECT true$$`,
			`CREATE OPERATOR evil.= (LEFTARG = integer, RIGHTARG = integer, FUNCTION = evil.always)`,
			`CREATE FUNCTION evil.effectively_claims_drop(integer, integer) RETURNS text LANGUAGE sql AS $$SELECT 'shadow'$$`,
		} {
			_, err := tricky.Exec(ctx, q)
			require.NoError(t, err, q)
		}
		// Its own tables cannot become generations.
		for _, q := range []string{
			`CREATE TABLE evil.effectively_claims_g7 PARTITION OF effectively.effectively_claims FOR VALUES IN (7)`,
			`CREATE TABLE evil.effectively_claims_g8 (LIKE effectively.effectively_claims)`,
			`ALTER TABLE effectively.effectively_claims ATTACH PARTITION evil.effectively_claims_g8 FOR VALUES IN (8)`,
			`CREATE TABLE evil.child () INHERITS (effectively.effectively_claims)`,
		} {
			_, err := tricky.Exec(ctx, q)
			if strings.HasPrefix(q, "CREATE TABLE evil.effectively_claims_g8") {
				require.NoError(t, err, q)
				continue
			}
			require.Error(t, err, q)
		}
		for _, path := range []string{"pg_temp, evil, effectively", "evil, pg_temp, effectively", "evil, effectively, pg_catalog"} {
			_, err := tricky.Exec(ctx, `SET search_path = `+path)
			require.NoError(t, err)
			// The worker's own function is what an unqualified name finds
			// now; the engine's are called by their qualified names.
			var s string
			require.NoError(t, tricky.QueryRow(ctx, `SELECT effectively_claims_drop(0, 1000)`).Scan(&s))
			require.Equal(t, "shadow", s)
			for _, c := range []struct{ code, q string }{
				{"P0001", `SELECT effectively.effectively_claims_drop(0, 1000)`},
				{"P0001", `SELECT effectively.effectively_claims_detach(0, 1000)`},
				{"P0001", `SELECT effectively.effectively_claims_drop(5, 1000)`},
				{"22023", `SELECT effectively.effectively_claims_create(5)`},
				{"42501", `UPDATE effectively.claim_generations SET dropped_at = now()`},
			} {
				refused(t, tricky, c.code, c.q)
			}
			var rotated, expired string
			require.NoError(t, tricky.QueryRow(ctx, `SELECT effectively.effectively_claims_rotate(0, 1000), effectively.effectively_claims_expire(1)::text`).Scan(&rotated, &expired))
			require.Equal(t, "not_open", rotated, path)
			require.Equal(t, "false", expired, path)
		}
		// And with the old grants back, the guard ignores the worker's
		// pg_has_role.
		ownerExec(grantsBefore18)
		refused(t, tricky, "42501", `UPDATE effectively.claim_generations SET relname = 'operator_actions', dropped_at = now() WHERE generation = 0`)
		refused(t, tricky, "42501", `INSERT INTO effectively.claim_generations (generation, relname, opened_at, closed_at, dropped_at) VALUES (1000, 'operator_actions', now(), now(), now())`)
		ownerExec(`REVOKE INSERT, UPDATE, DELETE ON claim_generations FROM effectively_worker`)
		var lookalikes int64
		require.NoError(t, tricky.QueryRow(ctx, `SELECT count(*) FROM evil.claim_generations WHERE relname = 'operator_actions'`).Scan(&lookalikes))
		require.Equal(t, int64(7), lookalikes, "the worker's look-alike rows are where it left them")
		require.Zero(t, db.Count(t, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'effectively_claims'::regclass AND inhrelid::regclass::text LIKE 'evil.%'`))
		unchanged(t)
	})

	t.Run("even CREATE on the engine's schema shadows no built-in", func(t *testing.T) {
		// A misconfiguration the page never makes: the worker may create in
		// the functions' own schema, which is on their search path. A
		// format() of exact argument types would be preferred to
		// pg_catalog's format(text, VARIADIC "any") wherever it sits in the
		// path; the functions call pg_catalog.format, so it is never used.
		_, err := su.Exec(ctx, `GRANT CREATE ON SCHEMA effectively TO effectively_worker`)
		require.NoError(t, err)
		defer func() {
			_, err := su.Exec(context.Background(), `REVOKE CREATE ON SCHEMA effectively FROM effectively_worker`)
			require.NoError(t, err)
		}()
		var shadows []string
		for _, args := range []string{"text, text, text", "text, text, text, text", "text, text, text, text, integer", "text, integer, text", "text, integer, text, text, text"} {
			fn := "effectively.format(" + args + ")"
			workerExec(`CREATE FUNCTION ` + fn + ` RETURNS text LANGUAGE sql AS $$SELECT 'DROP TABLE effectively.operator_actions'$$`)
			shadows = append(shadows, fn)
		}
		workerExec(`CREATE FUNCTION effectively.set_config(text, text, boolean) RETURNS text LANGUAGE sql AS $$SELECT 'x'$$`)
		shadows = append(shadows, "effectively.set_config(text, text, boolean)")
		defer func() {
			for _, fn := range shadows {
				_, err := su.Exec(context.Background(), `DROP FUNCTION `+fn)
				require.NoError(t, err)
			}
		}()
		// A whole cycle, as the pruner runs it: generation 1 closes, 3 is
		// created, 1 is marked dropped, detached and dropped.
		for _, c := range []struct{ q, want string }{
			{`SELECT effectively_claims_rotate(1, 1000)`, "rotated"},
			{`SELECT effectively_claims_create(3)::text`, "true"},
			{`SELECT effectively_claims_expire(1)::text`, "true"},
			{`SELECT effectively_claims_detach(1, 1000)`, "detached"},
			{`SELECT effectively_claims_drop(1, 1000)`, "dropped"},
		} {
			var got string
			require.NoError(t, worker.QueryRow(ctx, c.q).Scan(&got), c.q)
			require.Equal(t, c.want, got, c.q)
		}
		refused(t, worker, "P0001", `SELECT effectively_claims_drop(2, 1000)`)
		refused(t, worker, "22023", `SELECT effectively_claims_create(9)`)
		for _, table := range targets {
			require.True(t, exists(table), "%s is still there", table)
		}
		require.False(t, exists("effectively_claims_g1"))
		before = snapshot()
		require.Equal(t, "0 processed_events t t f; 1 effectively_claims_g1 t t t; 2 effectively_claims_g2 t f f; 3 effectively_claims_g3 f f f"+
			" | effectively_claims_g2,effectively_claims_g3,processed_events | 1 | effectively_claim_generations_guard:O", before)
	})

	t.Run("the down migration gives 17 back, up takes it away again", func(t *testing.T) {
		p := gooseProvider(t, db, schema.Migrations(), schema.VersionTable)
		_, err := p.DownTo(ctx, 17)
		require.NoError(t, err)
		require.Equal(t, int64(1), db.Count(t, `SELECT count(*) WHERE has_table_privilege('effectively_worker', 'claim_generations', 'UPDATE')`),
			"17's pruner updates claim_generations")
		require.Equal(t, int64(1), db.Count(t, `SELECT count(*) WHERE has_function_privilege('effectively_bystander', 'effectively_claims_drop(integer, integer)', 'EXECUTE')`),
			"17's functions are PUBLIC's")
		require.Zero(t, db.Count(t, `SELECT count(*) FROM pg_proc WHERE pronamespace = 'effectively'::regnamespace AND proname IN ('effectively_claims_expire', 'effectively_claims_table', 'effectively_claims_partition', 'effectively_claim_generations_guard')`))
		require.Zero(t, db.Count(t, `SELECT count(*) FROM pg_trigger WHERE tgrelid = 'claim_generations'::regclass`))
		require.Equal(t, int64(4), db.Count(t, `SELECT count(*) FROM pg_proc WHERE pronamespace = 'effectively'::regnamespace AND prosecdef AND proconfig = '{"search_path=effectively, pg_temp"}'`))
		_, err = p.Up(ctx)
		require.NoError(t, err)
		requirePrivileges(t, owner, "after down and up")
		unchanged(t)
	})

	t.Run("the worker role runs what the page says it may", func(t *testing.T) {
		r := &rig{
			db:    pgtest.DB{Schema: "effectively", URL: workerURL, Pool: owner},
			topic: kafkatest.NewTopic(t, 4), group: kafkatest.NewGroup(t),
		}
		r.env = []string{
			"EFFECTIVELY_KAFKA_BROKERS=" + strings.Join(kafkatest.Brokers(t), ","),
			"EFFECTIVELY_KAFKA_GROUP=" + r.group, "EFFECTIVELY_KAFKA_TOPICS=" + r.topic,
			"EFFECTIVELY_POSTGRES_URL=" + workerURL, "EFFECTIVELY_HTTP_ADDR=",
			"EFFECTIVELY_CONSUMER_BATCH_MAX_RECORDS=100",
		}
		openGen := func() int64 { return db.Count(t, pgtest.OpenGeneration) }
		recs, exp := r.records(t, testWorkload(2000, 100, 18))
		half := len(recs) / 2
		produceRecords(t, r.topic, recs[:half]...)
		// The worker's own pruner rotates every 2 s, as the worker's role.
		w := r.worker(t, "EFFECTIVELY_DEDUPE_GENERATION_INTERVAL=2s", "EFFECTIVELY_DEDUPE_PRUNE_INTERVAL=1s")
		r.waitApplied(t, half, 3*time.Minute)
		first := openGen()
		waitUntil(t, "the worker's pruner rotating", time.Minute, func(context.Context) bool { return openGen() > first })
		// The rest, and the first half again: duplicates of claims in a
		// closed generation.
		produceRecords(t, r.topic, recs[half:]...)
		produceRecords(t, r.topic, again(recs[:half])...)
		r.waitApplied(t, len(recs)+half, 3*time.Minute)
		second := openGen()
		waitUntil(t, "another rotation", time.Minute, func(context.Context) bool { return openGen() > second })
		w.signal(t, syscall.SIGTERM)
		require.Equal(t, 0, w.wait(t, time.Minute), "stderr:\n%s", tail(w.stderr.String(), 40))
		r.verify(t, exp)
		logs := w.stderr.String()
		require.NotContains(t, logs, "permission denied")
		require.NotContains(t, logs, "SQLSTATE")
		require.GreaterOrEqual(t, db.Count(t, `SELECT count(DISTINCT generation) FROM effectively_claims`), int64(2), "claims live in generations on both sides of a rotation")

		// The generations before the newest one holding claims expire;
		// `prune` as the worker's role drops them (each table gone) and
		// keeps the rest.
		high := db.Count(t, `SELECT max(generation) FROM effectively_claims`)
		expired := db.Count(t, `SELECT count(*) FROM claim_generations WHERE closed_at IS NOT NULL AND dropped_at IS NULL AND generation < $1`, high)
		require.GreaterOrEqual(t, expired, int64(2), "generation 0 and one the worker's pruner closed")
		droppedBefore := db.Count(t, `SELECT count(*) FROM claim_generations WHERE dropped_at IS NOT NULL`)
		total := db.Count(t, `SELECT count(*) FROM effectively_claims`)
		kept := db.Count(t, `SELECT count(*) FROM effectively_claims WHERE generation >= $1`, high)
		require.Positive(t, kept)
		require.Less(t, kept, total, "claims go with the expired generations")
		ownerExec(`UPDATE claim_generations SET opened_at = opened_at - interval '1 hour', closed_at = closed_at - interval '1 hour' WHERE closed_at IS NOT NULL AND generation < $1`, high)
		env := append(append([]string{}, r.env...), "EFFECTIVELY_DEDUPE_RETENTION=10m", "EFFECTIVELY_UPSTREAM_MAX_RETRY_HORIZON=1m", "EFFECTIVELY_DEDUPE_RECONCILIATION_WINDOW=0s")
		code, stdout, stderr := runCmd(t, env, "prune", "--dry-run")
		require.Equal(t, 0, code, "%s\n%s", stdout, stderr)
		code, stdout, stderr = runCmd(t, env, "prune", "--yes")
		require.Equal(t, 0, code, "%s\n%s", stdout, stderr)
		require.Equal(t, int(expired), strings.Count(stdout, "effectively_claims: dropped generation"), stdout)
		require.Zero(t, db.Count(t, `SELECT count(*) FROM claim_generations g WHERE dropped_at IS NOT NULL AND to_regclass(quote_ident(g.relname)) IS NOT NULL`), "every dropped generation's table is gone")
		require.Equal(t, droppedBefore+expired, db.Count(t, `SELECT count(*) FROM claim_generations WHERE dropped_at IS NOT NULL`))
		require.Zero(t, db.Count(t, `SELECT count(*) FROM claim_generations WHERE dropped_at IS NULL AND generation < $1`, high), "every generation before the newest with claims is dropped")
		require.Equal(t, kept, db.Count(t, `SELECT count(*) FROM effectively_claims`), "the claims of the generations not expired are kept")
		for _, table := range targets {
			require.True(t, exists(table), "%s is still there", table)
		}
		code, rep := r.runAudit(t)
		require.Equal(t, 0, code, "the audit as the worker's role: %+v", rep)
		for _, args := range [][]string{{"dlq", "list"}, {"parked", "list"}, {"outbox", "list"}, {"status"}} {
			code, stdout, stderr := runCmd(t, r.env, args...)
			require.Equal(t, 0, code, "%v as effectively_worker: %s\n%s", args, stdout, stderr)
		}
	})
}

// requirePrivileges checks, on the schema effectively, what migration 18
// and the page's grants leave: every SECURITY DEFINER function is one of
// definerFuncs, with its search path pinned, strict, executable by the
// worker's role and by no one else; the helpers and the guard are the
// owner's alone; the worker reads claim_generations and writes nothing of
// it.
func requirePrivileges(t *testing.T, owner *pgxpool.Pool, when string) {
	t.Helper()
	ctx := context.Background()
	rows, err := owner.Query(ctx, `
SELECT p.oid::regprocedure::text, coalesce(array_to_string(p.proconfig, ';'), ''), p.proisstrict,
       p.proacl IS NOT NULL AND NOT EXISTS (SELECT 1 FROM aclexplode(p.proacl) a WHERE a.grantee = 0),
       has_function_privilege('effectively_worker', p.oid, 'EXECUTE'),
       has_function_privilege('effectively_bystander', p.oid, 'EXECUTE')
FROM pg_proc p WHERE p.pronamespace = 'effectively'::regnamespace AND p.prosecdef ORDER BY 1`)
	require.NoError(t, err)
	type fn struct {
		Sig, Config                       string
		Strict, NotPublic, Worker, Others bool
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[fn])
	require.NoError(t, err)
	var sigs []string
	for _, f := range got {
		sigs = append(sigs, f.Sig)
		require.Equal(t, "search_path=pg_catalog, effectively, pg_temp", f.Config, "%s: %s", when, f.Sig)
		require.True(t, f.Strict, "%s: %s is STRICT", when, f.Sig)
		require.True(t, f.NotPublic, "%s: PUBLIC may not execute %s", when, f.Sig)
		require.True(t, f.Worker, "%s: the worker's role may execute %s", when, f.Sig)
		require.False(t, f.Others, "%s: another role may not execute %s", when, f.Sig)
	}
	require.Equal(t, definerFuncs, sigs, "%s: the SECURITY DEFINER functions", when)
	for _, f := range ownerOnlyFuncs {
		var worker, by bool
		require.NoError(t, owner.QueryRow(ctx, `SELECT has_function_privilege('effectively_worker', $1::regprocedure, 'EXECUTE'),
			has_function_privilege('effectively_bystander', $1::regprocedure, 'EXECUTE')`, "effectively."+f).Scan(&worker, &by))
		require.False(t, worker, "%s: %s is the owner's", when, f)
		require.False(t, by, "%s: %s is the owner's", when, f)
	}
	var sel, ins, upd, del, trunc bool
	require.NoError(t, owner.QueryRow(ctx, `SELECT has_table_privilege('effectively_worker', 'effectively.claim_generations', 'SELECT'),
		has_table_privilege('effectively_worker', 'effectively.claim_generations', 'INSERT'),
		has_table_privilege('effectively_worker', 'effectively.claim_generations', 'UPDATE'),
		has_table_privilege('effectively_worker', 'effectively.claim_generations', 'DELETE'),
		has_table_privilege('effectively_worker', 'effectively.claim_generations', 'TRUNCATE')`).Scan(&sel, &ins, &upd, &del, &trunc))
	require.True(t, sel, "%s: the worker reads claim_generations", when)
	require.False(t, ins || upd || del || trunc, "%s: the worker writes nothing of claim_generations", when)
}

// refused runs q on conn and requires it to fail with SQLSTATE code.
func refused(t *testing.T, conn *pgx.Conn, code, q string, args ...any) error {
	t.Helper()
	_, err := conn.Exec(context.Background(), q, args...)
	requireCode(t, err, code, q)
	return err
}

func requireCode(t *testing.T, err error, code, what string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "%s: want SQLSTATE %s", what, code)
	require.Equal(t, code, pgErr.Code, "%s: %v", what, err)
}
