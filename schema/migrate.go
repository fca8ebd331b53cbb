package schema

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/internal/dedupe"
)

//go:embed migrations/*.sql
var embedded embed.FS

// VersionTable is where the engine's migrations record their versions. It
// is not goose's default (goose_db_version), so a team that runs goose for
// its own tables in the same schema keeps its history apart.
const VersionTable = "effectively_schema_version"

// legacyVersionTable is where releases before the public API recorded the
// engine's versions; Migrate carries it over once.
const legacyVersionTable = "goose_db_version"

// Migrations returns the engine's embedded migration files.
func Migrations() fs.FS {
	sub, err := fs.Sub(embedded, "migrations")
	if err != nil {
		panic(err) // the embed pattern guarantees the folder exists
	}
	return sub
}

// Set is a team's migrations: numbered goose SQL files (00001_orders.sql)
// applied after the engine's, with a version table of their own.
type Set struct {
	// Name names the set in logs and errors ("orders").
	Name string
	// Table is the set's version table; empty means "<Name>_schema_version".
	// It must differ from every other set's and from the engine's.
	Table string
	// FS holds the migration files at its root.
	FS fs.FS
}

var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// withDefaults fills in the version table.
func withDefaults(sets []Set) []Set {
	out := make([]Set, len(sets))
	for i, s := range sets {
		if s.Table == "" {
			s.Table = s.Name + "_schema_version"
		}
		out[i] = s
	}
	return out
}

func (s Set) validate() error {
	if s.Name == "" || s.FS == nil {
		return errors.New("a migration set needs a Name and an FS")
	}
	if !tableName.MatchString(s.Table) || s.Table == VersionTable || s.Table == legacyVersionTable {
		return fmt.Errorf("migration set %s: version table %q must be a lowercase identifier other than %s and %s", s.Name, s.Table, VersionTable, legacyVersionTable)
	}
	return nil
}

// validateSets checks each set, and that no two share a version table:
// the second's migrations would count as applied by the first's.
func validateSets(sets []Set) error {
	seen := map[string]string{}
	for _, s := range sets {
		if err := s.validate(); err != nil {
			return err
		}
		if other, dup := seen[s.Table]; dup {
			return fmt.Errorf("migration sets %s and %s share the version table %s: give one of them another name (a directory of postgres.migrations is named after its parent and itself)", other, s.Name, s.Table)
		}
		seen[s.Table] = s.Name
	}
	return nil
}

// SetResult reports what Migrate did to one set.
type SetResult struct {
	// Name is the set's name; "effectively" for the engine's.
	Name string `json:"name"`
	// Applied lists the versions this call applied; empty when another
	// replica had already applied them.
	Applied []int64 `json:"applied"`
	// Version is the set's version after the call.
	Version int64 `json:"version"`
}

// Result reports what Migrate did.
type Result struct {
	// Schema is the PostgreSQL schema migrated (the first entry of the
	// connection's search_path).
	Schema string `json:"schema"`
	// Sets are the engine's migrations, then each team set, in order.
	Sets []SetResult `json:"sets"`
}

// Migrate applies every pending migration to the database at url: the
// engine's, then each set's in order. It is idempotent and safe to run from
// several processes at once: goose holds a session advisory lock, keyed by
// the target schema and the set, while it works.
func Migrate(ctx context.Context, url string, logger *zap.Logger, sets ...Set) (Result, error) {
	sets = withDefaults(sets)
	if err := validateSets(sets); err != nil {
		return Result{}, err
	}
	connCfg, err := pgx.ParseConfig(url)
	if err != nil {
		return Result{}, fmt.Errorf("parsing postgres.url: %w", err)
	}
	db := stdlib.OpenDB(*connCfg)
	defer db.Close()
	db.SetMaxOpenConns(2)

	var schemaName sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT current_schema()").Scan(&schemaName); err != nil {
		return Result{}, fmt.Errorf("connecting to postgres at %s:%d (postgres.url): %w", connCfg.Host, connCfg.Port, err)
	}
	if !schemaName.Valid {
		return Result{}, errors.New("the connection's search_path names no existing schema; create the schema first or fix search_path in postgres.url")
	}
	res := Result{Schema: schemaName.String}
	all := append([]Set{{Name: "effectively", Table: VersionTable, FS: Migrations()}}, sets...)
	for i, s := range all {
		if i == 0 {
			if err := adoptLegacy(ctx, db, schemaName.String); err != nil {
				return Result{}, err
			}
		}
		sr, err := migrateSet(ctx, db, schemaName.String, s, logger)
		if err != nil {
			return Result{}, err
		}
		res.Sets = append(res.Sets, sr)
		if i == 0 {
			if err := prepareGenerations(ctx, connCfg); err != nil {
				return Result{}, err
			}
		}
	}
	return res, nil
}

// prepareGenerations readies the claims generations after the engine's
// migrations (dedupe.PrepareGenerations).
func prepareGenerations(ctx context.Context, cfg *pgx.ConnConfig) error {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connecting to prepare the claims generations: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := dedupe.PrepareGenerations(ctx, conn); err != nil {
		return fmt.Errorf("preparing the claims generations: %w", err)
	}
	return nil
}

func migrateSet(ctx context.Context, db *sql.DB, schemaName string, s Set, logger *zap.Logger) (SetResult, error) {
	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockID(lockID(schemaName, s.Table)),
		// Probe every second for up to 5 minutes: replicas starting together
		// wait for the first one instead of failing.
		lock.WithLockTimeout(1, 300),
	)
	if err != nil {
		return SetResult{}, fmt.Errorf("creating the migration lock: %w", err)
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, s.FS,
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
		goose.WithTableName(s.Table),
	)
	if err != nil {
		return SetResult{}, fmt.Errorf("loading the %s migrations: %w", s.Name, err)
	}
	results, err := provider.Up(ctx)
	if err != nil {
		return SetResult{}, fmt.Errorf("applying the %s migrations to schema %q: %w", s.Name, schemaName, err)
	}
	sr := SetResult{Name: s.Name}
	for _, r := range results {
		sr.Applied = append(sr.Applied, r.Source.Version)
		logger.Info("migration applied", zap.String("schema", schemaName), zap.String("set", s.Name),
			zap.Int64("version", r.Source.Version), zap.Duration("duration", r.Duration))
	}
	if sr.Version, err = provider.GetDBVersion(ctx); err != nil {
		return SetResult{}, fmt.Errorf("reading the %s schema version: %w", s.Name, err)
	}
	return sr, nil
}

// adoptLegacy carries a database migrated by a release before the public
// API over: that release recorded the engine's versions in goose's default
// table. Under the engine's migration lock, and only when the engine's own
// table does not exist yet, the rows are copied into it. The old table is
// left as it was, so the previous binary still starts if rolled back.
func adoptLegacy(ctx context.Context, db *sql.DB, schemaName string) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	// The transaction-level lock conflicts with goose's session-level lock
	// of the same ID: a concurrent migrator waits for this, and this for it.
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, lockID(schemaName, VersionTable)); err != nil {
		return fmt.Errorf("locking the schema for migration: %w", err)
	}
	var hasNew, hasLegacy, hasClaims bool
	err = tx.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL, to_regclass('processed_events') IS NOT NULL`,
		VersionTable, legacyVersionTable).Scan(&hasNew, &hasLegacy, &hasClaims)
	if err != nil {
		return fmt.Errorf("looking for a previous release's schema: %w", err)
	}
	if hasNew || !hasLegacy || !hasClaims {
		return tx.Commit()
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE `+VersionTable+` (LIKE `+legacyVersionTable+` INCLUDING ALL)`); err != nil {
		return fmt.Errorf("creating %s: %w", VersionTable, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+VersionTable+` (version_id, is_applied, tstamp)
SELECT version_id, is_applied, tstamp FROM `+legacyVersionTable+` ORDER BY id`); err != nil {
		return fmt.Errorf("carrying the engine's versions over from %s: %w", legacyVersionTable, err)
	}
	return tx.Commit()
}

// lockID derives the advisory lock ID from the schema and version table,
// so concurrent migrations of one set in one schema serialise while other
// schemas and sets do not wait for each other.
func lockID(schemaName, table string) int64 {
	h := fnv.New64a()
	h.Write([]byte("effectively/schema/" + schemaName + "/" + table))
	return int64(h.Sum64() >> 1)
}

// Check fails when the database's schema is behind the binary's migrations
// (the engine's or a set's), naming the fix.
func Check(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, sets ...Set) error {
	all := append([]Set{{Name: "effectively", Table: VersionTable, FS: Migrations()}}, withDefaults(sets)...)
	for _, s := range all {
		want, err := latestVersion(s.FS)
		if err != nil {
			return err
		}
		var have int64
		err = db.QueryRow(ctx, `SELECT coalesce(max(version_id), 0) FROM `+pgx.Identifier{s.Table}.Sanitize()+` WHERE is_applied`).Scan(&have)
		if err != nil {
			return &NotMigratedError{Set: s.Name, Err: err}
		}
		if have < want {
			return &NotMigratedError{Set: s.Name, Have: have, Want: want}
		}
	}
	return nil
}

func latestVersion(fsys fs.FS) (int64, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return 0, err
	}
	var latest int64
	for _, e := range entries {
		var v int64
		if _, err := fmt.Sscanf(e.Name(), "%d_", &v); err == nil && v > latest {
			latest = v
		}
	}
	return latest, nil
}

// NotMigratedError is the database schema behind the binary's migrations.
type NotMigratedError struct {
	// Set names the migrations that are behind ("effectively" for the
	// engine's).
	Set string
	// Have and Want are the set's versions in the database and in the
	// binary; Err is set instead when its version table cannot be read.
	Have, Want int64
	Err        error
}

func (e *NotMigratedError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("the database schema is not migrated (%s: %v)", e.Set, e.Err)
	}
	return fmt.Sprintf("the %s migrations are at version %d, this binary needs %d", e.Set, e.Have, e.Want)
}

func (e *NotMigratedError) Unwrap() error { return e.Err }
