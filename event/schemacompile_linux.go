package event

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"strconv"
	"syscall"
)

// canLimitChild: Linux enforces RLIMIT_CPU and RLIMIT_DATA (every private
// writable mapping counts, so the Go heap does).
const canLimitChild = true

// limitSelf puts limits on the running process: its CPU time, and its
// writable memory to what it maps now plus limits.Memory.
func limitSelf(limits compileLimits) error {
	secs := uint64(max(1, math.Ceil(limits.CPU.Seconds())))
	if err := syscall.Setrlimit(syscall.RLIMIT_CPU, &syscall.Rlimit{Cur: secs, Max: secs}); err != nil {
		return fmt.Errorf("RLIMIT_CPU: %w", err)
	}
	data, err := vmData()
	if err != nil {
		return err
	}
	lim := uint64(data + limits.Memory)
	return syscall.Setrlimit(syscall.RLIMIT_DATA, &syscall.Rlimit{Cur: lim, Max: lim})
}

// vmData is the process's data size (VmData in /proc/self/status), which
// RLIMIT_DATA limits.
func vmData() (int64, error) { return procStatus("VmData") }

// peakRSS is the process's peak resident memory (VmHWM: of its own
// memory since it started, unlike a child's rusage, which counts the
// parent's from before the exec).
func peakRSS() int64 {
	n, _ := procStatus("VmHWM")
	return n
}

// procStatus reads a size in kB from /proc/self/status, in bytes.
func procStatus(field string) (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := bytes.CutPrefix(sc.Bytes(), []byte(field+":")); ok {
			kb, err := strconv.ParseInt(string(bytes.TrimSuffix(bytes.TrimSpace(rest), []byte(" kB"))), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s in /proc/self/status: %w", field, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/self/status", field)
}

// killedForCPU reports whether a finished process was killed as RLIMIT_CPU
// kills (SIGKILL at the hard limit, SIGXCPU at the soft one).
func killedForCPU(ps *os.ProcessState) bool {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && (ws.Signal() == syscall.SIGKILL || ws.Signal() == syscall.SIGXCPU)
}
