package service

import (
	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
)

func newConfigCmd(c *CLI) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
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
			if asJSON {
				// The same keys as the YAML (the configuration keys), as JSON.
				var v any
				if err := yaml.Unmarshal(out, &v); err != nil {
					return err
				}
				return c.PrintJSON(v)
			}
			_, err = c.stdout.Write(out)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (the same keys)")
	return cmd
}
