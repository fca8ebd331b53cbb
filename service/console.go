package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/internal/audit"
	"github.com/effectively-io/effectively/internal/broker"
	"github.com/effectively-io/effectively/internal/console"
	"github.com/effectively-io/effectively/internal/pipeline"
	"github.com/effectively-io/effectively/internal/replay"
	"github.com/effectively-io/effectively/internal/termsafe"
)

// newConsole builds the operations console when console.enabled is on, and
// returns nil, nil otherwise: off, nothing of it exists (no route, no
// history sampling). gatherer is the worker's registry (the throughput
// history samples it); nil outside a worker.
func (a *App) newConsole(cfg config.Config, log *zap.Logger, pool *pgxpool.Pool, gatherer prometheus.Gatherer) (http.Handler, *console.History, error) {
	if !cfg.Console.Enabled {
		return nil, nil, nil
	}
	// The console's actions are the CLI commands' code, run with the
	// worker's configuration.
	c := &CLI{app: a, cfg: cfg, log: log, stdout: io.Discard, stderr: io.Discard}
	var history *console.History
	if gatherer != nil {
		history = console.NewHistory(gatherer, cfg.Console.HistoryInterval)
	}
	applier, err := a.redriveApplier(cfg, pool, log)
	if err != nil {
		return nil, nil, err
	}
	h, err := console.New(console.Options{
		Pool: pool, Build: a.name() + " " + buildVersion(a.Version), Group: cfg.Kafka.Group, Topics: cfg.Kafka.Topics,
		TokenFile: cfg.Console.TokenFile, NoToken: cfg.Console.TokenFile == "" && cfg.Console.LocalhostWithoutToken,
		AllowedHosts: cfg.Console.AllowedHosts, CookieSecure: cfg.Console.CookieSecure,
		History: history, Logger: log.Named("console"),
		Status:        c.statusSources(),
		Redrive:       applier.Redrive,
		ReplayPlan:    c.consoleReplayPlan,
		ReplayExecute: c.consoleReplayExecute,
		Audit: func(ctx context.Context, topic string, from, to time.Time) (audit.Report, error) {
			return c.consoleAudit(ctx, pool, topic, from, to)
		},
	})
	if err != nil {
		return nil, nil, err
	}
	return h, history, nil
}

// redriveApplier is the pipeline `dlq redrive` re-applies dead letters with:
// the build's handlers and the configured sinks, as the worker's.
func (a *App) redriveApplier(cfg config.Config, pool *pgxpool.Pool, log *zap.Logger) (*pipeline.Applier, error) {
	if _, err := a.registerSinks(cfg); err != nil {
		return nil, fmt.Errorf("sinks: %w", err)
	}
	decoders, err := newDecoders(cfg, log)
	if err != nil {
		return nil, err
	}
	return pipeline.NewApplier(pool, pipeline.Options{Decoders: decoders, Handlers: a.registry(cfg), Env: a.env(cfg), Logger: log.Named("redrive"),
		MaxParkedPerResource: cfg.Parking.MaxPerResource}), nil
}

// consoleReplayPlan is replay's dry run; unlike the command it plans while
// the group has members too, and returns them, so the page can show the
// plan and say that executing it is refused.
func (c *CLI) consoleReplayPlan(ctx context.Context, group, topic string, from replay.From) (replay.Plan, []replay.Member, error) {
	r, err := newReplayer(ctx, c, topic)
	if err != nil {
		return replay.Plan{}, nil, err
	}
	defer r.close()
	members, err := replay.ActiveMembers(ctx, r.adm, group)
	if err != nil {
		return replay.Plan{}, nil, err
	}
	plan, err := r.planner.Plan(ctx, group, topic, from)
	return plan, members, err
}

// consoleReplayExecute is `replay --execute` (rewind) through the same
// code: replay.Planner's PlanRewind (no members, no target ahead), then
// ExecuteRewind (no members again, then replay.Execute). A check that says
// no is a console.RefusedError.
func (c *CLI) consoleReplayExecute(ctx context.Context, group, topic string, from replay.From) (replay.Plan, replay.Executed, error) {
	r, err := newReplayer(ctx, c, topic)
	if err != nil {
		return replay.Plan{}, replay.Executed{}, err
	}
	defer r.close()
	refused := func(err error) error {
		var members *replay.ActiveMembersError
		if errors.As(err, &members) {
			return &console.RefusedError{Err: err}
		}
		return err
	}
	plan, ahead, err := r.planner.PlanRewind(ctx, group, topic, from)
	switch {
	case err != nil:
		return plan, replay.Executed{}, refused(err)
	case ahead != nil:
		return plan, replay.Executed{}, &console.RefusedError{Err: ahead}
	}
	done, err := r.planner.ExecuteRewind(ctx, plan)
	return plan, done, refused(err)
}

// consoleAudit is `audit --topic T [--from-time] [--to-time]` for the
// worker's group.
func (c *CLI) consoleAudit(ctx context.Context, pool *pgxpool.Pool, topic string, from, to time.Time) (audit.Report, error) {
	if !slices.Contains(c.cfg.Kafka.Topics, topic) {
		return audit.Report{}, fmt.Errorf("topic %s is not one of kafka.topics (%s)", topic, strings.Join(c.cfg.Kafka.Topics, ", "))
	}
	if !from.IsZero() && !to.IsZero() && !from.Before(to) {
		return audit.Report{}, fmt.Errorf("from %s is not before to %s", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	dcfg := c.cfg
	dcfg.Kafka.Topics = []string{topic}
	decoders, err := newDecoders(dcfg, c.log)
	if err != nil {
		return audit.Report{}, err
	}
	kopts, err := broker.ClientOpts(c.cfg.Kafka, c.log.Named("kafka"))
	if err != nil {
		return audit.Report{}, err
	}
	return audit.Run(ctx, pool, audit.Options{
		Brokers: c.cfg.Kafka.Brokers, Topic: topic, Group: c.cfg.Kafka.Group, ExtraOpts: kopts,
		From: from, To: to, Decoder: decoders[topic], MaxListed: 100, Logger: c.log.Named("audit"),
	})
}

// consolePoolSize is the `console` command's pool: a few operators' pages
// and actions at once.
const consolePoolSize = 4

// newConsoleCmd serves the console on its own, against postgres.url and
// kafka.brokers, without running a worker (no throughput history).
func newConsoleCmd(c *CLI) *cobra.Command {
	var addr string
	cmd := &cobra.Command{
		Use:   "console [--addr host:port]",
		Short: "Serve the operations console in the browser without running a worker",
		Long: `Serve the operations console at http://ADDR/console/ against postgres.url and
kafka.brokers, without joining the group: the pages of 'status', dead letters,
parked events, the outbox, the replay planner, the audit and the action log, with
their actions. It needs console.token_file (or, on a loopback address,
console.localhost_without_token: then it answers only requests for localhost,
127.0.0.1 or [::1] on its port, and for the names in console.allowed_hosts).
Workers serve the same console on their admin
server when console.enabled is on; only theirs draws the throughput chart.`,
		Example: `  effectively console --addr 127.0.0.1:9411 --config effectively.yaml`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := c.cfg
			cfg.Console.Enabled = true
			if addr != "" {
				cfg.HTTP.Addr = addr
			}
			if cfg.HTTP.Addr == "" {
				return usageError{errors.New("console needs an address: give --addr host:port or set http.addr")}
			}
			if cfg.Console.TokenFile == "" && !(cfg.Console.LocalhostWithoutToken && config.IsLoopback(cfg.HTTP.Addr)) {
				return usageError{fmt.Errorf("the console requires a token; fix: set console.token_file / %s to a file of name:token lines, or on a loopback --addr set console.localhost_without_token / %s",
					config.EnvName("console.token_file"), config.EnvName("console.localhost_without_token"))}
			}
			ctx := cmd.Context()
			if err := c.app.checkSchema(ctx, cfg); err != nil {
				return err
			}
			// A few connections: pages and actions of several operators.
			pool, err := openPool(ctx, cfg.Postgres, consolePoolSize, nil)
			if err != nil {
				return err
			}
			defer pool.Close()
			h, _, err := c.app.newConsole(cfg, c.log, pool, nil)
			if err != nil {
				return err
			}
			mux := http.NewServeMux()
			mux.Handle(console.Prefix, h)
			mux.Handle("GET /{$}", http.RedirectHandler(console.Prefix, http.StatusSeeOther))
			srv := &http.Server{Addr: cfg.HTTP.Addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, IdleTimeout: time.Minute}
			errc := make(chan error, 1)
			go func() { errc <- srv.ListenAndServe() }()
			fmt.Fprintf(c.stderr, "console at http://%s%s\n", cfg.HTTP.Addr, console.Prefix)
			select {
			case err := <-errc:
				return fmt.Errorf("console at %s: %w; fix: free the port or give another --addr", cfg.HTTP.Addr, err)
			case <-ctx.Done():
			}
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := srv.Shutdown(sctx); errors.Is(err, context.DeadlineExceeded) {
				// Shutdown counts a connection that never sent a request
				// as busy until it is 5 s old, and browsers preconnect
				// spare ones: close what is left rather than fail the
				// stop (a request still running after 5 s is cut).
				return srv.Close()
			} else if err != nil {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "", "listen address, host:port (default http.addr)")
	return cmd
}

// newActionsCmd lists the operator-action log.
func newActionsCmd(c *CLI) *cobra.Command {
	var (
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "actions",
		Short: "List the operator-action log: what was done from the console, by whom, when, with what result",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.WithPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				as, err := console.ListActions(ctx, pool, limit)
				if err != nil {
					return err
				}
				if asJSON {
					return c.PrintJSON(as)
				}
				tw := tabwriter.NewWriter(termsafe.NewWriter(c.stdout), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tAT\tOPERATOR\tACTION\tTARGET\tOUTCOME\tRESULT")
				for _, a := range as {
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.At.UTC().Format(time.RFC3339), a.Operator, a.Action, a.Target, a.Outcome, oneLine(a.Result, 100))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				fmt.Fprintf(c.stdout, "%d actions (newest first)\n", len(as))
				return nil
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 100, "at most this many, newest first")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
