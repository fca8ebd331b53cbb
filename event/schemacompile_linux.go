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
func vmData() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmData:")); ok {
			kb, err := strconv.ParseInt(string(bytes.TrimSuffix(bytes.TrimSpace(rest), []byte(" kB"))), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmData in /proc/self/status: %w", err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmData in /proc/self/status")
}

// killedForCPU reports whether a finished process was killed as RLIMIT_CPU
// kills (SIGKILL at the hard limit, SIGXCPU at the soft one).
func killedForCPU(ps *os.ProcessState) bool {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && (ws.Signal() == syscall.SIGKILL || ws.Signal() == syscall.SIGXCPU)
}

// maxRSS is a finished process's peak resident memory, in bytes.
func maxRSS(ps *os.ProcessState) int64 {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss << 10
	}
	return 0
}
