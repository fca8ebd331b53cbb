package service

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/effectively-io/effectively/schema"
)

func newMigrateCmd(c *CLI) *cobra.Command {
	var timeout time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply pending schema migrations (idempotent, safe from several replicas at once)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			warnPostgresTLS(c.log, c.cfg.Postgres.URL)
			if err := checkPostgres(ctx, c.cfg.Postgres.URL); err != nil {
				return err
			}
			res, err := schema.Migrate(ctx, c.cfg.Postgres.URL, c.log.Named("migrate"), c.app.schemaSets(c.cfg)...)
			if err != nil {
				return explainMigratePrivilege(c.cfg.Postgres.URL, err)
			}
			if asJSON {
				return c.PrintJSON(res)
			}
			for _, s := range res.Sets {
				if len(s.Applied) == 0 {
					fmt.Fprintf(c.stdout, "schema %s: %s migrations up to date at version %d\n", res.Schema, s.Name, s.Version)
				} else {
					fmt.Fprintf(c.stdout, "schema %s: %s migrations at version %d (applied %v)\n", res.Schema, s.Name, s.Version, s.Applied)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "give up after this long (waiting for another replica's migration included)")
	return cmd
}
