package test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/internal/pgtest"
)

// domainWords are the reference domain's words. The engine names no domain:
// a team's events and tables are its own, and the reference domain lives in
// examples/accounts like any team's would.
var domainWords = regexp.MustCompile(`(?i)\b(accounts?|ledgers?|crm|mails?)\b`)

// No engine package — every package of the module other than examples/…,
// cmd/…, test/… and internal/cetest (the tests' builder of the reference
// domain's records) — mentions the reference domain, in code, comments,
// tests or migrations.
func TestTheEngineNamesNoDomain(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", "github.com/effectively-io/effectively/...").Output()
	require.NoError(t, err)
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	checked := 0
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, dir)
		require.NoError(t, err)
		if rel == "." || strings.HasPrefix(rel, "examples") || strings.HasPrefix(rel, "cmd") || strings.HasPrefix(rel, "test") || rel == filepath.Join("internal", "cetest") {
			continue
		}
		err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && path != dir && d.Name() != "migrations" {
				return filepath.SkipDir // another package, or test data
			}
			if ext := filepath.Ext(path); ext != ".go" && ext != ".sql" {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			checked++
			for i, line := range strings.Split(string(b), "\n") {
				if w := domainWords.FindString(line); w != "" {
					t.Errorf("%s:%d names the reference domain (%q): %s", path, i+1, w, strings.TrimSpace(line))
				}
			}
			return nil
		})
		require.NoError(t, err)
	}
	require.Greater(t, checked, 50, "the engine's files were found")
}

// The engine's migrations alone create only the engine's tables.
func TestTheEngineMigrationsCreateNoDomainTables(t *testing.T) {
	t.Parallel()
	require.Equal(t, engineTables, tablesOf(t, pgtest.New(t)))
}

// engineTables are the tables the engine's migrations create: the claims
// (the partitioned table, the open generation 1 and the next, 2; generation
// 0, the empty processed_events, is dropped) and the rest, sorted.
var engineTables = []string{"claim_generation_offsets", "claim_generations", "consumer_offsets", "dead_letter_relay_cursors", "dead_letters", "effectively_claims", "effectively_claims_g1", "effectively_claims_g2",
	"effectively_schema_version", "effectively_tombstones", "operator_actions",
	"outbox", "parked_events", "prune_watermarks", "pruned_offsets", "topic_partitions", "topic_strategies"}

// tablesOf lists the tables (and views) of a schema, sorted.
func tablesOf(t *testing.T, db pgtest.DB) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(),
		`SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1`, db.Schema)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

// The reference build (the stock binary) migrating a configuration that
// consumes none of its topics — the orders example's config-only sinks —
// creates the engine's tables and the sinks' alone: no table of the
// reference domain.
func TestSinksOnlyMigrateCreatesNoReferenceTables(t *testing.T) {
	t.Parallel()
	migrations, err := filepath.Abs(filepath.Join(exampleDir, "migrations"))
	require.NoError(t, err)
	r := newExampleRig(t, 1, migrations) // runs migrate with the example's configuration
	want := append(slices.Clone(engineTables), "order_events", "orders", "orders_migrations_schema_version")
	slices.Sort(want)
	require.Equal(t, want, tablesOf(t, r.db))
}
