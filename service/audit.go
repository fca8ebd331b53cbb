package service

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/effectively-io/effectively/internal/audit"
	"github.com/effectively-io/effectively/internal/broker"
)

func newAuditCmd(c *CLI) *cobra.Command {
	var (
		topic, group, from, to string
		asJSON                 bool
		maxListed              int
	)
	cmd := &cobra.Command{
		Use:   "audit --topic T [--from-time RFC3339] [--to-time RFC3339] [--group G]",
		Short: "Explain every record of a topic range: applied, stale, parked, dead-lettered, duplicate, pruned — or unaccounted (exit 3)",
		Long: `audit reads a topic range from Kafka (read_committed, no consumer group) and
finds what became of each record in PostgreSQL:

  applied, stale, parked  the claim this record made, with its disposition
  dead_lettered           a dead letter for this record's origin (by reason)
  duplicate               its event key was claimed by another record, same payload
  pruned                  no claim or dead letter left, and the record is at or
                          below the pruner's watermark (retention expired them)
  not_processed           at or beyond the group's stored position (not a failure)
  unaccounted             anything else: listed, and the exit code is 3

Records are decoded with the worker's decoder for the topic (its topics:
settings), so keys are derived exactly as the worker derives them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if topic == "" {
				topic = c.cfg.Kafka.Topics[0]
			}
			var fromT, toT time.Time
			var err error
			if from != "" {
				if fromT, err = time.Parse(time.RFC3339, from); err != nil {
					return usageError{fmt.Errorf("--from-time %q is not an RFC 3339 time; fix: e.g. --from-time 2026-01-02T15:04:05Z", from)}
				}
			}
			if to != "" {
				if toT, err = time.Parse(time.RFC3339, to); err != nil {
					return usageError{fmt.Errorf("--to-time %q is not an RFC 3339 time; fix: e.g. --to-time 2026-01-02T15:04:05Z", to)}
				}
			}
			if !fromT.IsZero() && !toT.IsZero() && !fromT.Before(toT) {
				return usageError{fmt.Errorf("--from-time %s is not before --to-time %s; fix: swap them", from, to)}
			}
			if group == "" {
				group = c.cfg.Kafka.Group
			}
			// The topic's decoder, built exactly as run builds it.
			dcfg := c.cfg
			dcfg.Kafka.Topics = []string{topic}
			decoders, err := newDecoders(dcfg, c.log)
			if err != nil {
				return err
			}

			var rep audit.Report
			var prog *progress
			err = c.WithPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) (err error) {
				kopts, err := broker.ClientOpts(c.cfg.Kafka, c.log.Named("kafka"))
				if err != nil {
					return err
				}
				rep, err = audit.Run(ctx, pool, audit.Options{
					Brokers: c.cfg.Kafka.Brokers, Topic: topic, Group: group, ExtraOpts: kopts,
					From: fromT, To: toT, Decoder: decoders[topic], MaxListed: maxListed,
					Logger: c.log.Named("audit"),
					ProgressFunc: func(audited, offsets int64) {
						if prog == nil {
							prog = newProgress(c.stderr, "auditing "+topic+" records", offsets)
						}
						prog.set(audited)
					},
				})
				if prog != nil {
					prog.done()
				}
				return err
			})
			if err != nil {
				return err
			}
			if asJSON {
				if err := c.PrintJSON(rep); err != nil {
					return err
				}
			} else if err := printAudit(c, rep); err != nil {
				return err
			}
			if !rep.Clean() {
				return CheckFailed(fmt.Errorf("%d of %d records of %s are unaccounted for (listed above); look them up with `%s dlq list --topic %s` and in effectively_claims", rep.Counts[audit.Unaccounted], rep.Records, topic, c.app.name(), topic))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&topic, "topic", "", "the topic to audit (default: the first of kafka.topics)")
	f.StringVar(&group, "group", "", "the consumer group whose stored positions say what has been processed (default kafka.group)")
	f.StringVar(&from, "from-time", "", "audit records with a timestamp at or after this RFC 3339 time (default: from the log start)")
	f.StringVar(&to, "to-time", "", "audit records with a timestamp before this RFC 3339 time (default: to the end)")
	f.IntVar(&maxListed, "max-listed", 100, "list at most this many unaccounted records (all are counted)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printAudit(c *CLI, rep audit.Report) error {
	w := c.stdout
	fmt.Fprintf(w, "audit of topic %s for group %s: %d records in %d partitions, read in %s\n",
		rep.Topic, rep.Group, rep.Records, len(rep.Partitions), rep.Took.Round(time.Millisecond))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PARTITION\tFROM\tTO\tRECORDS\tPOSITION\tPRUNED THROUGH\t")
	for _, p := range rep.Partitions {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%s\t%s\t\n", p.Partition, p.From, p.To, p.Records, orDash(p.Position), orDash(p.PrunedThrough))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, o := range audit.Outcomes {
		extra := ""
		if o == audit.DeadLettered && len(rep.DeadLetterReasons) > 0 {
			var rs []string
			for _, r := range slices.Sorted(maps.Keys(rep.DeadLetterReasons)) {
				rs = append(rs, fmt.Sprintf("%s %d", r, rep.DeadLetterReasons[r]))
			}
			extra = "(" + strings.Join(rs, ", ") + ")"
			if rep.Redriven > 0 {
				extra += fmt.Sprintf(", %d redriven since", rep.Redriven)
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", o, rep.Counts[o], extra)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n := rep.Counts[audit.Unaccounted]; n > 0 {
		fmt.Fprintf(w, "\nunaccounted records (%d listed of %d):\n", len(rep.Unaccounted), n)
		for _, r := range rep.Unaccounted {
			ek := ""
			if r.EventKey != "" {
				ek = " event_key=" + r.EventKey
			}
			fmt.Fprintf(w, "  %s/%d@%d key=%s%s: %s\n", r.Topic, r.Partition, r.Offset, r.Key, ek, r.Problem)
		}
		return nil
	}
	fmt.Fprintln(w, "\nevery record is accounted for")
	return nil
}

func orDash(n int64) string {
	if n < 0 {
		return "-"
	}
	return fmt.Sprint(n)
}
