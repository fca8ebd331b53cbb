package test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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

// proc is a running effectively process.
type proc struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	stderr lockedBuffer
	done   chan struct{}
	err    error
}

// start runs the binary with args and env (on top of a clean environment
// that keeps only PATH and HOME, so the developer's EFFECTIVELY_* variables
// never leak into a test).
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(binary, args...), done: make(chan struct{})}
	p.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	p.cmd.Stdout = &p.stdout
	p.cmd.Stderr = &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %v: %v", args, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("effectively %s stderr:\n%s", strings.Join(args, " "), tail(p.stderr.String(), 60))
		}
	})
	return p
}

// wait waits for the process to exit (a hang guard, not a performance bound)
// and returns its exit code.
func (p *proc) wait(t *testing.T, guard time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(guard):
		t.Fatalf("process %v still running after %s", p.cmd.Args, guard)
	}
	return p.cmd.ProcessState.ExitCode()
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signalling %v: %v", p.cmd.Args, err)
	}
}

// runCmd runs the binary to completion.
func runCmd(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := start(t, env, args...)
	code = p.wait(t, 2*time.Minute)
	return code, p.stdout.String(), p.stderr.String()
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func waitUntil(t *testing.T, what string, guard time.Duration, cond func(ctx context.Context) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	for !cond(ctx) {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out after %s waiting for %s", guard, what)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
