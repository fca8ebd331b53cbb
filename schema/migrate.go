package schema

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"go.uber.org/zap"
)

//go:embed migrations/*.sql
var embedded embed.FS

// Migrations returns the embedded migration files.
func Migrations() fs.FS {
	sub, err := fs.Sub(embedded, "migrations")
	if err != nil {
		panic(err) // the embed pattern guarantees the folder exists
	}
	return sub
}

// Result reports what Migrate did.
type Result struct {
	// Schema is the PostgreSQL schema migrated (the first entry of the
	// connection's search_path).
	Schema string
	// Applied lists the versions this call applied; empty when another
	// replica had already applied them.
	Applied []int64
	// Version is the schema version after the call.
	Version int64
}

// Migrate applies every pending migration to the database at url. It is
// idempotent and safe to run from several processes at once: goose holds a
// session advisory lock, keyed by the target schema, while it works.
func Migrate(ctx context.Context, url string, logger *zap.Logger) (Result, error) {
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

	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockID(lockID(schemaName.String)),
		// Probe every second for up to 5 minutes: replicas starting together
		// wait for the first one instead of failing.
		lock.WithLockTimeout(1, 300),
	)
	if err != nil {
		return Result{}, fmt.Errorf("creating the migration lock: %w", err)
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, Migrations(),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return Result{}, fmt.Errorf("loading migrations: %w", err)
	}
	results, err := provider.Up(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("applying migrations to schema %q: %w", schemaName.String, err)
	}
	res := Result{Schema: schemaName.String}
	for _, r := range results {
		res.Applied = append(res.Applied, r.Source.Version)
		logger.Info("migration applied", zap.String("schema", res.Schema),
			zap.Int64("version", r.Source.Version), zap.Duration("duration", r.Duration))
	}
	if res.Version, err = provider.GetDBVersion(ctx); err != nil {
		return Result{}, fmt.Errorf("reading the schema version: %w", err)
	}
	return res, nil
}

// lockID derives the advisory lock ID from the schema name, so concurrent
// migrations of one schema serialise while separate schemas do not wait for
// each other.
func lockID(schemaName string) int64 {
	h := fnv.New64a()
	h.Write([]byte("effectively/schema/" + schemaName))
	return int64(h.Sum64() >> 1)
}

// Check fails when the database's schema is behind the binary's migrations,
// naming the fix.
func Check(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) error {
	want, err := latestVersion()
	if err != nil {
		return err
	}
	var have int64
	err = db.QueryRow(ctx, `SELECT coalesce(max(version_id), 0) FROM goose_db_version WHERE is_applied`).Scan(&have)
	if err != nil {
		return fmt.Errorf("the database schema is not migrated (%v); fix: run `effectively migrate` or start with `effectively run --migrate`", err)
	}
	if have < want {
		return fmt.Errorf("the database schema is at version %d, this binary needs %d; fix: run `effectively migrate` or start with `effectively run --migrate`", have, want)
	}
	return nil
}

func latestVersion() (int64, error) {
	entries, err := fs.ReadDir(Migrations(), ".")
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
