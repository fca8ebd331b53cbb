package service

import (
	"github.com/spf13/cobra"
)

func newConfigCmd(c *CLI) *cobra.Command {
	return &cobra.Command{
		Use:   "config",
		Short: "Print the effective configuration (secrets redacted)",
		Long: `Print the configuration the other commands would use, after flags,
EFFECTIVELY_* environment variables, the --config file and the defaults are
merged and validated. Passwords are redacted.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			out, err := c.cfg.Redacted().Dump()
			if err != nil {
				return err
			}
			_, err = c.stdout.Write(out)
			return err
		},
	}
}
