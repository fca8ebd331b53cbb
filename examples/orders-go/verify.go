package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/effectively-io/effectively/examples/orders-go/workload"
	"github.com/effectively-io/effectively/service"
)

// verifyCmd is `orders verify --expect FILE`: it compares the database
// with the end state `produce --events N --expect FILE` computed.
func verifyCmd(c *service.CLI) *cobra.Command {
	var (
		expectPath string
		opts       workload.Options
	)
	cmd := &cobra.Command{
		Use:   "verify --expect FILE",
		Short: "Compare orders, order lines, claims and reservations with a generated workload's expected end state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if expectPath == "" {
				return service.UsageError(fmt.Errorf("--expect is required: the file 'orders produce --expect' wrote"))
			}
			exp, err := workload.ReadExpected(expectPath)
			if err != nil {
				return fmt.Errorf("--expect: %w", err)
			}
			// Without a warehouse URL the handler records no reservations.
			opts.Intents = c.Config().Targets[TargetWarehouse].URL != ""
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			conn, err := c.Connect(ctx)
			if err != nil {
				return err
			}
			defer conn.Close(context.WithoutCancel(ctx))
			rep, err := workload.Verify(ctx, conn, exp, opts)
			if err != nil {
				return err
			}
			w := c.Stdout()
			var ds []string
			for d, n := range rep.Claims {
				ds = append(ds, fmt.Sprintf("%s %d", d, n))
			}
			sort.Strings(ds)
			fmt.Fprintf(w, "records produced  %d (%d distinct, %d duplicates, %d swapped, %d lines before their order)\n",
				exp.Records, exp.Distinct, exp.Duplicates, exp.OutOfOrder, exp.LinesEarly)
			fmt.Fprintf(w, "claims            %s; dead letters %d\n", strings.Join(ds, ", "), rep.DeadLetters)
			fmt.Fprintf(w, "orders            %d (expected %d)\n", rep.Orders, len(exp.Orders))
			fmt.Fprintf(w, "order lines       %d (expected %d; %d orphans parked)\n", rep.Lines, len(exp.Lines), len(exp.Parked))
			fmt.Fprintf(w, "reservations      %d (order.placed events %d)\n", rep.Intents, exp.Placed)
			for _, p := range rep.Problems {
				fmt.Fprintln(w, "PROBLEM", p)
			}
			if !rep.OK() {
				return service.CheckFailed(fmt.Errorf("the database differs from the expected effects (%d problems)", len(rep.Problems)))
			}
			fmt.Fprintln(w, "check             OK: every event has exactly one effect")
			return nil
		},
	}
	cmd.Flags().StringVar(&expectPath, "expect", "", "expected end state written by 'orders produce --expect'")
	cmd.Flags().Int64Var(&opts.DeadLetters, "dead-letters", 0, "dead letters the run should have made")
	cmd.Flags().Int64Var(&opts.DeadLetteredClaims, "dead-lettered-claims", 0, "of which decodable events refused by a handler (they have a claim)")
	return cmd
}
