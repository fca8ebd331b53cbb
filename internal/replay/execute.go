package replay

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/effectively-io/effectively/internal/dedupe"
)

// Executed is what Execute changed.
type Executed struct {
	// ResetEpochs are the reset epochs of the positions PostgreSQL now
	// holds, by partition written.
	ResetEpochs map[int32]int64 `json:"reset_epochs"`
	// KafkaCommitted are the offsets committed to the group in Kafka.
	KafkaCommitted map[int32]int64 `json:"kafka_committed"`
}

// KafkaCommitError: PostgreSQL holds the new positions, Kafka's commit (of
// some partitions) failed.
type KafkaCommitError struct {
	Group, Topic string
	// Failed are the partitions whose commit failed, with why; Err is set
	// when the whole request failed.
	Failed map[int32]error
	Err    error
	// Targets are the plan's targets as --to-offsets says them.
	Targets string
}

func (e *KafkaCommitError) Error() string {
	var why string
	if e.Err != nil {
		why = e.Err.Error()
	} else {
		ps := make([]int32, 0, len(e.Failed))
		for p := range e.Failed {
			ps = append(ps, p)
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		parts := make([]string, len(ps))
		for i, p := range ps {
			parts[i] = fmt.Sprintf("partition %d: %v", p, e.Failed[p])
		}
		why = strings.Join(parts, "; ")
	}
	return fmt.Sprintf("PostgreSQL (authoritative) already holds the new positions of group %s on %s, but committing them to Kafka failed: %s. "+
		"The workers start from PostgreSQL's positions, so the rewind takes effect anyway; Kafka's committed offsets (what lag tools show) are stale. "+
		"Fix: with the workers still stopped, run `effectively replay --group %s --topic %s --to-offsets %s --execute` again",
		e.Group, e.Topic, why, e.Group, e.Topic, e.Targets)
}

// MovedError: a stored position changed between the plan and its execution.
type MovedError struct {
	Group, Topic string
	Partition    int32
	Planned      *int64
	Now          *int64
}

func (e *MovedError) Error() string {
	return fmt.Sprintf("the stored position of group %s on %s/%d moved since the plan (%s → %s): a member of the group is applying records; stop the workers first, then run replay again",
		e.Group, e.Topic, e.Partition, offsetString(e.Planned), offsetString(e.Now))
}

func offsetString(o *int64) string {
	if o == nil {
		return "none"
	}
	return fmt.Sprint(*o)
}

// ExecuteOptions adjust Execute.
type ExecuteOptions struct {
	// Forward also moves partitions whose target is past the current
	// position (a replay group's own cursor, never the worker's group).
	Forward bool
}

// Execute carries out plan: first PostgreSQL, in one transaction (the
// stored positions are authoritative), then the group's Kafka offsets. The
// caller has checked that the group has no members. A failed Kafka commit
// returns a *KafkaCommitError.
func Execute(ctx context.Context, db *pgxpool.Pool, adm *kadm.Client, plan Plan, opts ExecuteOptions) (Executed, error) {
	var out Executed
	move := func(pp PartitionPlan) bool {
		return pp.Action == ActionRewind || (opts.Forward && pp.Action == ActionAhead)
	}
	var ps []int32
	var offs []int64
	planned := map[int32]*int64{}
	for _, pp := range plan.Partitions {
		if move(pp) {
			ps = append(ps, pp.Partition)
			offs = append(offs, pp.TargetOffset)
			planned[pp.Partition] = pp.StoredOffset
		}
	}
	if len(ps) > 0 {
		epochs, err := setPositions(ctx, db, plan, ps, offs, planned)
		if err != nil {
			return out, err
		}
		out.ResetEpochs = epochs
	}

	commit := kadm.Offsets{}
	for _, pp := range plan.Partitions {
		if pp.Action == ActionAhead && !opts.Forward {
			continue
		}
		if pp.KafkaOffset == nil || *pp.KafkaOffset != pp.TargetOffset {
			commit.Add(kadm.Offset{Topic: plan.Topic, Partition: pp.Partition, At: pp.TargetOffset, LeaderEpoch: -1})
		}
	}
	out.KafkaCommitted = map[int32]int64{}
	if len(commit) == 0 {
		return out, nil
	}
	kerr := &KafkaCommitError{Group: plan.Group, Topic: plan.Topic, Failed: map[int32]error{}, Targets: plan.Targets()}
	resp, err := adm.CommitOffsets(ctx, plan.Group, commit)
	if err != nil {
		kerr.Err = err
		return out, kerr
	}
	for _, pp := range plan.Partitions {
		o, asked := commit.Lookup(plan.Topic, pp.Partition)
		if !asked {
			continue
		}
		r, ok := resp.Lookup(plan.Topic, pp.Partition)
		switch {
		case !ok:
			kerr.Failed[pp.Partition] = errors.New("missing from the commit response")
		case r.Err != nil:
			kerr.Failed[pp.Partition] = r.Err
		default:
			out.KafkaCommitted[pp.Partition] = o.At
		}
	}
	if len(kerr.Failed) > 0 {
		return out, kerr
	}
	return out, nil
}

// setPositions locks the partitions' rows, checks they are where the plan
// saw them, and writes the targets, in one transaction.
func setPositions(ctx context.Context, db *pgxpool.Pool, plan Plan, ps []int32, offs []int64, planned map[int32]*int64) (map[int32]int64, error) {
	var epochs map[int32]int64
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		now, err := dedupe.LockPositions(ctx, tx, plan.Group, plan.Topic, ps)
		if err != nil {
			return err
		}
		for _, p := range ps {
			o, ok := now[p]
			want := planned[p]
			if ok != (want != nil) || (ok && o != *want) {
				var cur *int64
				if ok {
					cur = &o
				}
				return &MovedError{Group: plan.Group, Topic: plan.Topic, Partition: p, Planned: want, Now: cur}
			}
		}
		epochs, err = dedupe.ResetPositions(ctx, tx, plan.Group, plan.Topic, ps, offs)
		return err
	})
	if err != nil {
		var moved *MovedError
		if errors.As(err, &moved) {
			return nil, err
		}
		return nil, fmt.Errorf("setting the stored positions of group %s on %s (nothing was changed): %w", plan.Group, plan.Topic, err)
	}
	return epochs, nil
}
