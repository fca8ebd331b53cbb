package service

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/effectively-io/effectively/internal/deadletter"
	"github.com/effectively-io/effectively/internal/pipeline"
	"github.com/effectively-io/effectively/internal/redact"
	"github.com/effectively-io/effectively/internal/termsafe"
)

func newDLQCmd(c *CLI) *cobra.Command {
	var (
		f      deadletter.Filter
		since  time.Duration
		asJSON bool
	)
	filter := func() deadletter.Filter {
		out := f
		if since > 0 {
			out.Since = time.Now().Add(-since)
		}
		return out
	}
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Inspect and redrive dead letters",
		Long: `Every record that could not be applied has a dead letter: its origin (topic,
partition, offset), reason, error, key, headers and value (whole up to 64 KiB).
A relay in 'effectively run' also publishes each to the topic's .dlq topic.
After fixing the cause, 'dlq redrive' re-applies dead letters through the same
claim, so nothing applies twice.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.Reason, "reason", "", "only this reason (e.g. prerequisite_missing)")
	pf.StringVar(&f.Topic, "topic", "", "only records from this topic")
	pf.DurationVar(&since, "since", 0, "only dead letters first seen within this long (e.g. 24h)")
	pf.BoolVar(&f.Unresolved, "unresolved", false, "only those not yet resolved by a redrive")
	pf.IntVar(&f.Limit, "limit", 1000, "at most this many")
	pf.BoolVar(&asJSON, "json", false, "print JSON")

	list := &cobra.Command{
		Use:   "list",
		Short: "List dead letters, oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.WithPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				ds, err := deadletter.List(ctx, pool, filter())
				if err != nil {
					return err
				}
				if asJSON {
					return c.PrintJSON(ds)
				}
				tw := tabwriter.NewWriter(termsafe.NewWriter(c.stdout), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tREASON\tORIGIN\tATTEMPTS\tFIRST SEEN\tPUBLISHED\tRESOLVED\tERROR")
				for _, d := range ds {
					fmt.Fprintf(tw, "%d\t%s\t%s/%d@%d\t%d\t%s\t%s\t%s\t%s\n", d.ID, d.Reason, d.Topic, d.Partition, d.Offset, d.Attempts,
						d.FirstSeen.Format(time.RFC3339), yesNo(d.PublishedAt != nil), deref(d.Resolution, "-"), oneLine(d.Error, 80))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				fmt.Fprintf(c.stdout, "%d dead letters\n", len(ds))
				return nil
			})
		},
	}
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show one dead letter in full",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var id int64
			if _, err := fmt.Sscan(args[0], &id); err != nil {
				return usageError{fmt.Errorf("dlq show: %q is not a dead-letter ID", args[0])}
			}
			return c.WithPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				ds, err := deadletter.List(ctx, pool, deadletter.Filter{ID: id, Limit: 1})
				if err != nil {
					return err
				}
				if len(ds) == 0 {
					return fmt.Errorf("dead letter %d does not exist", id)
				}
				d := ds[0]
				if asJSON {
					return c.PrintJSON(d)
				}
				w := termsafe.NewWriter(c.stdout) // payloads, headers and errors are untrusted text
				fmt.Fprintf(w, "id           %d\norigin       %s/%d@%d (group %s)\nreason       %s\nerror        %s\n", d.ID, d.Topic, d.Partition, d.Offset, d.Group, d.Reason, d.Error)
				fmt.Fprintf(w, "attempts     %d (first %s, last %s)\n", d.Attempts, d.FirstSeen.Format(time.RFC3339), d.LastSeen.Format(time.RFC3339))
				fmt.Fprintf(w, "event key    %s\nrecord key   %q\npublished    %s\nresolved     %s\n", deref(d.EventKey, "-"), d.RecordKey, yesNo(d.PublishedAt != nil), deref(d.Resolution, "-"))
				for _, h := range d.Headers {
					fmt.Fprintf(w, "header       %s\n", h)
				}
				if utf8.Valid(d.Value) {
					fmt.Fprintf(w, "value (%d bytes)\n%s\n", d.ValueSize, d.Value)
				} else {
					fmt.Fprintf(w, "value (%d bytes, not UTF-8)\n%q\n", d.ValueSize, d.Value)
				}
				return nil
			})
		},
	}
	var (
		id  int64
		yes bool
	)
	redrive := &cobra.Command{
		Use:   "redrive [ID...] [filters]",
		Short: "Re-apply dead letters after a fix, through the same claim (nothing applies twice)",
		Long: `Re-apply the dead letters named by ID (as 'dlq list' and 'dlq show ID' name them),
or every unresolved one a filter selects (--reason, --topic, --since), through the
same claim as the worker: nothing applies twice. Progress goes to stderr.

A filter can select many: redrive counts them and asks before going on (on a
terminal; elsewhere, in a script, it needs --yes). Dead letters named by ID
are redriven without asking. 'dlq list --unresolved' with the same filter
shows what a filter selects.`,
		Example: `  effectively dlq redrive 42
  effectively dlq redrive 42 43 44
  effectively dlq redrive --reason handler_error --since 24h
  effectively dlq redrive --reason source_unavailable --yes   # in a script`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseIDs(args)
			if err != nil {
				return err
			}
			if id != 0 {
				// pflag's own deprecation note goes to cobra's flag error
				// buffer, which nobody prints.
				fmt.Fprintln(c.stderr, "note: --id is deprecated; name the dead letter as an argument, as dlq show does: dlq redrive ID")
				ids = append(ids, id)
			}
			if len(ids) == 0 && f.Reason == "" && f.Topic == "" && since == 0 {
				return usageError{fmt.Errorf("dlq redrive needs IDs, or a filter (--reason, --topic, --since) to redrive many")}
			}
			return c.WithPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				applier, err := c.app.redriveApplier(c.cfg, pool, c.log)
				if err != nil {
					return err
				}
				if len(ids) == 0 {
					fl := filter()
					fl.Unresolved = true
					ds, err := deadletter.List(ctx, pool, fl)
					if err != nil {
						return err
					}
					for _, d := range ds {
						ids = append(ids, d.ID)
					}
					if err := confirm(ctx, c, yes, int64(len(ids)), redriveWhat(ids, f, since)); err != nil {
						return err
					}
				}
				progress := newProgress(c.stderr, "redriving dead letters", int64(len(ids)))
				var results []pipeline.RedriveResult
				for _, id := range ids {
					res, err := applier.Redrive(ctx, id)
					if err != nil {
						res = pipeline.RedriveResult{ID: id, Error: redact.Text(err.Error())}
					}
					results = append(results, res)
					progress.add(1)
				}
				progress.done()
				if asJSON {
					return c.PrintJSON(results)
				}
				resolved := 0
				for _, r := range results {
					switch {
					case r.Already:
						fmt.Fprintf(c.stdout, "%d\talready resolved (%s): nothing done\n", r.ID, r.Resolution)
					case r.Resolution != "":
						resolved++
						fmt.Fprintf(c.stdout, "%d\tresolved: %s\n", r.ID, r.Resolution)
					default:
						fmt.Fprintf(c.stdout, "%d\tstill dead: %s %s\n", r.ID, r.Reason, oneLine(r.Error, 100))
					}
				}
				fmt.Fprintf(c.stdout, "%d of %d redriven dead letters resolved\n", resolved, len(results))
				return nil
			})
		},
	}
	redrive.Flags().BoolVar(&yes, "yes", false, "redrive what a filter selects without asking (dead letters named by ID are never asked about)")
	redrive.Flags().Int64Var(&id, "id", 0, "the dead letter to redrive")
	_ = redrive.Flags().MarkHidden("id") // deprecated: dlq redrive ID
	cmd.AddCommand(list, show, redrive)
	return cmd
}

// redriveWhat says what a filtered redrive would do, for its confirmation:
// how many dead letters, selected how, and their first IDs.
func redriveWhat(ids []int64, f deadletter.Filter, since time.Duration) string {
	var sel []string
	if f.Reason != "" {
		sel = append(sel, "--reason "+f.Reason)
	}
	if f.Topic != "" {
		sel = append(sel, "--topic "+f.Topic)
	}
	if since > 0 {
		sel = append(sel, "--since "+since.String())
	}
	s := fmt.Sprintf("re-apply %d unresolved dead letters (%s)", len(ids), strings.Join(sel, " "))
	if len(ids) > 0 {
		shown := ids[:min(len(ids), 20)]
		parts := make([]string, len(shown))
		for i, id := range shown {
			parts[i] = strconv.FormatInt(id, 10)
		}
		s += ", IDs " + strings.Join(parts, ", ")
		if len(ids) > len(shown) {
			s += fmt.Sprintf(" and %d more", len(ids)-len(shown))
		}
	}
	if f.Limit > 0 && len(ids) >= f.Limit {
		s += fmt.Sprintf(" (--limit %d: more may match)", f.Limit)
	}
	return s + fmt.Sprintf("; 'dlq list --unresolved %s' lists them", strings.Join(sel, " "))
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func deref(s *string, none string) string {
	if s == nil {
		return none
	}
	return *s
}

func oneLine(s string, n int) string {
	b := []rune(s)
	for i, r := range b {
		if r == '\n' || r == '\t' {
			b[i] = ' '
		}
	}
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// parseIDs reads dead letter or intent IDs given as arguments.
func parseIDs(args []string) ([]int64, error) {
	ids := make([]int64, 0, len(args))
	for _, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			return nil, usageError{fmt.Errorf("%q is not an ID (a positive integer, as 'dlq list' shows it)", a)}
		}
		ids = append(ids, id)
	}
	return ids, nil
}
