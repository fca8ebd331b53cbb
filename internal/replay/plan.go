package replay

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/internal/dedupe"
)

// From is where a replay starts: exactly one of its fields is set.
type From struct {
	// Start: each partition's log start offset.
	Start bool
	// Time: the first offset of each partition whose record timestamp is at
	// or after it.
	Time time.Time
	// Offsets: explicit offsets of some partitions (the others are left
	// alone).
	Offsets map[int32]int64
}

// String describes f for the plan's header.
func (f From) String() string {
	switch {
	case f.Start:
		return "the start of each partition"
	case !f.Time.IsZero():
		return "the first record at or after " + f.Time.UTC().Format(time.RFC3339)
	default:
		return "explicit offsets"
	}
}

// ParseOffsets parses "p:o,p:o,…".
func ParseOffsets(s string) (map[int32]int64, error) {
	out := map[int32]int64{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		ps, os, ok := strings.Cut(item, ":")
		p, perr := strconv.ParseInt(strings.TrimSpace(ps), 10, 32)
		o, oerr := strconv.ParseInt(strings.TrimSpace(os), 10, 64)
		if !ok || perr != nil || oerr != nil || p < 0 || o < 0 {
			return nil, fmt.Errorf("%q: want partition:offset, both integers ≥ 0 (e.g. 0:1200,3:0)", item)
		}
		if _, dup := out[int32(p)]; dup {
			return nil, fmt.Errorf("partition %d is listed twice", p)
		}
		out[int32(p)] = o
	}
	if len(out) == 0 {
		return nil, errors.New("no partition:offset pairs")
	}
	return out, nil
}

// Actions of a partition in a plan.
const (
	// ActionRewind: the target is below the current position.
	ActionRewind = "rewind"
	// ActionUnchanged: the target is the current position.
	ActionUnchanged = "unchanged"
	// ActionAhead: the target is past the current position; replay only
	// rewinds, so the partition is left alone.
	ActionAhead = "refused: target ahead"
)

// PartitionPlan is what a rewind does to one partition.
type PartitionPlan struct {
	Partition int32 `json:"partition"`
	// StoredOffset is the position PostgreSQL holds (authoritative), nil
	// when it holds none; KafkaOffset is the group's committed offset, nil
	// when there is none.
	StoredOffset *int64 `json:"stored_offset"`
	KafkaOffset  *int64 `json:"kafka_offset"`
	// CurrentOffset is where the group resumes now: the stored position,
	// else Kafka's commit, else where a new group starts.
	CurrentOffset int64 `json:"current_offset"`
	TargetOffset  int64 `json:"target_offset"`
	// Records is how many offsets the group reads again (target up to
	// current; transaction markers count too).
	Records int64 `json:"records"`
	// FirstRecord and LastRecord are the timestamps of the first and last
	// record to read again.
	FirstRecord *time.Time `json:"first_record_time,omitempty"`
	LastRecord  *time.Time `json:"last_record_time,omitempty"`
	// LogStart and End bound the partition (log start, high watermark).
	LogStart int64  `json:"log_start_offset"`
	End      int64  `json:"end_offset"`
	Action   string `json:"action"`
}

// Plan is a rewind of one group on one topic.
type Plan struct {
	Group      string          `json:"group"`
	Topic      string          `json:"topic"`
	From       string          `json:"from"`
	Partitions []PartitionPlan `json:"partitions"`
	// Records is the sum of the partitions' Records.
	Records int64 `json:"records"`
}

// WithAction returns the partitions the plan gives action a.
func (p Plan) WithAction(a string) []PartitionPlan {
	var out []PartitionPlan
	for _, pp := range p.Partitions {
		if pp.Action == a {
			out = append(out, pp)
		}
	}
	return out
}

// Targets returns the plan as --to-offsets would say it.
func (p Plan) Targets() string {
	parts := make([]string, 0, len(p.Partitions))
	for _, pp := range p.Partitions {
		if pp.Action != ActionAhead {
			parts = append(parts, fmt.Sprintf("%d:%d", pp.Partition, pp.TargetOffset))
		}
	}
	return strings.Join(parts, ",")
}

// Planner reads what a plan needs: positions from PostgreSQL, offsets and
// record timestamps from Kafka.
type Planner struct {
	// DB holds consumer_offsets.
	DB *pgxpool.Pool
	// Admin is an admin client; Brokers seed the short-lived readers of
	// record timestamps.
	Admin   *kadm.Client
	Brokers []string
	// ExtraOpts are appended to the readers' franz-go options (TLS, SASL).
	ExtraOpts []kgo.Opt
	// StartOffset is where a partition without any position starts
	// ("earliest" or "latest"), as kafka.start_offset says.
	StartOffset string
}

// Bounds are a topic's log start and end offsets, by partition.
type Bounds struct {
	Start, End map[int32]int64
}

// Bounds lists the topic's partitions with their log start and high
// watermark, checking every partition's error.
func (pl *Planner) Bounds(ctx context.Context, topic string) (Bounds, error) {
	starts, err := pl.Admin.ListStartOffsets(ctx, topic)
	if err != nil {
		return Bounds{}, fmt.Errorf("listing the start offsets of %s: %w", topic, err)
	}
	ends, err := pl.Admin.ListEndOffsets(ctx, topic)
	if err != nil {
		return Bounds{}, fmt.Errorf("listing the end offsets of %s: %w", topic, err)
	}
	b := Bounds{Start: map[int32]int64{}, End: map[int32]int64{}}
	for name, l := range map[string]kadm.ListedOffsets{"start": starts, "end": ends} {
		if len(l[topic]) == 0 {
			return Bounds{}, fmt.Errorf("topic %s does not exist (--topic)", topic)
		}
		for p, o := range l[topic] {
			if o.Err != nil {
				return Bounds{}, fmt.Errorf("listing the %s offset of %s/%d: %w", name, topic, p, o.Err)
			}
			if name == "start" {
				b.Start[p] = o.Offset
			} else {
				b.End[p] = o.Offset
			}
		}
	}
	return b, nil
}

// OffsetsAt returns, for every partition, the first offset whose record
// timestamp is at or after t (the end offset when there is none), checking
// every partition's error.
func (pl *Planner) OffsetsAt(ctx context.Context, topic string, t time.Time) (map[int32]int64, error) {
	listed, err := pl.Admin.ListOffsetsAfterMilli(ctx, t.UnixMilli(), topic)
	if err != nil {
		return nil, fmt.Errorf("listing the offsets of %s at %s: %w", topic, t.Format(time.RFC3339), err)
	}
	out := map[int32]int64{}
	for p, o := range listed[topic] {
		if o.Err != nil {
			return nil, fmt.Errorf("listing the offset of %s/%d at %s: %w", topic, p, t.Format(time.RFC3339), o.Err)
		}
		out[p] = o.Offset
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("topic %s does not exist (--topic)", topic)
	}
	return out, nil
}

// Targets resolves from into an offset per partition, within the bounds.
func (pl *Planner) Targets(ctx context.Context, topic string, b Bounds, from From) (map[int32]int64, error) {
	switch {
	case from.Start:
		return b.Start, nil
	case !from.Time.IsZero():
		return pl.OffsetsAt(ctx, topic, from.Time)
	}
	for p, o := range from.Offsets {
		start, ok := b.Start[p]
		if !ok {
			return nil, fmt.Errorf("--to-offsets: topic %s has no partition %d (it has %d)", topic, p, len(b.Start))
		}
		if o < start || o > b.End[p] {
			return nil, fmt.Errorf("--to-offsets: offset %d of partition %d is outside the partition's records [%d, %d]; fix: choose an offset in that range", o, p, start, b.End[p])
		}
	}
	return from.Offsets, nil
}

// Plan computes the rewind of group on topic to from.
func (pl *Planner) Plan(ctx context.Context, group, topic string, from From) (Plan, error) {
	plan := Plan{Group: group, Topic: topic, From: from.String()}
	b, err := pl.Bounds(ctx, topic)
	if err != nil {
		return plan, err
	}
	targets, err := pl.Targets(ctx, topic, b, from)
	if err != nil {
		return plan, err
	}
	partitions := make([]int32, 0, len(targets))
	for p := range targets {
		partitions = append(partitions, p)
	}
	sort.Slice(partitions, func(i, j int) bool { return partitions[i] < partitions[j] })
	stored, err := dedupe.Positions(ctx, pl.DB, group, topic, nil)
	if err != nil {
		return plan, err
	}
	committed, err := pl.committed(ctx, group, topic)
	if err != nil {
		return plan, err
	}
	for _, p := range partitions {
		pp := PartitionPlan{Partition: p, TargetOffset: targets[p], LogStart: b.Start[p], End: b.End[p]}
		if s, ok := stored[p]; ok {
			pp.StoredOffset = &s.Next
		}
		if k, ok := committed[p]; ok {
			pp.KafkaOffset = &k
		}
		switch {
		case pp.StoredOffset != nil:
			pp.CurrentOffset = *pp.StoredOffset
		case pp.KafkaOffset != nil:
			pp.CurrentOffset = *pp.KafkaOffset
		case pl.StartOffset == "latest":
			pp.CurrentOffset = b.End[p]
		default:
			pp.CurrentOffset = b.Start[p]
		}
		switch {
		case pp.TargetOffset < pp.CurrentOffset:
			pp.Action = ActionRewind
			// A position past the end (the topic was recreated) reads
			// only what the new log has.
			pp.Records = min(pp.CurrentOffset, pp.End) - pp.TargetOffset
		case pp.TargetOffset == pp.CurrentOffset:
			pp.Action = ActionUnchanged
		default:
			pp.Action = ActionAhead
		}
		plan.Records += pp.Records
		plan.Partitions = append(plan.Partitions, pp)
	}
	if err := pl.timeSpans(ctx, topic, &plan); err != nil {
		return plan, err
	}
	return plan, nil
}

// committed returns the group's committed Kafka offsets on topic, checking
// every partition's error.
func (pl *Planner) committed(ctx context.Context, group, topic string) (map[int32]int64, error) {
	resp, err := pl.Admin.FetchOffsets(ctx, group)
	if err != nil {
		return nil, fmt.Errorf("fetching the committed offsets of group %s: %w", group, err)
	}
	out := map[int32]int64{}
	for p, o := range resp[topic] {
		if o.Err != nil {
			return nil, fmt.Errorf("fetching the committed offset of group %s on %s/%d: %w", group, topic, p, o.Err)
		}
		if o.At >= 0 {
			out[p] = o.At
		}
	}
	return out, nil
}

// timeSpans fills in the timestamps of the first and last record each
// rewinding partition reads again.
func (pl *Planner) timeSpans(ctx context.Context, topic string, plan *Plan) error {
	from, to := map[int32]int64{}, map[int32]int64{}
	for _, pp := range plan.Partitions {
		if pp.Action == ActionRewind {
			from[pp.Partition] = pp.TargetOffset
			to[pp.Partition] = pp.CurrentOffset
		}
	}
	firsts, lasts, err := pl.RecordTimes(ctx, topic, from, to)
	if err != nil {
		return err
	}
	for i := range plan.Partitions {
		pp := &plan.Partitions[i]
		if t, ok := firsts[pp.Partition]; ok {
			pp.FirstRecord = &t
		}
		if t, ok := lasts[pp.Partition]; ok {
			pp.LastRecord = &t
		}
	}
	return nil
}

// RecordTimes returns the timestamps of the first and the last record of
// each partition's range [from, to); partitions with an empty range, or
// whose records could not be read within a few seconds, are absent.
func (pl *Planner) RecordTimes(ctx context.Context, topic string, from, to map[int32]int64) (first, last map[int32]time.Time, err error) {
	first, last = map[int32]time.Time{}, map[int32]time.Time{}
	firstAt, lastAt := map[int32]int64{}, map[int32]int64{}
	for p, f := range from {
		if to[p] > f {
			firstAt[p], lastAt[p] = f, to[p]-1
		}
	}
	if len(firstAt) == 0 {
		return first, last, nil
	}
	for _, pass := range []struct {
		at  map[int32]int64
		out map[int32]time.Time
	}{{firstAt, first}, {lastAt, last}} {
		recs, err := pl.readAt(ctx, topic, pass.at)
		if err != nil {
			return nil, nil, err
		}
		for p, r := range recs {
			if r.Offset < to[p] {
				pass.out[p] = r.Timestamp.UTC()
			}
		}
	}
	return first, last, nil
}

// readAt reads the first record at or after each partition's offset. A
// partition with nothing there (a gap at the end: transaction markers) is
// absent after a short wait.
func (pl *Planner) readAt(ctx context.Context, topic string, offsets map[int32]int64) (map[int32]*kgo.Record, error) {
	at := make(map[int32]kgo.Offset, len(offsets))
	for p, o := range offsets {
		at[p] = kgo.NewOffset().At(o)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(pl.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: at}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxPartitionBytes(64 << 10), kgo.FetchMaxWait(200 * time.Millisecond)}, pl.ExtraOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("reading record timestamps: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out := make(map[int32]*kgo.Record, len(offsets))
	for len(out) < len(offsets) && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) > 0 && out[p.Partition] == nil {
				out[p.Partition] = p.Records[0]
			}
		})
	}
	return out, nil
}
