// Package pgtest gives each test its own freshly migrated PostgreSQL schema
// (river's riverdbtest pattern), so tests run in parallel on one server
// without seeing each other's rows.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/stacktest"
	"github.com/effectively-io/effectively/schema"
)

// DB is a test's own schema.
type DB struct {
	// Schema is the schema's name.
	Schema string
	// URL connects with search_path set to Schema; hand it to the worker.
	URL string
	// Pool is a small pool on URL for the test's own queries.
	Pool *pgxpool.Pool
}

// New creates a uniquely named schema, applies the engine's migrations and
// then sets' to it, and drops it when the test ends.
func New(t stacktest.TB, sets ...schema.Set) DB {
	t.Helper()
	return NewOn(t, stacktest.PostgresURL(t), sets...)
}

// NewOn is New on the server at base (a test's own instance).
func NewOn(t stacktest.TB, base string, sets ...schema.Set) DB {
	t.Helper()
	db := newEmptyOn(t, base)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := schema.Migrate(ctx, db.URL, zap.NewNop(), sets...); err != nil {
		t.Fatalf("migrating test schema %s: %v", db.Schema, err)
	}
	return db
}

// NewEmpty creates a uniquely named, empty schema (for tests of the
// migrations themselves) and drops it when the test ends.
func NewEmpty(t stacktest.TB) DB {
	t.Helper()
	return newEmptyOn(t, stacktest.PostgresURL(t))
}

func newEmptyOn(t stacktest.TB, base string) DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	name := "t_" + strings.ToLower(sanitize(t.Name())) + "_" + randomHex(4)
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connecting to test postgres (%s): %v", stacktest.PostgresURLEnv, err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("creating schema %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("dropping schema %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("dropping schema %s: %v", name, err)
		}
	})

	u := WithSearchPath(t, base, name)
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		t.Fatalf("parsing %s: %v", u, err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("opening pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return DB{Schema: name, URL: u, Pool: pool}
}

// WithSearchPath returns base with its search_path set to schemaName; every
// connection the worker opens from it then works inside that schema.
func WithSearchPath(t stacktest.TB, base, schemaName string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parsing postgres url: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schemaName)
	u.RawQuery = q.Encode()
	return u.String()
}

// Count runs a count(*) query (or any query returning one integer).
func (db DB) Count(t testing.TB, query string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.Pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 40 {
			break
		}
	}
	return b.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// OpenGeneration is the SQL of the open claims generation, for tests that
// insert claims by hand: INSERT INTO effectively_claims (…, generation)
// VALUES (…, (OpenGeneration)).
const OpenGeneration = `(SELECT generation FROM claim_generations WHERE opened_at IS NOT NULL AND closed_at IS NULL)`

// RotateClaims closes the open claims generation and opens the next, as
// the pruner does every dedupe.generation_interval, and returns the one
// it closed.
func (db DB) RotateClaims(t testing.TB) int32 {
	t.Helper()
	ctx := context.Background()
	closed := int32(db.Count(t, `SELECT generation FROM claim_generations WHERE opened_at IS NOT NULL AND closed_at IS NULL`))
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatalf("rotating the claims generation: %v", err)
	}
	defer conn.Release()
	pass, err := dedupe.MaintainGenerations(ctx, conn.Conn(), time.Now(), dedupe.GenerationPolicy{Interval: time.Nanosecond, Retention: 100 * 365 * 24 * time.Hour}, false)
	if err != nil || pass.Opened == nil {
		t.Fatalf("rotating the claims generation: %+v, %v", pass, err)
	}
	return closed
}

// AgeClaims makes every claim look age older: it closes the open claims
// generation (RotateClaims) and moves the open and close times of every
// closed generation back by age, so a pruner with a retention below age
// drops them.
func (db DB) AgeClaims(t testing.TB, age time.Duration) {
	t.Helper()
	db.RotateClaims(t)
	db.AgeClosedClaims(t, age)
}

// AgeClosedClaims moves the open and close times of every closed claims
// generation back by age.
func (db DB) AgeClosedClaims(t testing.TB, age time.Duration) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), `UPDATE claim_generations SET opened_at = opened_at - $1::interval, closed_at = closed_at - $1::interval WHERE closed_at IS NOT NULL`, age); err != nil {
		t.Fatalf("ageing the claims generations: %v", err)
	}
}
