// Package proctest runs a build's binary as real processes for the
// end-to-end, fault and benchmark suites: start it on a clean environment,
// read its output while it runs, signal it (SIGKILL, SIGSTOP, SIGTERM) and
// wait for it with a hang guard. It takes a small TB interface rather than
// *testing.T (river's riverdbtest does the same), so the benchmark program
// and a team's own suite can use it too.
package proctest

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// TB is what proctest needs of a test (testing.TB has it).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Failed() bool
	Cleanup(func())
}

// Proc is a running process.
type Proc struct {
	Cmd    *exec.Cmd
	Stdout LockedBuffer
	Stderr LockedBuffer
	done   chan struct{}
}

// Start runs bin with args on a clean environment — PATH and HOME, then
// env — so a developer's EFFECTIVELY_* variables never leak into a test. The
// process is killed when the test ends, and its stderr's tail is logged if
// the test failed.
func Start(t TB, bin string, env []string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.Cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	p.Cmd.Stdout, p.Cmd.Stderr = &p.Stdout, &p.Stderr
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("starting %s %v: %v", bin, args, err)
	}
	go func() {
		_ = p.Cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.Exited() {
			_ = p.Cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s %s stderr:\n%s", bin, strings.Join(args, " "), Tail(p.Stderr.String(), 60))
		}
	})
	return p
}

// Wait waits for the process to end (a hang guard, not a performance
// bound) and returns its exit code.
func (p *Proc) Wait(t TB, guard time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(guard):
		t.Fatalf("process %v still running after %s", p.Cmd.Args, guard)
	}
	return p.Cmd.ProcessState.ExitCode()
}

// Done is closed when the process has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the process.
func (p *Proc) Signal(t TB, sig syscall.Signal) {
	t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signalling %v: %v", p.Cmd.Args, err)
	}
}

// Run runs bin to completion (a two-minute hang guard) and returns its
// exit code and output.
func Run(t TB, bin string, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := Start(t, bin, env, args...)
	code = p.Wait(t, 2*time.Minute)
	return code, p.Stdout.String(), p.Stderr.String()
}

// WaitUntil polls cond every 100 ms until it holds, failing the test after
// guard (a hang guard: never a performance assertion).
func WaitUntil(t TB, what string, guard time.Duration, cond func(ctx context.Context) bool) {
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

// FreePort returns a local TCP port nothing listens on at the moment.
func FreePort(t TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// FreePorts returns n distinct free ports: each is held open until all
// are chosen, so two calls in a row cannot hand out one port twice (the
// kernel may reuse a port FreePort has just released).
func FreePorts(t TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("finding a free port: %v", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// Tail is the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// LockedBuffer is a bytes.Buffer safe to read while a process writes to it.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is what was written so far.
func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
