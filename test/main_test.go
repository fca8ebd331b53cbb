package test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/effectively-io/effectively/internal/proctest"
	// Containers when no local stack is named and Docker answers.
	_ "github.com/effectively-io/effectively/test/containers"
)

// binary is the effectively binary built once for the suite: the end-to-end
// tests run the real thing as separate processes.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "effectively-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "effectively")
	// The crash-point hook exists only in a crashpoint build (never make build's).
	args := []string{"build", "-tags", "crashpoint", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "../cmd/effectively")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building effectively:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running effectively process (proctest's, with the suite's
// short names).
type proc struct {
	*proctest.Proc
	cmd            *exec.Cmd
	stdout, stderr *proctest.LockedBuffer
}

// start runs the suite's binary with args and env on a clean environment.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := proctest.Start(t, binary, env, args...)
	return &proc{Proc: p, cmd: p.Cmd, stdout: &p.Stdout, stderr: &p.Stderr}
}

// wait waits for the process to exit (a hang guard, not a performance bound)
// and returns its exit code.
func (p *proc) wait(t *testing.T, guard time.Duration) int {
	t.Helper()
	return p.Wait(t, guard)
}

// exited reports whether the process has ended.
func (p *proc) exited() bool { return p.Exited() }

func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	p.Signal(t, sig)
}

// runCmd runs the binary to completion.
func runCmd(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return proctest.Run(t, binary, env, args...)
}

func tail(s string, n int) string { return proctest.Tail(s, n) }

func waitUntil(t *testing.T, what string, guard time.Duration, cond func(ctx context.Context) bool) {
	t.Helper()
	proctest.WaitUntil(t, what, guard, cond)
}
