package replay

import (
	"context"
	"fmt"
	"strings"
)

// PlanRewind is a rewind's checks and plan, the one sequence behind
// `replay` and the console: it refuses while the group has members, then
// plans. ahead is non-nil when explicit offsets ask to move a partition
// forward (a replay only rewinds): the plan is still returned, to be
// shown, not executed.
func (pl *Planner) PlanRewind(ctx context.Context, group, topic string, from From) (plan Plan, ahead, err error) {
	if err := RequireNoMembers(ctx, pl.Admin, group); err != nil {
		return Plan{}, nil, err
	}
	plan, err = pl.Plan(ctx, group, topic, from)
	if err != nil {
		return plan, nil, err
	}
	if pps := plan.WithAction(ActionAhead); len(pps) > 0 && from.Offsets != nil {
		parts := make([]string, len(pps))
		for i, pp := range pps {
			parts[i] = fmt.Sprintf("partition %d: target %d > current %d", pp.Partition, pp.TargetOffset, pp.CurrentOffset)
		}
		ahead = fmt.Errorf("--to-offsets asks to move forward (%s): replay only rewinds; fix: give offsets at or below the current positions", strings.Join(parts, "; "))
	}
	return plan, ahead, nil
}

// ExecuteRewind carries out a planned rewind: members may have joined
// since the plan's check, so it checks again, then moves the positions
// (PostgreSQL first, then Kafka's commits).
func (pl *Planner) ExecuteRewind(ctx context.Context, plan Plan) (Executed, error) {
	if err := RequireNoMembers(ctx, pl.Admin, plan.Group); err != nil {
		return Executed{}, err
	}
	return Execute(ctx, pl.DB, pl.Admin, plan, ExecuteOptions{})
}
