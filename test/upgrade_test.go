package test

import (
	"context"
	"database/sql"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/internal/cetest"
	"github.com/effectively-io/effectively/internal/kafkatest"
	"github.com/effectively-io/effectively/internal/pgtest"
)

// A database an existing deployment has — migrated by the release before
// the public API (its migrations pinned in testdata, versions in goose's
// default table, the reference domain's tables made by the engine's first
// migration) and filled by a worker — goes through `migrate` and `run` of
// this build with nothing lost: the effects' digest is unchanged, the
// engine's version history is carried over, events re-produced at new
// offsets are duplicates, and an event parked before the upgrade is
// released by its prerequisite after it.
func TestUpgradeFromTheReleaseBeforeThePublicAPI(t *testing.T) {
	t.Parallel()
	r := newRig(t, 4)
	exp := r.produce(t, testWorkload(3000, 200, 41))
	// One ledger entry whose account never arrives (parked), and one poison
	// record (a dead letter).
	waiting := cetest.Ledger(r.topic, "upgrade-l1", "ledger.credited", "acct-upgrade", 500, "EUR")
	poison := &kgo.Record{Topic: r.topic, Key: []byte("acct-poison"), Value: []byte("{not json")}
	produceRecords(t, r.topic, waiting, poison)
	r.fullPass(t, exp.Records+2)
	before := digest(t, r)
	claims := r.db.Count(t, `SELECT count(*) FROM effectively_claims`)
	require.Equal(t, int64(1), r.db.Count(t, `SELECT count(*) FROM parked_events WHERE state = 'parked'`))
	require.Equal(t, int64(1), r.db.Count(t, `SELECT count(*) FROM dead_letters`))

	// The same rows in a schema the previous release migrated.
	old := pgtest.NewEmpty(t)
	migrateLikeTheRelease(t, old)
	copyRows(t, r.db, old)
	up := *r
	up.db = old
	up.env = withEnv(r.env, "EFFECTIVELY_POSTGRES_URL="+old.URL)
	require.Equal(t, claims, old.Count(t, `SELECT count(*) FROM processed_events`), "the copy holds the same claims")

	code, stdout, stderr := runCmd(t, up.env, "migrate")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "effectively migrations at version 19 (applied [10 11 12 13 14 15 16 17 18 19])", "the engine's versions are carried over: only what came after the release is applied")
	require.Contains(t, stdout, "accounts migrations at version 2 (applied [1 2])", "the reference domain adopts its tables, and account_balances becomes a running total")
	require.Equal(t,
		old.Count(t, `SELECT count(*) FROM goose_db_version WHERE version_id > 0`)+10,
		old.Count(t, `SELECT count(*) FROM effectively_schema_version WHERE version_id > 0`),
		"every version of the previous history is carried over, and the ten after it applied")
	require.Equal(t, before, digest(t, &up), "migrate changes no effect (the claims are generation 0's)")
	code, stdout, stderr = runCmd(t, up.env, "migrate")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, stdout, "applied", "a second migrate is a no-op")

	// Everything again, at new offsets: duplicates, no new effect.
	up.produce(t, testWorkload(3000, 200, 41))
	up.fullPass(t, 2*exp.Records+2)
	require.Equal(t, before, digest(t, &up), "re-produced events are duplicates")
	require.Equal(t, claims, old.Count(t, `SELECT count(*) FROM effectively_claims`))

	// The account the parked entry waits for arrives: the entry applies.
	produceRecords(t, r.topic, cetest.Account(r.topic, "upgrade-a1", "account.opened", "acct-upgrade", 1, "Upgrade"))
	w := up.startedWorker(t)
	waitUntil(t, "the parked ledger entry released", 2*time.Minute, func(ctx context.Context) bool {
		var n int64
		err := old.Pool.QueryRow(ctx, `SELECT count(*) FROM ledger_entries WHERE account_id = 'acct-upgrade'`).Scan(&n)
		return err == nil && n == 1
	})
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
	require.Equal(t, int64(0), old.Count(t, `SELECT count(*) FROM parked_events WHERE state = 'parked'`))
	require.Equal(t, int64(1), old.Count(t, `SELECT count(*) FROM dead_letters`), "the dead letter is still there, once")
}

// migrateLikeTheRelease applies the pinned migrations of the release before
// the public API the way it did: goose's default version table.
func migrateLikeTheRelease(t *testing.T, db pgtest.DB) {
	t.Helper()
	gooseUp(t, db, os.DirFS("testdata/release-fed4c2d/migrations"), "", 0)
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) WHERE to_regclass('goose_db_version') IS NOT NULL AND to_regclass('effectively_schema_version') IS NULL`))
}

// gooseUp applies the migrations in fsys to db with goose as a release
// did: table is the version table ("": goose's default), upTo the last
// version (0: all).
func gooseUp(t *testing.T, db pgtest.DB, fsys fs.FS, table string, upTo int64) {
	t.Helper()
	p := gooseProvider(t, db, fsys, table)
	var err error
	if upTo > 0 {
		_, err = p.UpTo(context.Background(), upTo)
	} else {
		_, err = p.Up(context.Background())
	}
	require.NoError(t, err)
}

// gooseProvider is a goose provider of the migrations in fsys on db, with
// table as its version table ("": goose's default), closed with the test.
func gooseProvider(t *testing.T, db pgtest.DB, fsys fs.FS, table string) *goose.Provider {
	t.Helper()
	cfg, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	sqlDB := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { sqlDB.Close() })
	opts := []goose.ProviderOption{goose.WithDisableGlobalRegistry(true)}
	if table != "" {
		opts = append(opts, goose.WithTableName(table))
	}
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, fsys, opts...)
	require.NoError(t, err)
	return p
}

// copyRows copies every row of every table of from into the same table of
// to (both schemas of one database), identity values included, and moves
// to's identity sequences past them.
func copyRows(t *testing.T, from, to pgtest.DB) {
	t.Helper()
	ctx := context.Background()
	rows, err := to.Pool.Query(ctx, `SELECT table_name FROM information_schema.tables
WHERE table_schema = $1 AND table_type = 'BASE TABLE' AND table_name <> 'goose_db_version' ORDER BY table_name`, to.Schema)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	// Parents before children (ledger_entries references accounts).
	for i, name := range tables {
		if name == "accounts" {
			tables = append([]string{name}, append(tables[:i:i], tables[i+1:]...)...)
			break
		}
	}
	for _, table := range tables {
		rows, err := to.Pool.Query(ctx, `SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position`, to.Schema, table)
		require.NoError(t, err)
		cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		quoted := make([]string, len(cols))
		for i, c := range cols {
			quoted[i] = pgx.Identifier{c}.Sanitize()
		}
		list := strings.Join(quoted, ", ")
		src := table
		if table == "processed_events" {
			src = "effectively_claims" // every claims generation of this build
		}
		_, err = to.Pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{to.Schema, table}.Sanitize()+` (`+list+`) OVERRIDING SYSTEM VALUE SELECT `+list+` FROM `+pgx.Identifier{from.Schema, src}.Sanitize())
		require.NoError(t, err, "copying %s", table)
		for _, c := range cols {
			var seq sql.NullString
			require.NoError(t, to.Pool.QueryRow(ctx, `SELECT pg_get_serial_sequence($1, $2)`, pgx.Identifier{to.Schema, table}.Sanitize(), c).Scan(&seq))
			if seq.Valid {
				_, err := to.Pool.Exec(ctx, `SELECT setval($1, coalesce((SELECT max(`+pgx.Identifier{c}.Sanitize()+`) FROM `+pgx.Identifier{to.Schema, table}.Sanitize()+`), 0) + 1, false)`, seq.String)
				require.NoError(t, err)
			}
		}
	}
}

// produceRecords sends recs to topic and waits for their acknowledgement.
func produceRecords(t *testing.T, topic string, recs ...*kgo.Record) {
	t.Helper()
	cl := kafkatest.Producer(t, kgo.DefaultProduceTopic(topic))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
}

// withEnv returns env with the variables in set replacing those of the same
// name.
func withEnv(env []string, set ...string) []string {
	out := make([]string, 0, len(env)+len(set))
	for _, e := range env {
		name, _, _ := strings.Cut(e, "=")
		replaced := false
		for _, s := range set {
			if strings.HasPrefix(s, name+"=") {
				replaced = true
			}
		}
		if !replaced {
			out = append(out, e)
		}
	}
	return append(out, set...)
}
