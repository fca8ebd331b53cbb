//go:build !linux

package event

import (
	"errors"
	"os"
)

// canLimitChild: only Linux's limits are relied on; elsewhere a schema is
// compiled in the process, bounded by the checks before compiling.
const canLimitChild = false

func limitSelf(compileLimits) error { return errors.New("resource limits are used on Linux only") }

func killedForCPU(*os.ProcessState) bool { return false }

func peakRSS() int64 { return 0 }
