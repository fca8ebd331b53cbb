package service

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/effectively-io/effectively/internal/pipeline"
)

func newParkedCmd(c *CLI) *cobra.Command {
	var f pipeline.ParkedFilter
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "parked",
		Short: "Inspect and resolve events waiting for a prerequisite",
		Long: `Events whose prerequisite does not exist yet (an order line for an order not
yet placed) wait in parked_events. The prerequisite's arrival releases them in
their original order; a sweeper retries them with backoff and dead-letters
them past parking.max_age or parking.max_attempts.`,
	}
	cmd.PersistentFlags().StringVar(&f.Resource, "resource", "", "only this resource (e.g. an order ID)")
	cmd.PersistentFlags().StringVar(&f.EventKey, "event-key", "", "only this event key")
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print JSON")

	list := &cobra.Command{
		Use:   "list",
		Short: "List parked events in release order",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.WithPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				ps, err := pipeline.ListParked(ctx, pool, f)
				if err != nil {
					return err
				}
				if asJSON {
					return c.PrintJSON(ps)
				}
				tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "RESOURCE\tTYPE\tORIGIN\tATTEMPTS\tPARKED\tNEXT ATTEMPT\tEVENT KEY")
				now := time.Now()
				for _, p := range ps {
					fmt.Fprintf(tw, "%s\t%s\t%s/%d@%d\t%d\t%s ago\tin %s\t%s\n", p.Resource, p.Type, p.Topic, p.Partition, p.Offset,
						p.Attempts, now.Sub(p.ParkedAt).Round(time.Second), max(p.NextAttemptAt.Sub(now), 0).Round(time.Second), p.EventKey)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				fmt.Fprintf(c.stdout, "%d parked\n", len(ps))
				return nil
			})
		},
	}
	list.Flags().IntVar(&f.Limit, "limit", 1000, "at most this many")

	var yes bool
	release := &cobra.Command{
		Use:   "release",
		Short: "Retry parked events now (those whose prerequisite exists are applied by the next sweep)",
		Long: `Make the selected parked events (all of them without --resource or
--event-key) due now: a running worker's sweeper releases those whose
prerequisite exists. It counts them and asks first (on a terminal; in a
script, pass --yes).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.WithPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				due, err := pipeline.CountParkedMatching(ctx, pool, f)
				if err != nil {
					return err
				}
				if err := confirm(ctx, c, yes, due, fmt.Sprintf("make %d parked events %s due now (a running worker's sweeper then releases those whose prerequisite exists)", due, parkedSelection(f))); err != nil {
					return err
				}
				n, err := pipeline.RetryNow(ctx, pool, f)
				if err != nil {
					return err
				}
				if asJSON {
					return c.PrintJSON(struct {
						Due int64 `json:"due"`
					}{n})
				}
				fmt.Fprintf(c.stdout, "%d parked events are due now; a running worker's sweeper releases those whose prerequisite exists\n", n)
				return nil
			})
		},
	}
	var why string
	drop := &cobra.Command{
		Use:   "drop",
		Short: "Give up on parked events: dead-letter them with reason dropped",
		Long: `Dead-letter the parked events of --resource (or the one --event-key
names) with reason dropped and the --reason given: they leave parking for
good ('dlq redrive' can re-apply them later). It counts them and asks first
(on a terminal; in a script, pass --yes).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.Resource == "" && f.EventKey == "" {
				return usageError{fmt.Errorf("drop needs --resource or --event-key")}
			}
			return c.WithPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				parked, err := pipeline.CountParkedMatching(ctx, pool, f)
				if err != nil {
					return err
				}
				if err := confirm(ctx, c, yes, parked, fmt.Sprintf("dead-letter %d parked events %s with reason dropped (%q)", parked, parkedSelection(f), why)); err != nil {
					return err
				}
				n, err := pipeline.DropParked(ctx, pool, f, why)
				if err != nil {
					return err
				}
				if asJSON {
					return c.PrintJSON(struct {
						DeadLettered int `json:"dead_lettered"`
					}{n})
				}
				fmt.Fprintf(c.stdout, "%d parked events dead-lettered (reason dropped)\n", n)
				return nil
			})
		},
	}
	drop.Flags().StringVar(&why, "reason", "no reason given", "why, recorded in the dead letter")
	release.Flags().BoolVar(&yes, "yes", false, "do not ask first")
	drop.Flags().BoolVar(&yes, "yes", false, "do not ask first")
	cmd.AddCommand(list, release, drop)
	return cmd
}

// parkedSelection names what a parked filter selects, for confirmations.
func parkedSelection(f pipeline.ParkedFilter) string {
	switch {
	case f.Resource != "" && f.EventKey != "":
		return fmt.Sprintf("of resource %s with event key %s", f.Resource, f.EventKey)
	case f.Resource != "":
		return "of resource " + f.Resource
	case f.EventKey != "":
		return "with event key " + f.EventKey
	}
	return "of every resource"
}
