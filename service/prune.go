package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/internal/deadletter"
	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/handling"
	"github.com/effectively-io/effectively/internal/outbox"
	"github.com/effectively-io/effectively/internal/pipeline"
)

func newPruneCmd(c *CLI) *cobra.Command {
	var dryRun, asJSON, yes bool
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Expire once what has outlived its retention (claims generations, published dead letters, finished outbox intents, resolved parked events)",
		Long: `prune runs one pass of the pruner that 'effectively run' runs every
dedupe.prune_interval. Claims live in generations: it opens the next
generation when the open one is dedupe.generation_interval old, and drops
whole every generation closed more than dedupe.retention ago (claims of
events still parked move to the open generation first). It deletes
published dead letters last seen before dedupe.retention, resolved parked
events, tombstones, and sent or suppressed outbox intents older than
outbox.retention, in batches of 5,000 rows, each a short transaction,
oldest first. It records the watermarks 'effectively audit' uses to tell a
pruned claim from a missing one. --dry-run only counts (claims by
PostgreSQL's estimate).

prune first counts what it would delete, with the retention of the
configuration it runs with (which must be the workers'), shows it, and asks
before deleting (on a terminal; in a script or a Job, pass --yes).

While a worker's pruner is in the middle of a pass, prune waits for it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.WithPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				if !dryRun && !yes {
					if err := confirmPrune(ctx, c, pool); err != nil {
						return err
					}
				}
				res, err := prune(ctx, c, pool, dryRun)
				if err != nil {
					return err
				}
				if asJSON {
					return c.PrintJSON(res)
				}
				return printPrune(c.stdout, res)
			})
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "count what would be deleted; delete nothing")
	cmd.Flags().BoolVar(&yes, "yes", false, "delete without showing the count and asking first")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// prune runs one pass (or counts, dry), waiting while another pruner holds
// the lock.
func prune(ctx context.Context, c *CLI, pool *pgxpool.Pool, dry bool) (dedupe.PruneResult, error) {
	prog := newProgress(c.stderr, "pruning: rows deleted", 0)
	p, err := newPruner(pool, c.cfg, c.log, prunerMetrics{rows: func(_ string, rows int64) { prog.add(rows) }})
	if err != nil {
		return dedupe.PruneResult{}, err
	}
	defer prog.done()
	if dry {
		return p.Expired(ctx)
	}
	waiting := false
	for {
		res, err := p.Prune(ctx)
		if !errors.Is(err, dedupe.ErrPrunerBusy) {
			return res, err
		}
		if !waiting {
			waiting = true
			fmt.Fprintln(c.stderr, "prune: another pruner is in the middle of a pass (a worker's background pruner?); waiting for it to finish")
		}
		select {
		case <-ctx.Done():
			return res, fmt.Errorf("%w; gave up waiting: %w", dedupe.ErrPrunerBusy, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// confirmPrune counts what a pass would delete (a dry run), shows it on
// stderr and asks; without a terminal it refuses with the count.
func confirmPrune(ctx context.Context, c *CLI, pool *pgxpool.Pool) error {
	dry, err := prune(ctx, c, pool, true)
	if err != nil {
		return err
	}
	rows, gens := dry.Deleted()
	if isTerminal(c.stdin) && rows+int64(gens) > 0 {
		if err := printPrune(c.stderr, dry); err != nil {
			return err
		}
	}
	what := fmt.Sprintf("delete about %d rows (claims by PostgreSQL's estimate) and drop %d claims generations that have outlived dedupe.retention (%s) and outbox.retention (%s) ('prune --dry-run' lists them by table)",
		rows, gens, c.cfg.Dedupe.Retention, c.cfg.Outbox.Retention)
	return confirm(ctx, c, false, rows+int64(gens), what)
}

func printPrune(w io.Writer, res dedupe.PruneResult) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	rowsHeader := "ROWS DELETED"
	if res.DryRun {
		rowsHeader = "ROWS TO DELETE"
	}
	fmt.Fprintf(tw, "TABLE\tOLDER THAN\t%s\tBATCHES\tTOOK\n", rowsHeader)
	for _, t := range res.Tables {
		if t.Generations != nil {
			// Dropped a generation at a time: the rows are PostgreSQL's
			// estimate, the batches are generations.
			fmt.Fprintf(tw, "%s\t%s\t~%d\t%d generation(s)\t%s\n", t.Table, t.Before.UTC().Format(time.RFC3339), t.Rows, len(t.Generations.Dropped), t.Took.Round(time.Millisecond))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", t.Table, t.Before.UTC().Format(time.RFC3339), t.Rows, t.Batches, t.Took.Round(time.Millisecond))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, t := range res.Tables {
		if t.Generations == nil {
			continue
		}
		verb := "dropped"
		if res.DryRun {
			verb = "would drop"
		}
		for _, d := range t.Generations.Dropped {
			fmt.Fprintf(w, "%s: %s generation %d (%s, closed %s, ~%d claims", t.Table, verb, d.Generation, d.Table, d.ClosedAt.UTC().Format(time.RFC3339), d.Claims)
			if !res.DryRun {
				fmt.Fprintf(w, ", %d parked claims moved to the open generation, in %s", d.Parked, d.Took.Round(time.Millisecond))
			}
			fmt.Fprintln(w, ")")
		}
		if t.Generations.Opened != nil {
			fmt.Fprintf(w, "%s: opened generation %d\n", t.Table, *t.Generations.Opened)
		}
		for _, b := range t.Generations.Busy {
			fmt.Fprintf(w, "%s: %s\n", t.Table, b)
		}
	}
	rows, gens := res.Deleted()
	generations := "claims generations"
	if gens == 1 {
		generations = "claims generation"
	}
	if res.DryRun {
		fmt.Fprintf(w, "dry run: %d rows would be deleted and %d %s dropped (counted in %s); nothing was deleted\n", rows, gens, generations, res.Took.Round(time.Millisecond))
		return nil
	}
	fmt.Fprintf(w, "pruned %d rows and %d %s in %s\n", rows, gens, generations, res.Took.Round(time.Millisecond))
	return nil
}

// prunedTables are the tables retention prunes, in order, each by the
// statements of the package that owns it.
var prunedTables = []dedupe.PrunedTable{dedupe.Claims, deadletter.Pruned, outbox.Pruned, pipeline.ParkedPruned, handling.TombstonesPruned}

// newPruner configures the pruner from dedupe.* and outbox.retention.
func newPruner(pool *pgxpool.Pool, cfg config.Config, log *zap.Logger, m prunerMetrics) (*dedupe.Pruner, error) {
	return dedupe.NewPruner(pool, dedupe.PrunerOptions{
		Retention:          cfg.Dedupe.Retention,
		OutboxRetention:    cfg.Outbox.Retention,
		Interval:           cfg.Dedupe.PruneInterval,
		GenerationInterval: cfg.Dedupe.ClaimGenerationInterval(),
		Tables:             prunedTables,
		Logger:             log.Named("pruner"),
		PrunedFunc:         m.rows,
		PassedFunc:         m.passed,
	})
}

// prunerMetrics are the pruner's hooks into its metric families.
type prunerMetrics struct {
	rows   func(table string, rows int64)
	passed func()
}

// newPrunerMetrics registers effectively_pruned_rows_total{table} and
// effectively_pruner_last_pass_timestamp_seconds, and returns the hooks
// that set them.
func newPrunerMetrics(reg prometheus.Registerer) prunerMetrics {
	rows := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "effectively_pruned_rows_total",
		Help: "Rows the retention pruner deleted, by table (effectively_claims — PostgreSQL's estimate of the rows of the generations it dropped —, dead_letters, outbox, parked_events, effectively_tombstones).",
	}, []string{"table"})
	for _, t := range prunedTables {
		rows.WithLabelValues(t.Name) // export zeros from the start
	}
	last := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "effectively_pruner_last_pass_timestamp_seconds",
		Help: "Unix time at which this worker's pruner last completed a pass over every pruned table (0 until its first; one replica at a time holds the pruner's lock, so take the max over replicas). A pruner that stops completing passes stops expiring claims: storage then grows with traffic.",
	})
	reg.MustRegister(rows, last)
	return prunerMetrics{
		rows:   func(table string, n int64) { rows.WithLabelValues(table).Add(float64(n)) },
		passed: last.SetToCurrentTime,
	}
}
