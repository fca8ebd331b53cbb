package service

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/internal/outbox"
	"github.com/effectively-io/effectively/internal/termsafe"
)

func newOutboxCmd(c *CLI) *cobra.Command {
	var (
		f      outbox.Filter
		state  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "outbox",
		Short: "Inspect and settle side-effect intents (calls to the build's targets)",
		Long: `A handler records each side effect as an intent, committed with its effect;
the dispatcher in 'effectively run' delivers it. States: pending, sending, sent,
unknown (a call without idempotency key may or may not have been made: it is
never repeated without 'outbox resolve'), suppressed (a replay of events older
than outbox.retention: recorded, not sent), dead_lettered (the target refused
it with a 4xx).`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&state, "state", "", "only this state (pending, sending, sent, unknown, suppressed, dead_lettered)")
	pf.StringVar(&f.Operation, "operation", "", "only this operation (e.g. warehouse.reserve)")
	pf.StringVar(&f.EventKey, "event-key", "", "only the intents of this event")
	pf.StringVar(&f.Resource, "resource", "", "only this resource (e.g. order:o-1)")
	pf.BoolVar(&asJSON, "json", false, "print JSON")
	filter := func() outbox.Filter { out := f; out.State = outbox.State(state); return out }

	list := &cobra.Command{
		Use:   "list",
		Short: "List intents, oldest first, and the count in each state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.WithPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				is, err := outbox.List(ctx, pool, filter())
				if err != nil {
					return usageIfFilter(err)
				}
				for i := range is {
					is[i].Target = config.RedactURL(is[i].Target) // rows from before named targets may carry credentials
				}
				counts, err := outbox.Counts(ctx, pool)
				if err != nil {
					return err
				}
				if asJSON {
					return c.PrintJSON(struct {
						Intents []outbox.Stored        `json:"intents"`
						Counts  map[outbox.State]int64 `json:"counts"`
					}{is, counts})
				}
				tw := tabwriter.NewWriter(termsafe.NewWriter(c.stdout), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tSTATE\tOPERATION\tRESOURCE\tATTEMPTS\tSTATUS\tCREATED\tLAST ERROR")
				for _, s := range is {
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", s.ID, s.State, s.Operation, s.Resource, s.Attempts,
						statusText(s.LastStatus), s.CreatedAt.Format(time.RFC3339), oneLine(s.LastError, 80))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				fmt.Fprintf(c.stdout, "%d listed; in the outbox:", len(is))
				for _, st := range outbox.States {
					fmt.Fprintf(c.stdout, " %s %d", st, counts[st])
				}
				fmt.Fprintln(c.stdout)
				return nil
			})
		},
	}
	list.Flags().IntVar(&f.Limit, "limit", 1000, "at most this many")

	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show one intent in full, request body included",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := intentID("show", args[0])
			if err != nil {
				return err
			}
			return c.WithPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				s, err := outbox.Get(ctx, pool, id)
				if err != nil {
					return err
				}
				s.Target = config.RedactURL(s.Target)
				if asJSON {
					return c.PrintJSON(s)
				}
				w := termsafe.NewWriter(c.stdout) // payloads, headers and errors are untrusted text
				fmt.Fprintf(w, "id               %d\nstate            %s\noperation        %s\nevent key        %s\nresource         %s\n", s.ID, s.State, s.Operation, s.EventKey, s.Resource)
				target := s.Target
				if s.TargetName != "" {
					target = "target " + s.TargetName + ", path " + s.Target
				}
				fmt.Fprintf(w, "call             %s %s\nidempotency key  %s (sent with the call: %s)\n", s.Method, target, s.IdempotencyKey, yesNo(s.Idempotent))
				fmt.Fprintf(w, "attempts         %d\nlast status      %s\nlast error       %s\n", s.Attempts, statusText(s.LastStatus), s.LastError)
				fmt.Fprintf(w, "created          %s\nupdated          %s\nnext attempt     %s\n", s.CreatedAt.Format(time.RFC3339), s.UpdatedAt.Format(time.RFC3339), s.NextAttemptAt.Format(time.RFC3339))
				if s.SentAt != nil {
					fmt.Fprintf(w, "sent             %s\n", s.SentAt.Format(time.RFC3339))
				}
				fmt.Fprintf(w, "request\n%s\n", s.Request)
				return nil
			})
		},
	}

	var sent, resend bool
	resolve := &cobra.Command{
		Use:   "resolve ID... (--sent | --resend)",
		Short: "Settle unknown intents: --sent if the calls arrived (check the target), --resend if they did not",
		Long: `An intent without idempotency support (a welcome message) that was caught
mid-call by a crash is unknown: the message may or may not have gone out, and a
second message is worse than a missing one, so it is never re-sent on its own.
Check the target (the provider's log), then mark it --sent, or --resend to
deliver it once more. Several IDs settle alike in one call (an outage can
leave hundreds in doubt), in one transaction: the unknown ones are settled,
and each ID that is not unknown (or does not exist) is named, with a non-zero
exit. On a database error none is settled, and the same command can be run
again.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, name := range []string{"state", "operation", "event-key", "resource"} {
				if cmd.Flags().Changed(name) {
					return usageError{fmt.Errorf("outbox resolve: --%s does not apply: resolve settles exactly the IDs given (find them with 'outbox list --state unknown --%s …')", name, name)}
				}
			}
			ids := make([]int64, 0, len(args))
			seen := make(map[int64]bool, len(args))
			for _, a := range args {
				id, err := intentID("resolve", a)
				if err != nil {
					return err
				}
				if !seen[id] {
					seen[id] = true
					ids = append(ids, id)
				}
			}
			if sent == resend {
				return usageError{errors.New("outbox resolve: give exactly one of --sent (the calls arrived) or --resend (they did not)")}
			}
			action := outbox.ResolveSent
			if resend {
				action = outbox.ResolveResend
			}
			return c.WithPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				settled, left, err := outbox.ResolveAll(ctx, pool, ids, action)
				if err != nil && len(settled) == 0 {
					return fmt.Errorf("%w (none of the %d intents was settled; run the same command again)", err, len(ids))
				}
				if err != nil || !asJSON {
					for _, id := range settled {
						if action == outbox.ResolveSent {
							fmt.Fprintf(c.stdout, "intent %d marked sent\n", id)
						} else {
							fmt.Fprintf(c.stdout, "intent %d queued: a running worker's dispatcher delivers it once\n", id)
						}
					}
				}
				if err != nil {
					return err
				}
				if asJSON {
					if settled == nil {
						settled = []int64{}
					}
					if left == nil {
						left = []outbox.NotSettled{}
					}
					if err := c.PrintJSON(struct {
						Action     outbox.Action       `json:"action"`
						Settled    []int64             `json:"settled"`
						NotSettled []outbox.NotSettled `json:"not_settled"`
					}{action, settled, left}); err != nil {
						return err
					}
				}
				if len(left) > 0 {
					errs := make([]error, len(left))
					for i, n := range left {
						errs[i] = n
					}
					return fmt.Errorf("%d of %d intents not settled (only existing unknown ones are; the other %d were): %w", len(left), len(ids), len(settled), errors.Join(errs...))
				}
				return nil
			})
		},
	}
	resolve.Flags().BoolVar(&sent, "sent", false, "the call was made: mark the intent sent")
	resolve.Flags().BoolVar(&resend, "resend", false, "the call was not made: deliver it once more")

	retry := &cobra.Command{
		Use:   "retry [ID...] [--state dead_lettered|suppressed|pending]",
		Short: "Queue intents for delivery now: dead-lettered ones after a fix, suppressed ones on purpose, pending ones without waiting",
		RunE: func(cmd *cobra.Command, args []string) error {
			ids := make([]int64, 0, len(args))
			for _, a := range args {
				id, err := intentID("retry", a)
				if err != nil {
					return err
				}
				ids = append(ids, id)
			}
			if len(ids) == 0 && state == "" {
				return usageError{errors.New("outbox retry needs intent IDs, or --state dead_lettered|suppressed|pending to retry many")}
			}
			return c.WithPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				n, err := outbox.Retry(ctx, pool, filter(), ids...)
				if err != nil {
					return usageIfFilter(err)
				}
				fmt.Fprintf(c.stdout, "%d intents queued: a running worker's dispatcher delivers them\n", n)
				return nil
			})
		},
	}
	cmd.AddCommand(list, show, resolve, retry)
	return cmd
}

func intentID(verb, s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, usageError{fmt.Errorf("outbox %s: %q is not an intent ID (see 'outbox list')", verb, s)}
	}
	return id, nil
}

// usageIfFilter reports a bad --state as a usage error.
func usageIfFilter(err error) error {
	if errors.Is(err, outbox.ErrBadFilter) {
		return usageError{err}
	}
	return err
}

func statusText(s *int) string {
	if s == nil {
		return "-"
	}
	return strconv.Itoa(*s)
}
