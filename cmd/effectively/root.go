package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/config"
)

// usageError marks errors in how the command was called (exit code 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// exitCode maps an error to the process exit code: 2 for usage and
// configuration errors, 1 for everything else.
func exitCode(err error) int {
	var ue usageError
	var fe *config.FieldError
	if errors.As(err, &ue) || errors.As(err, &fe) {
		return 2
	}
	return 1
}

// run builds the command tree and executes args. Every subcommand loads its
// configuration the same way: flags > environment > --config file > defaults.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}

// cli is what every subcommand shares: the loaded configuration and logger.
type cli struct {
	configPath string
	cfg        config.Config
	log        *zap.Logger
	stdout     io.Writer
	stderr     io.Writer
}

// withPool runs fn with a small pool on postgres.url, for operator commands.
func (c *cli) withPool(cmd *cobra.Command, fn func(ctx context.Context, pool *pgxpool.Pool) error) error {
	ctx := cmd.Context()
	if err := checkSchema(ctx, c.cfg.Postgres.URL); err != nil {
		return err
	}
	pool, err := openPool(ctx, c.cfg.Postgres, 1)
	if err != nil {
		return err
	}
	defer pool.Close()
	return fn(ctx, pool)
}

// printJSON writes v as indented JSON, for --json.
func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	c := &cli{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "effectively",
		Short: "Exactly-once effects in PostgreSQL from at-least-once Kafka delivery",
		Long: `effectively is a Kafka consumer-group worker that turns at-least-once delivery
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
			cfg, err := config.Load(c.configPath, cmd.Flags())
			if err != nil {
				return err
			}
			c.cfg = cfg
			log, err := newLogger(cfg.Log, stderr)
			if err != nil {
				return err
			}
			c.log = log
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
	config.BindFlags(root.PersistentFlags())

	root.AddCommand(
		newRunCmd(c),
		newProduceCmd(c),
		newVerifyCmd(c),
		newParkedCmd(c),
		newDLQCmd(c),
		newOutboxCmd(c),
		newMigrateCmd(c),
		newPruneCmd(c),
		newAuditCmd(c),
		newReplayCmd(c),
		newConfigCmd(c),
		newVersionCmd(c),
	)
	return root
}
