package service

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// buildVersion is the app's Version or, without one, the VCS revision
// from the Go build information.
func buildVersion(version string) string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if len(rev) > 12 {
				rev = rev[:12]
			}
			if dirty {
				rev += "-dirty"
			}
			return "devel-" + rev
		}
	}
	return "devel"
}

func newVersionCmd(c *CLI) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:         "version",
		Short:       "Print the version",
		Args:        cobra.NoArgs,
		Annotations: map[string]string{"config": "none"},
		RunE: func(*cobra.Command, []string) error {
			if asJSON {
				return c.PrintJSON(struct {
					Build     string `json:"build"`
					Version   string `json:"version"`
					GoVersion string `json:"go_version"`
					OS        string `json:"os"`
					Arch      string `json:"arch"`
				}{c.app.name(), buildVersion(c.app.Version), runtime.Version(), runtime.GOOS, runtime.GOARCH})
			}
			_, err := fmt.Fprintf(c.stdout, "%s %s (%s, %s/%s)\n", c.app.name(), buildVersion(c.app.Version), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
