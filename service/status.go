package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/effectively-io/effectively/internal/status"
	"github.com/effectively-io/effectively/internal/termsafe"
)

type statusFlags struct {
	asJSON  bool
	watch   time.Duration
	workers []string
}

func newStatusCmd(c *CLI) *cobra.Command {
	var f statusFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show what the group is doing now: members, partitions, lag, states, and what waits",
		Long: `Show the consumer group kafka.group as Kafka, PostgreSQL and the workers see it:
the members (instance id, client id, host, partitions); per partition the
position stored in PostgreSQL, Kafka's committed offset, the end offset
(last stable offset), the lag, and the state (running, paused, retrying,
stopped) with its cause as the owning worker reports it; and counts of parked
events, dead letters and outbox intents by state.

The workers' views come from their admin servers (GET /status): each member's
host with the port of http.addr, or the URLs given with --worker. Every source
is read on its own: while PostgreSQL is unreachable, status says so (address
and fix) and still shows Kafka's side and the workers' views. It exits 0 when
it could show the group, 1 when neither Kafka nor PostgreSQL answered.`,
		Example: `  effectively status
  effectively status --json
  effectively status --watch 2s
  effectively status --worker http://10.0.0.7:9090 --worker http://10.0.0.8:9090`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.watch < 0 {
				return usageError{errors.New("--watch must be positive (e.g. 2s)")}
			}
			for {
				st := status.Read(cmd.Context(), c.statusSources(), f.workers)
				var err error
				if f.asJSON {
					err = c.PrintJSON(st)
				} else {
					if f.watch > 0 {
						fmt.Fprint(c.stdout, "\x1b[H\x1b[2J") // clear the screen between frames
					}
					err = printStatus(c.stdout, st)
				}
				if err != nil {
					return err
				}
				if f.watch == 0 {
					if st.Kafka != "ok" && st.Postgres != "ok" {
						return errors.New("neither Kafka nor PostgreSQL could be read (see above)")
					}
					return nil
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(f.watch):
				}
			}
		},
	}
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print JSON (one document per refresh with --watch)")
	cmd.Flags().DurationVar(&f.watch, "watch", 0, "refresh every DURATION until interrupted (e.g. 2s)")
	cmd.Flags().StringSliceVar(&f.workers, "worker", nil, "a worker's admin server, e.g. http://10.0.0.7:9090 (repeatable; default: each member's host at the port of http.addr)")
	return cmd
}

// statusSources are where the group's status is read from, with the
// command line's configuration.
func (c *CLI) statusSources() status.Sources {
	return status.Sources{
		Config: c.cfg, Logger: c.log,
		Connect:     func(ctx context.Context) (*pgxpool.Pool, error) { return openPool(ctx, c.cfg.Postgres, 1, nil) },
		Unreachable: func(err error) error { return postgresUnreachable(c.cfg.Postgres.URL, err) },
	}
}

func printStatus(w io.Writer, st status.Group) error {
	out := termsafe.NewWriter(w)
	fmt.Fprintf(out, "group %s at %s\n", st.Group, st.At.Format(time.RFC3339))
	if st.Kafka != "ok" {
		fmt.Fprintf(out, "Kafka: %s\n", st.Kafka)
	}
	if st.Postgres != "ok" {
		fmt.Fprintf(out, "PostgreSQL: %s\n", st.Postgres)
	}
	fmt.Fprintf(out, "\n%d member(s)\n", len(st.Members))
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tCLIENT\tHOST\tPARTITIONS\tWORKER")
	for _, m := range st.Members {
		var parts []string
		for t, ps := range m.Partitions {
			for _, p := range ps {
				parts = append(parts, status.PartitionKey(t, p))
			}
		}
		sort.Strings(parts)
		worker := "-"
		switch {
		case m.Worker != nil:
			worker = "ok"
			if m.Worker.Closing {
				worker = "shutting down"
			}
			if m.Worker.Postgres != "ok" {
				worker += "; postgres: " + oneLine(m.Worker.Postgres, 60)
			}
		case m.AdminError != "":
			worker = "no answer: " + oneLine(m.AdminError, 60)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", dash(m.InstanceID), dash(m.ClientID), dash(m.Host), dash(strings.Join(parts, ",")), worker)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tOWNER\tSTORED\tCOMMITTED\tEND\tLAG\tSTATE\tWHY")
	for _, p := range st.Partitions {
		state := p.State
		if p.Cause != "" {
			state += " (" + p.Cause + ")"
		}
		why := "-"
		if p.Error != "" {
			why = oneLine(p.Error, 80)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", status.PartitionKey(p.Topic, p.Partition), dash(p.Owner),
			num(p.Stored), num(p.Committed), num(p.End), num(p.Lag), state, why)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if st.Parked != nil {
		fmt.Fprintf(out, "\nparked: %s", counts(st.Parked.ByState))
		if st.Parked.OldestParkedSeconds > 0 {
			fmt.Fprintf(out, " (oldest parked %s ago)", (time.Duration(st.Parked.OldestParkedSeconds) * time.Second).String())
		}
		fmt.Fprintln(out)
	}
	if st.DeadLetters != nil {
		fmt.Fprintf(out, "dead letters: %d unresolved, %d resolved, %d not yet published", st.DeadLetters.Unresolved, st.DeadLetters.Resolved, st.DeadLetters.Unpublished)
		if len(st.DeadLetters.UnresolvedByReason) > 0 {
			fmt.Fprintf(out, "; unresolved by reason: %s", counts(st.DeadLetters.UnresolvedByReason))
		}
		fmt.Fprintln(out)
	}
	if st.Outbox != nil {
		m := make(map[string]int64, len(st.Outbox))
		for k, v := range st.Outbox {
			m[string(k)] = v
		}
		fmt.Fprintf(out, "outbox intents: %s\n", counts(m))
	}
	if c := st.Claims; c != nil {
		fmt.Fprintf(out, "claims: ~%d kept; generation %d open since %s (%s ago)", c.Claims, c.Open, c.OpenedAt.UTC().Format(time.RFC3339), st.At.Sub(c.OpenedAt).Round(time.Second))
		if c.OldestClosedAt != nil {
			fmt.Fprintf(out, "; %d closed, the oldest closed %s ago (dropped once that is dedupe.retention)", c.Closed, st.At.Sub(*c.OldestClosedAt).Round(time.Second))
		}
		fmt.Fprintln(out)
	}
	return nil
}

func counts(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", m[k], k)
	}
	return strings.Join(parts, ", ")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func num(v *int64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatInt(*v, 10)
}
