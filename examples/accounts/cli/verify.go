package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/effectively-io/effectively/examples/accounts/workload"
	"github.com/effectively-io/effectively/service"
)

// Verify is the `verify` command: it compares the database with the end
// state of a workload that `produce --events N --expect FILE` generated.
func Verify(c *service.CLI) *cobra.Command {
	var expectPath string
	var deadLetters int64
	cmd := &cobra.Command{
		Use:   "verify --expect FILE",
		Short: "Compare the database's effects with a generated workload's expected end state",
		Long: `Compare the effect tables with the end state that 'effectively produce
--events N --expect FILE' computed from the events it generated: one claim per
distinct event, every account at its latest version, one ledger entry per
ledger event, every balance. Exits 3 when anything differs (1 when it cannot
run: the database unreachable). Upstream teams use
it with produce to test the contract end to end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if expectPath == "" {
				return service.UsageError(fmt.Errorf("--expect is required: the file 'effectively produce --expect' wrote"))
			}
			exp, err := workload.ReadExpected(expectPath)
			if err != nil {
				return fmt.Errorf("--expect: %w", err)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			conn, err := c.Connect(ctx)
			if err != nil {
				return err
			}
			defer conn.Close(context.WithoutCancel(ctx))
			rep, err := workload.Verify(ctx, conn, exp, deadLetters)
			if err != nil {
				return err
			}
			printReport(c, exp, rep)
			d, err := workload.StateDigest(ctx, conn)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.Stdout(), "effects digest       accounts %.12s ledger %.12s balances %.12s claims %d\n", d.Accounts, d.LedgerEntries, d.Balances, d.Claims)
			if !rep.OK() {
				return service.CheckFailed(fmt.Errorf("the database differs from the expected effects (%d problems)", len(rep.Problems)))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&expectPath, "expect", "", "expected end state written by 'effectively produce --expect'")
	cmd.Flags().Int64Var(&deadLetters, "dead-letters", 0, "dead letters the run should have made")
	return cmd
}

func printReport(c *service.CLI, exp workload.Expected, rep workload.Report) {
	w := c.Stdout()
	fmt.Fprintf(w, "records produced     %d (%d distinct events, %d duplicates re-sent, %d out of order)\n",
		exp.Records, exp.Distinct, exp.Duplicates, exp.OutOfOrder)
	var ds []string
	for d, n := range rep.Claims {
		ds = append(ds, fmt.Sprintf("%s %d", d, n))
	}
	sort.Strings(ds)
	fmt.Fprintf(w, "claims by disposition %s; dead letters %d\n", strings.Join(ds, ", "), rep.DeadLetters)
	fmt.Fprintf(w, "accounts             %d (expected %d)\n", rep.Accounts, len(exp.Accounts))
	fmt.Fprintf(w, "ledger entries       %d\n", rep.LedgerEntries)
	var curs []string
	for cur := range exp.LedgerTotal {
		curs = append(curs, cur)
	}
	sort.Strings(curs)
	for _, cur := range curs {
		fmt.Fprintf(w, "ledger total %s     %s (expected %s)\n", cur, cents(rep.LedgerTotal[cur]), cents(exp.LedgerTotal[cur]))
	}
	if rep.OK() {
		fmt.Fprintln(w, "check                OK: every event has exactly one effect; balances match the generator's totals")
		return
	}
	for _, p := range rep.Problems {
		fmt.Fprintln(w, "PROBLEM", p)
	}
}

func cents(c int64) string {
	sign := ""
	if c < 0 {
		sign, c = "-", -c
	}
	return fmt.Sprintf("%s%d.%02d", sign, c/100, c%100)
}
