//go:build crashpoint

package crashpoint

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// Enabled reports whether this binary has the crash-point hook.
const Enabled = true

// points are the names EnvVar accepts.
var points = []string{BeforeDBCommit, AfterDBCommit, AfterKafkaCommit, OutboxBeforeCall, OutboxAfterCall}

var (
	once      sync.Once
	loadErr   error
	armed     string
	countdown atomic.Int64
)

func load() {
	v := os.Getenv(EnvVar)
	if v == "" {
		return
	}
	name, n, _ := strings.Cut(v, ":")
	if !slices.Contains(points, name) {
		loadErr = fmt.Errorf("%s=%q: unknown crash point %q; known points: %s", EnvVar, v, name, strings.Join(points, ", "))
		return
	}
	count := int64(1)
	if n != "" {
		c, err := strconv.ParseInt(n, 10, 64)
		if err != nil || c < 1 {
			loadErr = fmt.Errorf("%s=%q: want point:n with n ≥ 1 (known points: %s)", EnvVar, v, strings.Join(points, ", "))
			return
		}
		count = c
	}
	armed = name
	countdown.Store(count)
}

// Check reads EnvVar and reports an unknown point name or a bad count. The
// command calls it first thing and exits 2 on an error.
func Check() error {
	once.Do(load)
	return loadErr
}

// Hit marks that the process reached point name, and kills it if this is
// the armed point's n-th hit.
func Hit(name string) {
	if err := Check(); err != nil {
		// Only when the process skipped Check: still never ignore a typo.
		fmt.Fprintln(os.Stderr, "crashpoint:", err)
		os.Exit(2)
	}
	if armed != name {
		return
	}
	if countdown.Add(-1) == 0 {
		fmt.Fprintf(os.Stderr, "crashpoint: killing the process at %s\n", name)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
