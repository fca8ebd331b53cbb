// Package crashpoint kills the process at named points of the pipeline, for
// the fault suites that prove a crash anywhere loses and doubles nothing.
//
// It is inert unless EFFECTIVELY_CRASH_AT names a point: the variable holds
// "point:n" and the process SIGKILLs itself the n-th time it reaches that
// point (n defaults to 1). SIGKILL, not an exit: nothing gets to clean up,
// exactly as when the kernel's OOM killer or a node failure strikes.
package crashpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// The named crash points.
const (
	// BeforeDBCommit: the batch's statements ran, COMMIT was not sent.
	BeforeDBCommit = "before_db_commit"
	// AfterDBCommit: the batch committed to PostgreSQL; Kafka's commit has
	// not happened.
	AfterDBCommit = "after_db_commit"
	// AfterKafkaCommit: both commits happened.
	AfterKafkaCommit = "after_kafka_commit"
	// OutboxBeforeCall: the dispatcher committed an intent as sending and
	// has not made its call.
	OutboxBeforeCall = "outbox_before_call"
	// OutboxAfterCall: the call was answered; its outcome is not recorded.
	OutboxAfterCall = "outbox_after_call"
)

// EnvVar names the point to crash at.
const EnvVar = "EFFECTIVELY_CRASH_AT"

var (
	once      sync.Once
	armed     string
	countdown atomic.Int64
)

func load() {
	v := os.Getenv(EnvVar)
	if v == "" {
		return
	}
	name, n, _ := strings.Cut(v, ":")
	count := int64(1)
	if n != "" {
		c, err := strconv.ParseInt(n, 10, 64)
		if err != nil || c < 1 {
			fmt.Fprintf(os.Stderr, "%s=%q: want point:n with n ≥ 1; crash point disabled\n", EnvVar, v)
			return
		}
		count = c
	}
	armed = name
	countdown.Store(count)
}

// Hit marks that the process reached point name, and kills it if this is
// the armed point's n-th hit.
func Hit(name string) {
	once.Do(load)
	if armed != name {
		return
	}
	if countdown.Add(-1) == 0 {
		fmt.Fprintf(os.Stderr, "crashpoint: killing the process at %s\n", name)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
