package service

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/internal/redact"
	"github.com/effectively-io/effectively/internal/termsafe"
)

// CLI is what every command shares: the app, the loaded configuration and
// logger, and where output goes.
type CLI struct {
	app        *App
	configPath string
	cfg        config.Config
	log        *zap.Logger
	stdout     io.Writer
	stderr     io.Writer
	stdin      io.Reader
}

// WithPool runs fn with a small pool on postgres.url, for operator
// commands, after checking that the schema is migrated.
func (c *CLI) WithPool(cmd *cobra.Command, fn func(ctx context.Context, pool *pgxpool.Pool) error) error {
	ctx := cmd.Context()
	if err := c.app.checkSchema(ctx, c.cfg); err != nil {
		return err
	}
	pool, err := openPool(ctx, c.cfg.Postgres, 1, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	return fn(ctx, pool)
}

// PrintJSON writes v to stdout as indented JSON, for --json.
func (c *CLI) PrintJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Config is the loaded configuration.
func (c *CLI) Config() config.Config { return c.cfg }

// Logger is the process logger (on stderr).
func (c *CLI) Logger() *zap.Logger { return c.log }

// Stdout is where command output goes.
func (c *CLI) Stdout() io.Writer { return c.stdout }

// Stderr is where progress and logs go.
func (c *CLI) Stderr() io.Writer { return c.stderr }

func (a *App) rootCmd(stdout, stderr io.Writer) *cobra.Command {
	c := &CLI{app: a, stdout: stdout, stderr: stderr, stdin: os.Stdin}
	root := &cobra.Command{
		Use:   a.name(),
		Short: "Exactly-once effects in PostgreSQL from at-least-once Kafka delivery",
		Long: a.name() + ` runs on effectively, a Kafka consumer-group worker that turns at-least-once delivery
into exactly-once effects in PostgreSQL: duplicates are claimed away by a
database constraint in the same transaction as the effect, stale updates are
dropped by version gates, and the Kafka offset is committed only after that
transaction commits.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Annotations["config"] == "none" {
				return nil
			}
			envWarnings := config.EnvWarnings(os.Environ(), a.extension())
			cfg, err := config.Load(c.configPath, cmd.Flags(), a.extension())
			if err != nil {
				// No logger without a valid log.* yet; a misspelt variable
				// often explains the error (a key left at its default).
				for _, w := range envWarnings {
					// A variable's name is the environment's text, not ours.
					fmt.Fprintf(stderr, "warning: %s\n", termsafe.Escape(w.String()))
				}
				return err
			}
			c.cfg = cfg
			// Before anything is printed: every log line, error, row and
			// page hides the credentials of the URLs in it by these rules.
			redact.SetDefault(cfg.RedactPolicy())
			log, err := newLogger(cfg.Log, stderr)
			if err != nil {
				return err
			}
			c.log = log
			logWarnings(log, append(envWarnings, cfg.Warnings()...))
			return nil
		},
		PersistentPostRun: func(*cobra.Command, []string) {
			if c.log != nil {
				_ = c.log.Sync()
			}
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageError{err: err}
	})
	root.PersistentFlags().StringVar(&c.configPath, "config", "", "YAML configuration file (flags and EFFECTIVELY_* environment variables override it)")
	config.BindFlags(root.PersistentFlags(), a.extension())

	root.AddCommand(
		newRunCmd(c),
		newProduceCmd(c),
		newParkedCmd(c),
		newDLQCmd(c),
		newOutboxCmd(c),
		newMigrateCmd(c),
		newPruneCmd(c),
		newAuditCmd(c),
		newReplayCmd(c),
		newStatusCmd(c),
		newConsoleCmd(c),
		newActionsCmd(c),
		newConfigCmd(c),
		newVersionCmd(c),
		newGenDocsCmd(c),
	)
	for _, f := range a.commands {
		root.AddCommand(f(c))
	}
	nameCommands(root, a.name())
	usageArgs(root)
	return root
}

// logWarnings logs the configuration's warnings, once per command, before
// the command does anything.
func logWarnings(log *zap.Logger, ws []config.Warning) {
	for _, w := range ws {
		log.Warn(w.Setting+" "+w.Problem, zap.String("setting", w.Setting), zap.String("fix", w.Fix))
	}
}

// nameCommands writes the build's own binary name into the help texts'
// command lines ('effectively run' is 'orders run' in a build called
// orders).
func nameCommands(cmd *cobra.Command, name string) {
	if name != "effectively" {
		r := strings.NewReplacer("'effectively ", "'"+name+" ", "`effectively ", "`"+name+" ")
		cmd.Short, cmd.Long, cmd.Example = r.Replace(cmd.Short), r.Replace(cmd.Long), r.Replace(cmd.Example)
	}
	for _, sub := range cmd.Commands() {
		nameCommands(sub, name)
	}
}
