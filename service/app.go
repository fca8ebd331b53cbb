package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/crashpoint"
	"github.com/effectively-io/effectively/internal/handling"
	"github.com/effectively-io/effectively/internal/redact"
	"github.com/effectively-io/effectively/internal/sink"
	"github.com/effectively-io/effectively/schema"
)

// App is one build of effectively: the engine, plus a team's event
// handlers, prerequisites and targets (the embedded handlers.Registry), its
// migrations, and any commands of its own. Every build has the whole
// command line — run, migrate, replay, dlq, parked, outbox, audit, prune,
// config, version — with the same flags, configuration keys, metrics and
// exit codes.
//
// Fill an App before calling Main or Run; it is not safe to change
// afterwards.
type App struct {
	// Registry maps event types to handlers and declares prerequisites
	// and targets: app.Handle, app.HandleFunc, app.Require, app.Target.
	handlers.Registry

	// Name is the binary's name in help and messages.
	Name string
	// Version is what `version` prints; empty derives it from the Go
	// build information (VCS revision).
	Version string

	sets     []schema.Set
	aliases  map[string]string
	defaults []func(*config.Config)
	commands []func(*CLI) *cobra.Command
	workload Workload
	reasons  []event.ReasonDoc // the build's own dead-letter reasons, for gen-docs

	topics []string // the topics the build's handlers are for (Topics)
	// sinksOnly is the registry of a configuration that consumes none of
	// topics: the configured sinks alone.
	sinksOnly handlers.Registry

	sinksOnce sync.Once // the configured sinks are registered once
	sinks     *sink.Set
	sinksErr  error
}

// New returns an empty App called name.
func New(name string) *App {
	return &App{Name: name}
}

// Migrations adds the build's migrations, applied by `migrate` (and
// `run --migrate`) after the engine's, each set with its own version table.
func (a *App) Migrations(sets ...schema.Set) {
	a.sets = append(a.sets, sets...)
}

// Topics names the topics the build's handlers are for; they are
// kafka.topics' default. A configuration that consumes none of them, and
// whose sinks each name their topic and together take every topic it
// consumes, runs the build as a config-only sink (the worker says so at
// start-up): its handlers, tables, targets and migrations are left out, so the
// reference build pointed at a team's sinks creates only the engine's
// tables and the team's. Any other configuration runs the build's handlers
// (on whatever topics it names), and a build that names no topics always
// does.
func (a *App) Topics(topics ...string) {
	a.topics = append(a.topics, topics...)
}

// handlersServe reports whether a worker of cfg runs the build's handlers:
// unless the build names its topics, cfg consumes none of them, and sinks
// that each name their topic take every topic cfg consumes. A sink without
// a topic takes every topic's events beside the handlers: it never turns
// them off.
func (a *App) handlersServe(cfg config.Config) bool {
	if len(a.topics) == 0 || len(cfg.Sinks) == 0 || slices.ContainsFunc(cfg.Sinks, func(s config.Sink) bool { return s.Topic == "" }) {
		return true
	}
	for _, t := range cfg.Kafka.Topics {
		if slices.Contains(a.topics, t) || !sinkTakes(cfg.Sinks, t) {
			return true
		}
	}
	return false
}

// sinkTakes reports whether a sink names topic.
func sinkTakes(sinks []config.Sink, topic string) bool {
	return slices.ContainsFunc(sinks, func(s config.Sink) bool { return s.Topic == topic })
}

// registry is the registry a worker of cfg runs: the build's, or, when cfg
// consumes none of the build's topics, one for the configured sinks alone.
func (a *App) registry(cfg config.Config) *handlers.Registry {
	if a.handlersServe(cfg) {
		return &a.Registry
	}
	return &a.sinksOnly
}

// Alias keeps accepting an older configuration key (in the file and as an
// environment variable) for the key that replaced it, so deployments keep
// working across a rename.
func (a *App) Alias(oldKey, newKey string) {
	if a.aliases == nil {
		a.aliases = map[string]string{}
	}
	a.aliases[oldKey] = newKey
}

// Defaults changes the embedded defaults, e.g. the topics a build consumes
// when kafka.topics is not set.
func (a *App) Defaults(f func(*config.Config)) {
	a.defaults = append(a.defaults, f)
}

// Command adds a command of the build's own (a workload generator, a
// checker) to the command line. It receives the CLI every command shares.
func (a *App) Command(f func(*CLI) *cobra.Command) {
	a.commands = append(a.commands, f)
}

// extension is what the build adds to the configuration.
func (a *App) extension() config.Extension {
	return config.Extension{
		Targets: handling.Of(&a.Registry).Targets(),
		Aliases: a.aliases,
		Defaults: func(c *config.Config) {
			// A build is its own consumer group and client by default: two
			// builds on one cluster never share a group by accident.
			if a.Name != "" {
				c.Kafka.Group, c.Kafka.ClientID = a.Name, a.Name
			}
			if len(a.topics) > 0 {
				c.Kafka.Topics = slices.Clone(a.topics)
			}
			for _, f := range a.defaults {
				f(c)
			}
		},
	}
}

// Main runs the command line with the process's arguments until SIGINT or
// SIGTERM, and exits with its code: 0 success, 1 runtime failure, 2 bad
// usage or configuration.
func (a *App) Main() {
	// Only a build with -tags crashpoint (the fault suites') reads
	// EFFECTIVELY_CRASH_AT; there an unknown point is a usage error.
	if err := crashpoint.Check(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", a.name(), err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := a.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", a.name(), err)
		os.Exit(ExitCode(err))
	}
}

// Run executes the command line args, writing command output to stdout and
// logs to stderr. Every command loads its configuration the same way: flags
// > environment (EFFECTIVELY_…) > --config file > defaults.
func (a *App) Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := a.rootCmd(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err != nil && isCobraUsage(err) {
		err = usageError{err: err}
	}
	// The error is printed: whatever URL it holds, redacted (its type, and
	// so the exit code, is kept).
	return redact.Error(err)
}

// isCobraUsage recognises the errors cobra returns for a command line it
// cannot parse before any command runs (an unknown command, a missing
// required flag); flag and argument errors are marked where they arise.
func isCobraUsage(err error) bool {
	var ue usageError
	if errors.As(err, &ue) {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "unknown command ") || strings.HasPrefix(msg, "required flag(s) ")
}

// usageArgs wraps every command's argument validator so that its errors
// are usage errors (exit code 2).
func usageArgs(cmd *cobra.Command) {
	if args := cmd.Args; args != nil {
		cmd.Args = func(cmd *cobra.Command, a []string) error {
			if err := args(cmd, a); err != nil {
				return usageError{err: fmt.Errorf("%w; see '%s --help'", err, cmd.CommandPath())}
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		usageArgs(sub)
	}
}

func (a *App) name() string {
	if a.Name == "" {
		return "effectively"
	}
	return a.Name
}

// usageError marks errors in how the command was called (exit code 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// UsageError marks err as a mistake in how the command was called: the
// process exits with code 2.
func UsageError(err error) error { return usageError{err: err} }

// checkFailedError marks a check that ran and found a problem (exit code 3).
type checkFailedError struct{ err error }

func (e checkFailedError) Error() string { return e.err.Error() }
func (e checkFailedError) Unwrap() error { return e.err }

// CheckFailed marks err as the finding of a check that ran to the end
// (`audit` found unaccounted records, `verify` a difference): the process
// exits with code 3, apart from 1 (it could not run: a connection refused).
func CheckFailed(err error) error { return checkFailedError{err: err} }

// Exit codes.
const (
	// ExitOK: done.
	ExitOK = 0
	// ExitFailure: a runtime failure (a service unreachable, a query failed).
	ExitFailure = 1
	// ExitUsage: the command line or the configuration is wrong.
	ExitUsage = 2
	// ExitCheckFailed: a check ran and found a problem (audit, verify).
	ExitCheckFailed = 3
)

// ExitCode maps an error to the process exit code: 0 for nil, 2 for usage
// and configuration errors, 3 for a check's findings ([CheckFailed]), 1 for
// everything else.
func ExitCode(err error) int {
	var ue usageError
	var fe *config.FieldError
	var ce checkFailedError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ue) || errors.As(err, &fe):
		return ExitUsage
	case errors.As(err, &ce):
		return ExitCheckFailed
	}
	return ExitFailure
}
