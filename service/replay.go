package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
	"github.com/twmb/franz-go/plugin/kzap"
	"go.uber.org/zap"
	"golang.org/x/term"

	"github.com/effectively-io/effectively/internal/broker"
	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/replay"
)

// replayFlags are the replay command's flags.
type replayFlags struct {
	group, topic     string
	since            time.Duration
	fromTime, toTime string
	toOffsets        string
	fromStart        bool
	execute, dryRun  bool
	asJSON           bool
	replayGroup      string
	progressInterval time.Duration
	// removeMembers are static members the operator states are stopped;
	// removeStopped looks at every static member and refuses while any is
	// running or not proven stopped (see removeStopped).
	removeMembers []string
	removeStopped bool
}

// from checks that exactly one start is given and returns it.
func (f *replayFlags) from(now time.Time) (replay.From, error) {
	n := 0
	for _, set := range []bool{f.since != 0, f.fromTime != "", f.toOffsets != "", f.fromStart} {
		if set {
			n++
		}
	}
	if n != 1 {
		return replay.From{}, errors.New("give exactly one of --since DURATION, --from-time RFC3339, --to-offsets P:O,… or --from-start")
	}
	switch {
	case f.since < 0:
		return replay.From{}, fmt.Errorf("--since %s: want a positive duration such as 24h", f.since)
	case f.since > 0:
		return replay.From{Time: now.Add(-f.since)}, nil
	case f.fromTime != "":
		t, err := time.Parse(time.RFC3339, f.fromTime)
		if err != nil {
			return replay.From{}, fmt.Errorf("--from-time %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", f.fromTime)
		}
		return replay.From{Time: t}, nil
	case f.toOffsets != "":
		offs, err := replay.ParseOffsets(f.toOffsets)
		if err != nil {
			return replay.From{}, fmt.Errorf("--to-offsets: %w", err)
		}
		return replay.From{Offsets: offs}, nil
	}
	return replay.From{Start: true}, nil
}

func newReplayCmd(c *CLI) *cobra.Command {
	var f replayFlags
	cmd := &cobra.Command{
		Use:   "replay --topic T (--since D | --from-time T | --to-offsets P:O,… | --from-start) [--group G [--execute]] [--replay-group NAME [--to-time T]]",
		Short: "Rewind the group over a topic, or replay a range of it under a separate group",
		Long: `Two modes.

Rewind the group (--group, default kafka.group): moves the group's positions
back to the start given, in PostgreSQL (authoritative: the workers start there)
and in Kafka, so the workers read those records again. Without --execute it
only prints the plan: per partition the current position, the target, the
records to reprocess and the time span of those records. It refuses while the
group has active members (stop the workers first) and never moves a position
forward.

Bounded replay (--replay-group NAME): runs the worker's pipeline as a member of
its own group NAME over [start, --to-time) (default: up to the end of each
partition when it starts) and exits when done, with progress and a report by
disposition. The main group's positions are untouched.

Replaying is safe: a record whose event was applied before is a duplicate and
runs no handler; state updates are version-gated, relative rows keyed by event,
and side-effect intents unique per (event, operation), so nothing fires twice.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			from, err := f.from(time.Now())
			if err != nil {
				return usageError{err: err}
			}
			if f.execute && f.dryRun {
				return usageError{errors.New("--execute and --dry-run contradict each other: leave out --dry-run to change the positions")}
			}
			if f.toTime != "" && f.replayGroup == "" {
				return usageError{errors.New("--to-time bounds a replay under its own group: add --replay-group NAME")}
			}
			if f.group == "" {
				f.group = c.cfg.Kafka.Group
			}
			if f.topic == "" {
				f.topic = c.cfg.Kafka.Topics[0]
			}
			r, err := newReplayer(cmd.Context(), c, f.topic)
			if err != nil {
				return err
			}
			defer r.close()
			if f.replayGroup != "" {
				if f.execute {
					return usageError{errors.New("--execute belongs to rewinding the group: a bounded replay (--replay-group) runs without it (--dry-run prints its plan)")}
				}
				return r.bounded(cmd.Context(), &f, from)
			}
			return r.rewind(cmd.Context(), &f, from)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.group, "group", "", "consumer group to rewind (default kafka.group)")
	fl.StringVar(&f.topic, "topic", "", "topic (default the first of kafka.topics)")
	fl.DurationVar(&f.since, "since", 0, "start at the first record of the last DURATION (e.g. 24h), by record timestamp")
	fl.StringVar(&f.fromTime, "from-time", "", "start at the first record at or after this RFC 3339 time")
	fl.StringVar(&f.toOffsets, "to-offsets", "", "start at these offsets: partition:offset,… (other partitions are left alone)")
	fl.BoolVar(&f.fromStart, "from-start", false, "start at the first record each partition still has")
	fl.BoolVar(&f.execute, "execute", false, "rewind: change the positions (without it, only print the plan)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print the plan and change nothing (the default for rewinding)")
	fl.BoolVar(&f.asJSON, "json", false, "print JSON")
	fl.StringVar(&f.replayGroup, "replay-group", "", "replay the range under this group (not the workers' group) through the worker's pipeline, then exit")
	fl.StringVar(&f.toTime, "to-time", "", "bounded replay: stop before the first record at or after this RFC 3339 time (default: the end of each partition at the start)")
	fl.DurationVar(&f.progressInterval, "progress-interval", 5*time.Second, "bounded replay: how often to print a progress line when stdout is not a terminal")
	fl.StringSliceVar(&f.removeMembers, "remove-member", nil, "rewind with --execute: first remove this static member (its kafka.instance_id), which you know is stopped, instead of waiting out its session; refused if its admin server (its host, the port of http.addr) answers as it (repeatable)")
	fl.BoolVar(&f.removeStopped, "remove-stopped-members", false, "rewind with --execute: first look at every static member and remove those proven stopped (named with --remove-member); refuses, removing nothing, while any answers as itself or is not named, and prints the --remove-member flags to check and add")
	return cmd
}

// replayer holds the connections a replay uses.
type replayer struct {
	c          *CLI
	kcl        *kgo.Client
	adm        *kadm.Client
	pool       *pgxpool.Pool
	partitions int
	planner    *replay.Planner
}

func newReplayer(ctx context.Context, c *CLI, topic string) (*replayer, error) {
	if err := c.app.checkSchema(ctx, c.cfg); err != nil {
		return nil, err
	}
	kopts, err := broker.ClientOpts(c.cfg.Kafka, c.log.Named("kafka"))
	if err != nil {
		return nil, err
	}
	kcl, err := kgo.NewClient(append(kopts, kgo.WithLogger(kzap.New(c.log.Named("kafka"), kzap.Level(kgo.LogLevelWarn))))...)
	if err != nil {
		return nil, err
	}
	if _, err := checkKafka(ctx, kcl, c.cfg.Kafka, nil); err != nil {
		kcl.Close()
		return nil, err
	}
	adm := kadm.NewClient(kcl)
	details, err := adm.ListTopics(ctx, topic)
	if err != nil {
		kcl.Close()
		return nil, fmt.Errorf("listing topic %s: %w", topic, err)
	}
	if d, ok := details[topic]; !ok || d.Err != nil {
		kcl.Close()
		return nil, usageError{fmt.Errorf("topic %s does not exist on %s; fix: name an existing topic with --topic", topic, strings.Join(c.cfg.Kafka.Brokers, ","))}
	}
	partitions := len(details[topic].Partitions)
	// One connection per partition for a bounded replay's partition workers.
	pool, err := openPool(ctx, c.cfg.Postgres, partitions, nil)
	if err != nil {
		kcl.Close()
		return nil, err
	}
	return &replayer{c: c, kcl: kcl, adm: adm, pool: pool, partitions: partitions,
		planner: &replay.Planner{DB: pool, Admin: adm, Brokers: c.cfg.Kafka.Brokers, StartOffset: c.cfg.Kafka.StartOffset, ExtraOpts: kopts}}, nil
}

func (r *replayer) close() {
	r.pool.Close()
	r.kcl.Close()
}

// rewind plans and (with --execute) carries out the rewind of f.group.
func (r *replayer) rewind(ctx context.Context, f *replayFlags, from replay.From) error {
	if (len(f.removeMembers) > 0 || f.removeStopped) && f.execute {
		if err := r.removeStopped(ctx, f); err != nil {
			return err
		}
	}
	plan, ahead, err := r.planner.PlanRewind(ctx, f.group, f.topic, from)
	if err != nil {
		return err
	}
	var refused error
	if ahead != nil {
		refused = usageError{ahead}
	}
	execute := f.execute && refused == nil
	if !execute {
		if f.asJSON {
			if err := r.c.PrintJSON(struct {
				replay.Plan
				DryRun bool `json:"dry_run"`
			}{plan, true}); err != nil {
				return err
			}
		} else {
			printPlan(r.c.stdout, plan)
			if refused == nil {
				fmt.Fprintf(r.c.stdout, "dry run: nothing was changed. To apply this plan, stop the workers of group %s and run the same command with --execute.\n", plan.Group)
			}
		}
		return refused
	}

	done, err := r.planner.ExecuteRewind(ctx, plan)
	if f.asJSON {
		out := struct {
			replay.Plan
			replay.Executed
			Error string `json:"error,omitempty"`
		}{Plan: plan, Executed: done}
		if err != nil {
			out.Error = err.Error()
		}
		if perr := r.c.PrintJSON(out); perr != nil {
			return perr
		}
		return err
	}
	printPlan(r.c.stdout, plan)
	if len(done.ResetEpochs) > 0 || err == nil {
		fmt.Fprintf(r.c.stdout, "PostgreSQL: %d partition(s) rewound%s\n", len(done.ResetEpochs), epochList(done.ResetEpochs))
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(r.c.stdout, "Kafka: %d partition(s) committed for group %s\n", len(done.KafkaCommitted), plan.Group)
	fmt.Fprintf(r.c.stdout, "done: start the workers; they reprocess %d records (re-read events are duplicates and fire nothing again).\n", plan.Records)
	return nil
}

func epochList(m map[int32]int64) string {
	if len(m) == 0 {
		return ""
	}
	ps := make([]int32, 0, len(m))
	for p := range m {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("%d: %d", p, m[p])
	}
	return "; reset_epoch by partition " + strings.Join(parts, ", ")
}

func printPlan(w io.Writer, plan replay.Plan) {
	fmt.Fprintf(w, "replay plan: group %s, topic %s, rewind to %s\n", plan.Group, plan.Topic, plan.From)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tCURRENT\tKAFKA\tTARGET\tRECORDS\tFIRST RECORD\tLAST RECORD\tACTION")
	for _, pp := range plan.Partitions {
		cur := fmt.Sprint(pp.CurrentOffset)
		if pp.StoredOffset == nil {
			cur += " (none stored)"
		}
		kafka := "-"
		switch {
		case pp.KafkaOffset == nil:
		case pp.StoredOffset != nil && *pp.KafkaOffset == *pp.StoredOffset:
			kafka = "="
		default:
			kafka = fmt.Sprint(*pp.KafkaOffset)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", pp.Partition, cur, kafka, pp.TargetOffset, pp.Records,
			timeOrDash(pp.FirstRecord), timeOrDash(pp.LastRecord), pp.Action)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "records to reprocess: %d (CURRENT is PostgreSQL's stored position; KAFKA is the group's Kafka commit, = when equal)\n", plan.Records)
}

func timeOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339)
}

// bounded runs a bounded replay under f.replayGroup.
func (r *replayer) bounded(ctx context.Context, f *replayFlags, from replay.From) error {
	cfg := r.c.cfg
	name := f.replayGroup
	mainGroup := name == cfg.Kafka.Group
	if err := replay.RequireNoMembers(ctx, r.adm, name); err != nil {
		if mainGroup {
			return fmt.Errorf("--replay-group %s is the workers' own group (kafka.group): %w", name, err)
		}
		return fmt.Errorf("--replay-group %s is in use (another replay?): %w", name, err)
	}
	plan, err := r.planner.Plan(ctx, name, f.topic, from)
	if err != nil {
		return err
	}
	if ahead := plan.WithAction(replay.ActionAhead); mainGroup && len(ahead) > 0 {
		return usageError{fmt.Errorf("--replay-group %s is the workers' group (kafka.group) and the start is past its position on %d partition(s): that would skip records; fix: use a replay group of its own", name, len(ahead))}
	}
	b, err := r.planner.Bounds(ctx, f.topic)
	if err != nil {
		return err
	}
	to := b.End
	if f.toTime != "" {
		t, err := time.Parse(time.RFC3339, f.toTime)
		if err != nil {
			return usageError{fmt.Errorf("--to-time %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", f.toTime)}
		}
		if to, err = r.planner.OffsetsAt(ctx, f.topic, t); err != nil {
			return err
		}
	}
	fromOffs, toOffs := map[int32]int64{}, map[int32]int64{}
	for p := range b.End {
		fromOffs[p], toOffs[p] = 0, 0 // partitions outside the plan replay nothing
	}
	var total int64
	for _, pp := range plan.Partitions {
		fromOffs[pp.Partition] = pp.TargetOffset
		toOffs[pp.Partition] = max(pp.TargetOffset, min(to[pp.Partition], b.End[pp.Partition]))
		total += toOffs[pp.Partition] - pp.TargetOffset
	}
	if f.dryRun {
		return r.printBoundedPlan(ctx, f, plan, fromOffs, toOffs, total)
	}

	// The replay group's positions start at the range's start.
	if _, err := replay.Execute(ctx, r.pool, r.adm, plan, replay.ExecuteOptions{Forward: !mainGroup}); err != nil {
		var kerr *replay.KafkaCommitError
		if !errors.As(err, &kerr) {
			return err
		}
		r.c.log.Warn("committing the replay group's start offsets to Kafka failed; its PostgreSQL positions are set, which is what the replay uses", zap.Error(err))
	}

	cfg.Kafka.Group, cfg.Kafka.Topics, cfg.Kafka.InstanceID = name, []string{f.topic}, ""
	cfg.Kafka.ClientID = "effectively-replay"
	applier, err := r.c.app.newApplier(ctx, cfg, r.pool, r.c.log, nil, nil)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	kmetrics := kprom.NewMetrics("effectively_kafka", kprom.Registerer(reg), kprom.Gatherer(reg))
	progress, stopProgress := r.progress(f, total)
	copts := consumerOptions(cfg, r.c.log.Named("replay"), nil, kmetrics)
	copts.ExtraOpts = r.planner.ExtraOpts
	rep, err := replay.Bounded(ctx, replay.BoundedOptions{
		Consumer: copts,
		Applier:  applier,
		Topic:    f.topic,
		From:     fromOffs,
		To:       toOffs,
		Progress: progress,
	})
	stopProgress()
	if f.asJSON {
		if perr := r.c.PrintJSON(rep); perr != nil {
			return perr
		}
	} else {
		printBoundedReport(r.c.stdout, rep)
	}
	return err
}

func (r *replayer) printBoundedPlan(ctx context.Context, f *replayFlags, plan replay.Plan, from, to map[int32]int64, total int64) error {
	first, last, err := r.planner.RecordTimes(ctx, f.topic, from, to)
	if err != nil {
		return err
	}
	type row struct {
		Partition int32      `json:"partition"`
		From      int64      `json:"from_offset"`
		To        int64      `json:"to_offset"`
		Records   int64      `json:"records"`
		First     *time.Time `json:"first_record_time,omitempty"`
		Last      *time.Time `json:"last_record_time,omitempty"`
	}
	var rows []row
	for _, pp := range plan.Partitions {
		p := pp.Partition
		rw := row{Partition: p, From: from[p], To: to[p], Records: to[p] - from[p]}
		if t, ok := first[p]; ok {
			rw.First = &t
		}
		if t, ok := last[p]; ok {
			rw.Last = &t
		}
		rows = append(rows, rw)
	}
	if f.asJSON {
		return r.c.PrintJSON(map[string]any{"replay_group": f.replayGroup, "topic": f.topic, "partitions": rows, "records": total, "dry_run": true})
	}
	fmt.Fprintf(r.c.stdout, "bounded replay plan: group %s, topic %s, from %s\n", f.replayGroup, f.topic, plan.From)
	tw := tabwriter.NewWriter(r.c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tFROM\tTO\tRECORDS\tFIRST RECORD\tLAST RECORD")
	for _, rw := range rows {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%s\t%s\n", rw.Partition, rw.From, rw.To, rw.Records, timeOrDash(rw.First), timeOrDash(rw.Last))
	}
	_ = tw.Flush()
	fmt.Fprintf(r.c.stdout, "records to replay: %d\ndry run: nothing was changed; run without --dry-run to replay.\n", total)
	return nil
}

// progress shows a bounded replay's progress: a bar on a terminal, a line
// every --progress-interval otherwise (on stderr with --json, so stdout
// stays JSON).
func (r *replayer) progress(f *replayFlags, total int64) (update func(done, total int64), stop func()) {
	out := r.c.stdout
	if file, ok := out.(*os.File); ok && term.IsTerminal(int(file.Fd())) && !f.asJSON {
		bar := progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(out),
			progressbar.OptionSetDescription("replaying "+f.topic),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("records"),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionFullWidth(),
		)
		return func(done, _ int64) { _ = bar.Set64(done) }, func() { _ = bar.Finish(); fmt.Fprintln(out) }
	}
	if f.asJSON {
		out = r.c.stderr
	}
	var done atomic.Int64
	quit := make(chan struct{})
	finished := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(finished)
		tick := time.NewTicker(max(f.progressInterval, 100*time.Millisecond))
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				fmt.Fprintln(out, progressLine(done.Load(), total, time.Since(start)))
			}
		}
	}()
	return func(d, _ int64) { done.Store(d) }, func() { close(quit); <-finished }
}

func progressLine(done, total int64, elapsed time.Duration) string {
	pct := 100.0
	if total > 0 {
		pct = 100 * float64(done) / float64(total)
	}
	rate := float64(done) / elapsed.Seconds()
	eta := "-"
	if rate > 0 && done < total {
		eta = (time.Duration(float64(total-done)/rate) * time.Second).Round(time.Second).String()
	}
	return fmt.Sprintf("replayed %d/%d records (%.1f%%), %.0f records/s, ETA %s", done, total, pct, rate, eta)
}

func printBoundedReport(w io.Writer, rep replay.Report) {
	state := "complete"
	if !rep.Complete {
		state = "INCOMPLETE"
	}
	fmt.Fprintf(w, "bounded replay of %s under group %s: %s, %d records in %s (%.0f records/s)\n",
		rep.Topic, rep.Group, state, rep.Records, rep.Elapsed.Round(time.Millisecond), rep.Rate)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DISPOSITION\tRECORDS")
	for _, d := range []dedupe.Disposition{dedupe.Applied, dedupe.Duplicate, dedupe.Stale, dedupe.Parked, dedupe.DeadLettered, dedupe.Skipped} {
		fmt.Fprintf(tw, "%s\t%d\n", d, rep.Dispositions[string(d)])
	}
	_ = tw.Flush()
	if len(rep.DeadLetters) > 0 {
		fmt.Fprintf(w, "dead letters by reason: %s (see effectively dlq list)\n", countList(rep.DeadLetters))
	}
	if len(rep.Released) > 0 {
		fmt.Fprintf(w, "parked events released by replayed prerequisites: %s\n", countList(rep.Released))
	}
}

func countList(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
