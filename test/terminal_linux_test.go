package test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// runOnTerminal runs the binary with a terminal (a pseudo-terminal) on its
// stdin and input typed into it, as an operator at a shell would: what the
// commands that ask before changing rows see. The prompt goes to stderr,
// which is returned with stdout.
func runOnTerminal(t *testing.T, env []string, input string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	master, tty := openPTY(t)
	cmd := exec.Command(binary, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, &out, &errb
	require.NoError(t, cmd.Start())
	require.NoError(t, tty.Close()) // the child holds it now
	// The terminal's line discipline keeps the typed line until the command
	// reads it; its echo is drained so that it never blocks.
	_, err := master.Write([]byte(input))
	require.NoError(t, err)
	go func() { _, _ = io.Copy(io.Discard, master) }()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute): // a hang guard
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%v on a terminal still running after 2m; stderr:\n%s", args, errb.String())
	}
	_ = master.Close()
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// openPTY opens a pseudo-terminal pair: the master the test types into and
// the terminal the command reads.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	fd := int(master.Fd())
	require.NoError(t, unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0), "unlocking the pseudo-terminal")
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	require.NoError(t, err)
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = master.Close(); _ = tty.Close() })
	return master, tty
}
