package test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/internal/crashpoint"
)

// The release binary (make build) has no crash-point hook: it was built
// without the crashpoint tag, and nothing in it knows EFFECTIVELY_CRASH_AT,
// so no environment can make a production worker kill itself. The suite's
// binary, built with the tag, has the hook and refuses an unknown point.
func TestCrashPointsOnlyInCrashpointBuild(t *testing.T) {
	t.Parallel()
	release := filepath.Join(t.TempDir(), "effectively")
	build := exec.Command("make", "--no-print-directory", "-C", "..", "build", "BIN="+release)
	out, err := build.CombinedOutput()
	require.NoError(t, err, "make build: %s", out)

	info, err := exec.Command("go", "version", "-m", release).CombinedOutput()
	require.NoError(t, err, "go version -m: %s", info)
	require.NotContains(t, string(info), "crashpoint", "make build must not use the crashpoint tag:\n%s", info)
	bin, err := os.ReadFile(release)
	require.NoError(t, err)
	require.False(t, bytes.Contains(bin, []byte(crashpoint.EnvVar)), "the release binary contains %s", crashpoint.EnvVar)

	// The same checks find the hook in the suite's binary: they can fail.
	info, err = exec.Command("go", "version", "-m", binary).CombinedOutput()
	require.NoError(t, err, "go version -m: %s", info)
	require.Contains(t, string(info), "-tags=crashpoint")
	bin, err = os.ReadFile(binary)
	require.NoError(t, err)
	require.True(t, bytes.Contains(bin, []byte(crashpoint.EnvVar)))

	// The release binary ignores the variable; the crashpoint build fails
	// at start on a name it does not know, and lists the ones it does.
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), crashpoint.EnvVar + "=nonsense"}
	cmd := exec.Command(release, "version")
	cmd.Env = env
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)

	for _, bad := range []string{"nonsense", "before_db_commit:0", crashpoint.AfterDBCommit + ":x"} {
		env[len(env)-1] = crashpoint.EnvVar + "=" + bad
		cmd = exec.Command(binary, "version")
		cmd.Env = env
		out, err = cmd.CombinedOutput()
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "%s=%s: want exit 2, got %v: %s", crashpoint.EnvVar, bad, err, out)
		require.Equal(t, 2, ee.ExitCode(), "%s", out)
		for _, p := range []string{crashpoint.BeforeDBCommit, crashpoint.AfterDBCommit, crashpoint.AfterKafkaCommit, crashpoint.OutboxBeforeCall, crashpoint.OutboxAfterCall} {
			require.True(t, strings.Contains(string(out), p), "the error names the known point %s: %s", p, out)
		}
	}
}
