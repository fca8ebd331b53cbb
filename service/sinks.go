package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/internal/handling"
	"github.com/effectively-io/effectively/internal/sink"
	"github.com/effectively-io/effectively/schema"
)

// schemaSets are the build's migration sets (when cfg consumes one of the
// build's topics), then one per directory of postgres.migrations (a
// config-only sink's tables).
func (a *App) schemaSets(cfg config.Config) []schema.Set {
	var sets []schema.Set
	if a.handlersServe(cfg) {
		sets = append(sets, a.sets...)
	}
	for _, dir := range cfg.Postgres.Migrations {
		sets = append(sets, schema.Set{Name: setName(dir), FS: os.DirFS(dir)})
	}
	return sets
}

var notTableChar = regexp.MustCompile(`[^a-z0-9_]+`)

// maxSetName bounds a directory's set name, so that its version table
// (<name>_schema_version) stays a PostgreSQL identifier.
const maxSetName = 40

// setName names a directory's migration set (and so its version table)
// after the directory: examples/orders/migrations → orders_migrations.
func setName(dir string) string {
	clean := filepath.Clean(dir)
	name := filepath.Base(clean)
	if parent := filepath.Base(filepath.Dir(clean)); parent != "." && parent != "/" {
		name = parent + "_" + name
	}
	name = strings.Trim(notTableChar.ReplaceAllString(strings.ToLower(name), "_"), "_")
	if name == "" || (name[0] >= '0' && name[0] <= '9') {
		name = "m_" + name
	}
	if len(name) > maxSetName { // the version table adds _schema_version; PostgreSQL names end at 63 bytes
		sum := sha256.Sum256([]byte(clean))
		name = name[:maxSetName-9] + "_" + hex.EncodeToString(sum[:4])
	}
	return name
}

// registerSinks adds cfg's sinks to the build's registry, once per process
// (the registry is filled before the worker starts and only read after).
func (a *App) registerSinks(cfg config.Config) (*sink.Set, error) {
	a.sinksOnce.Do(func() {
		if len(cfg.Sinks) > 0 {
			a.sinks, a.sinksErr = sink.Register(a.registry(cfg), cfg.Sinks)
		}
	})
	return a.sinks, a.sinksErr
}

// checkTables registers the sinks and checks every table the build and its
// sinks write against the live database; the worker refuses to start when
// one does not fit, naming the sink or table, the column and the fix.
func (a *App) checkTables(ctx context.Context, cfg config.Config, pool *pgxpool.Pool) error {
	sinks, err := a.registerSinks(cfg)
	if err != nil {
		return fmt.Errorf("sinks: %w", err)
	}
	if sinks != nil {
		err = sinks.Check(ctx, pool, a.registry(cfg), func(s config.Sink) bool {
			for _, t := range cfg.Kafka.Topics {
				if (s.Topic == "" || t == s.Topic) && cfg.TopicSettings(t).Format == config.FormatDebezium {
					// A sink of every topic takes a Debezium topic's
					// events only by their types.
					return s.Topic != "" || slices.ContainsFunc(s.Types, debeziumType)
				}
			}
			return false
		})
	} else {
		err = handling.Of(a.registry(cfg)).CheckTables(ctx, pool)
	}
	if err != nil {
		return fmt.Errorf("the tables this build writes do not fit the database:\n%w\n(run `%s migrate` if the tables are missing)", err, a.name())
	}
	return nil
}

// debeziumType says whether an event type may be one format debezium
// makes: <schema>.<table>.<create|update|delete|read>, three names
// (com.example.invoice.update is not).
func debeziumType(typ string) bool {
	names := strings.Split(typ, ".")
	return len(names) == 3 && names[0] != "" && names[1] != "" && slices.Contains([]string{"create", "update", "delete", "read"}, names[2])
}
