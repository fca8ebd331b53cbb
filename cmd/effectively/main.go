// Command effectively is the worker and its operator tools: run the consumer,
// migrate the schema, produce test workloads, inspect and replay.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/effectively-io/effectively/crashpoint"
)

func main() {
	if err := crashpoint.Check(); err != nil { // only a -tags crashpoint build reads EFFECTIVELY_CRASH_AT
		fmt.Fprintln(os.Stderr, "effectively:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "effectively:", err)
		os.Exit(exitCode(err))
	}
}
