package test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/internal/kafkatest"
	"github.com/effectively-io/effectively/internal/pgtest"
)

// PostgreSQL security end to end, on an instance of the test's own that
// takes TCP connections only over TLS (stack.sh with EFFECTIVELY_PG_TLS=1):
// the roles and grants of docs/security.md, read from that page and run as
// written; migrate as the worker's role (refused) and as the owner over
// verify-full; the real worker binary as the DML-only role over verify-full
// until every event of a workload with duplicates and disorder has exactly
// one effect; admin commands as that role; a table a later migration
// creates; and the errors an operator meets with a wrong CA or no TLS.
func TestPostgresSecurity(t *testing.T) {
	t.Parallel()
	pg := startTLSPostgres(t)
	create, grants := securityDocSQL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The superuser's part, over the unix socket (the admin side).
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
	ownerURL := pg.url("effectively_owner", ownerPW, pg.ca)
	workerURL := pg.url("effectively_worker", workerPW, pg.ca)

	t.Run("the worker's role cannot migrate", func(t *testing.T) {
		code, _, stderr := runCmd(t, []string{"EFFECTIVELY_POSTGRES_URL=" + workerURL}, "migrate")
		require.Equal(t, 1, code, stderr)
		require.Contains(t, stderr, "permission denied for schema effectively (SQLSTATE 42501)")
		require.Contains(t, stderr, "the role effectively_worker lacks CREATE on schema effectively, which migrate needs")
		require.Contains(t, stderr, "fix: run migrate as the role that owns the schema")
		require.NotContains(t, stderr, workerPW)
	})

	code, stdout, stderr := runCmd(t, []string{"EFFECTIVELY_POSTGRES_URL=" + ownerURL}, "migrate")
	require.Equal(t, 0, code, "migrate as the owner: %s\n%s", stdout, stderr)
	require.Contains(t, stdout, "schema effectively: effectively migrations at version")
	require.NotContains(t, stderr, "sslmode", "no TLS warning for a local server")

	// Before the grants, the worker's role is told what it lacks.
	code, _, stderr = runCmd(t, []string{"EFFECTIVELY_POSTGRES_URL=" + workerURL}, "dlq", "list")
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "the role effectively_worker in postgres.url may not use the schema's tables")

	// The owner's part, over verify-full.
	owner, err := pgxpool.New(ctx, ownerURL)
	require.NoError(t, err)
	defer owner.Close()
	_, err = owner.Exec(ctx, grants)
	require.NoError(t, err, "the second SQL block of docs/security.md:\n%s", grants)
	requireVerifiedTLS(t, owner)

	t.Run("worker as the DML-only role over verify-full", func(t *testing.T) {
		r := &rig{
			db:    pgtest.DB{Schema: "effectively", URL: workerURL, Pool: owner},
			topic: kafkatest.NewTopic(t, 4), group: kafkatest.NewGroup(t),
		}
		r.env = []string{
			"EFFECTIVELY_KAFKA_BROKERS=" + strings.Join(kafkatest.Brokers(t), ","),
			"EFFECTIVELY_KAFKA_GROUP=" + r.group, "EFFECTIVELY_KAFKA_TOPICS=" + r.topic,
			// channel_binding=require: SCRAM-SHA-256-PLUS, bound to the TLS
			// connection the worker's connections (guarded beneath TLS by
			// postgres.answer_timeout) really have.
			"EFFECTIVELY_POSTGRES_URL=" + workerURL + "&channel_binding=require", "EFFECTIVELY_HTTP_ADDR=",
			"EFFECTIVELY_CONSUMER_BATCH_MAX_RECORDS=200",
		}
		exp := r.produce(t, testWorkload(3000, 150, 91))
		w := r.worker(t)
		r.waitApplied(t, exp.Records, 3*time.Minute)
		// Every connection of the worker's role is encrypted (the server
		// would refuse a plain one; this checks the worker made some).
		var encrypted, plain int64
		require.NoError(t, su.QueryRow(ctx, `SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl)
			FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) WHERE a.usename = 'effectively_worker'`).Scan(&encrypted, &plain))
		require.Positive(t, encrypted)
		require.Zero(t, plain)
		w.signal(t, syscall.SIGTERM)
		require.Equal(t, 0, w.wait(t, time.Minute), "stderr:\n%s", tail(w.stderr.String(), 40))
		r.verify(t, exp)
		logs := w.stderr.String()
		require.NotContains(t, logs, "permission denied")
		require.NotContains(t, logs, "SQLSTATE 42501")
		require.NotContains(t, logs, "sslmode", "no TLS warning for a local server")
		require.NotContains(t, logs, workerPW)

		for _, args := range [][]string{{"dlq", "list"}, {"prune", "--yes"}, {"parked", "list"}, {"replay", "--topic", r.topic, "--from-start", "--execute"}} {
			code, stdout, stderr := runCmd(t, r.env, args...)
			require.Equal(t, 0, code, "%v as effectively_worker: %s\n%s", args, stdout, stderr)
		}
		// The rewound group re-reads everything as the worker's role: every
		// record a duplicate now, still one effect per event.
		require.Zero(t, r.applied(t))
		w = r.worker(t)
		r.waitApplied(t, exp.Records, 3*time.Minute)
		w.signal(t, syscall.SIGTERM)
		require.Equal(t, 0, w.wait(t, time.Minute), "stderr:\n%s", tail(w.stderr.String(), 40))
		r.verify(t, exp)

		// Claims generations are rotated and dropped by the worker's role,
		// which owns nothing: the DDL runs in the migration's functions.
		env := append(append([]string{}, r.env...), tinyRetention...)
		// The open generation must be a generation interval (retention / 2,
		// 1 s) old to rotate; on a fast machine all of the above takes less,
		// so it is made older than that (as the owner).
		_, err := owner.Exec(ctx, `UPDATE claim_generations SET opened_at = opened_at - interval '1 minute' WHERE opened_at IS NOT NULL AND closed_at IS NULL`)
		require.NoError(t, err)
		code, stdout, stderr := runCmd(t, env, "prune", "--yes")
		require.Equal(t, 0, code, "%s\n%s", stdout, stderr)
		require.Contains(t, stdout, "effectively_claims: opened generation 2")
		time.Sleep(2100 * time.Millisecond)
		code, stdout, stderr = runCmd(t, env, "prune", "--yes")
		require.Equal(t, 0, code, "%s\n%s", stdout, stderr)
		require.Contains(t, stdout, "effectively_claims: dropped generation 1 (effectively_claims_g1")
		require.Zero(t, r.db.Count(t, `SELECT count(*) FROM effectively_claims`))
	})

	t.Run("a later migration's table is the worker's too, with no DDL", func(t *testing.T) {
		_, err := owner.Exec(ctx, `CREATE TABLE later_migration (id serial PRIMARY KEY, note text NOT NULL)`)
		require.NoError(t, err)
		worker, err := pgx.Connect(ctx, workerURL)
		require.NoError(t, err)
		defer worker.Close(context.Background())
		for _, stmt := range []string{
			`INSERT INTO later_migration (note) VALUES ('a'), ('b')`, // serial: USAGE on its sequence
			`UPDATE later_migration SET note = 'c' WHERE id = 1`,
			`SELECT count(*) FROM later_migration`,
			`DELETE FROM later_migration WHERE id = 2`,
		} {
			_, err := worker.Exec(ctx, stmt)
			require.NoError(t, err, stmt)
		}
		for _, stmt := range []string{
			`TRUNCATE later_migration`,
			`DROP TABLE later_migration`,
			`ALTER TABLE effectively_claims ADD COLUMN x int`,
			`CREATE TABLE mine (id int)`,
			`CREATE TABLE public.mine (id int)`,
			`CREATE TEMP TABLE mine (id int)`,
			`CREATE INDEX ON effectively_claims (claimed_at)`,
		} {
			_, err := worker.Exec(ctx, stmt)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr, stmt)
			require.Equal(t, "42501", pgErr.Code, "%s: %v", stmt, err)
		}
	})

	t.Run("a CA that did not sign the server's certificate names sslrootcert", func(t *testing.T) {
		code, _, stderr := runCmd(t, []string{"EFFECTIVELY_POSTGRES_URL=" + pg.url("effectively_worker", workerPW, otherCA(t)),
			"EFFECTIVELY_KAFKA_BROKERS=" + strings.Join(kafkatest.Brokers(t), ","), "EFFECTIVELY_KAFKA_TOPICS=unused"}, "run")
		require.Equal(t, 1, code, stderr)
		require.Contains(t, stderr, "does not trust")
		require.Contains(t, stderr, "fix: set sslrootcert in postgres.url / EFFECTIVELY_POSTGRES_URL")
		require.Contains(t, stderr, "certificate signed by unknown authority")
		require.NotContains(t, stderr, workerPW)

		missing := filepath.Join(t.TempDir(), "no-such-ca.pem")
		code, _, stderr = runCmd(t, []string{"EFFECTIVELY_POSTGRES_URL=" + pg.url("effectively_worker", workerPW, missing)}, "migrate")
		require.Equal(t, 1, code, stderr)
		require.Contains(t, stderr, "postgres.url cannot be used")
		require.Contains(t, stderr, missing)
		require.NotContains(t, stderr, workerPW)
	})

	t.Run("no TLS against a TLS-only server names sslmode", func(t *testing.T) {
		url := fmt.Sprintf("postgres://effectively_worker:%s@127.0.0.1:%s/effectively?sslmode=disable", workerPW, pg.port)
		code, _, stderr := runCmd(t, []string{"EFFECTIVELY_POSTGRES_URL=" + url}, "migrate")
		require.Equal(t, 1, code, stderr)
		require.Contains(t, stderr, "accepts only TLS connections")
		require.Contains(t, stderr, "fix: add sslmode=verify-full&sslrootcert=")
	})
}

// tlsPostgres is a PostgreSQL instance of the test's own started by
// stack.sh with EFFECTIVELY_PG_TLS=1.
type tlsPostgres struct {
	port string
	dir  string // the instance folder: the unix socket, tls/
	ca   string // tls/ca.pem, the CA that signed the server's certificate
}

func startTLSPostgres(t *testing.T) tlsPostgres {
	t.Helper()
	port := strconv.Itoa(freePort(t))
	stackInstance(t, "pg", "pg-"+port, "EFFECTIVELY_PG_PORT="+port, "EFFECTIVELY_PG_TLS=1")
	stackDir := os.Getenv("EFFECTIVELY_STACK_DIR")
	if stackDir == "" {
		stackDir = "/var/tmp/effectively"
	}
	dir := filepath.Join(stackDir, "pg-"+port)
	return tlsPostgres{port: port, dir: dir, ca: filepath.Join(dir, "tls", "ca.pem")}
}

// socketDSN connects over the instance's unix socket (trust: the admin side).
func (p tlsPostgres) socketDSN(user string) string {
	return fmt.Sprintf("host=%s port=%s user=%s dbname=effectively", p.dir, p.port, user)
}

// url connects over TCP with sslmode=verify-full against ca.
func (p tlsPostgres) url(user, password, ca string) string {
	return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%s/effectively?sslmode=verify-full&sslrootcert=%s", user, password, p.port, ca)
}

// securityDocSQL reads the two ```sql blocks of docs/security.md's
// PostgreSQL section: the superuser's (roles, schema) and the owner's
// (grants), so the test runs exactly what the page prints.
func securityDocSQL(t *testing.T) (create, grants string) {
	t.Helper()
	b, err := os.ReadFile("../docs/security.md")
	require.NoError(t, err)
	doc := string(b)
	start := strings.Index(doc, "\n## PostgreSQL\n")
	require.GreaterOrEqual(t, start, 0, "docs/security.md has no '## PostgreSQL' section")
	section := doc[start+1:]
	if end := strings.Index(section[1:], "\n## "); end >= 0 {
		section = section[:end+1]
	}
	blocks := regexp.MustCompile("(?s)\n```sql\n(.*?)\n```").FindAllStringSubmatch(section, -1)
	require.Len(t, blocks, 2, "docs/security.md's PostgreSQL section should print two SQL blocks: the superuser's, then the owner's")
	create, grants = blocks[0][1], blocks[1][1]
	require.Contains(t, create, "CREATE ROLE effectively_worker")
	require.Contains(t, grants, "ALTER DEFAULT PRIVILEGES")
	return create, grants
}

// requireVerifiedTLS checks that pool's session is encrypted.
func requireVerifiedTLS(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	var ssl bool
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).Scan(&ssl))
	require.True(t, ssl)
}

func randomPassword(t *testing.T) string {
	t.Helper()
	b := make([]byte, 12)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return "pw" + hex.EncodeToString(b)
}
