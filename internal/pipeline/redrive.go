package pipeline

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/internal/consumer"
	"github.com/effectively-io/effectively/internal/deadletter"
	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/redact"
)

// RedriveResult is what a redrive did with one dead letter.
type RedriveResult struct {
	ID int64 `json:"id"`
	// Resolution is applied, stale, parked or duplicate when the dead
	// letter is resolved; empty when it is still dead.
	Resolution string `json:"resolution,omitempty"`
	// Already is true when it had been resolved before: nothing was done.
	Already bool `json:"already_resolved,omitempty"`
	// Reason and Error say why it is still dead.
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
}

// Redrive re-applies a dead letter after a fix, through the same claim, so
// nothing applies twice: a claim dead-lettered before gets its handler run
// again; an event whose claim was applied meanwhile is a duplicate; one that
// still fails stays dead with the new error. Redriving a resolved dead
// letter does nothing.
func (a *Applier) Redrive(ctx context.Context, id int64) (RedriveResult, error) {
	res := RedriveResult{ID: id}
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		res = RedriveResult{ID: id}
		ds, err := deadletter.List(ctx, tx, deadletter.Filter{ID: id, Limit: 1})
		if err != nil {
			return err
		}
		if len(ds) == 0 {
			return fmt.Errorf("dead letter %d does not exist", id)
		}
		d := ds[0]
		if err := deadletter.Lock(ctx, tx, id); err != nil {
			return err
		}
		if d.ResolvedAt != nil {
			res.Already, res.Resolution = true, *d.Resolution
			return nil
		}
		if d.ValueSize > len(d.Value) {
			return deadletter.ErrTruncated
		}
		rec, err := d.Record()
		if err != nil {
			return err
		}
		b := consumer.Batch{Group: d.Group, Topic: d.Topic, Partition: d.Partition, Records: []*kgo.Record{rec}}
		items, err := a.decodeAll(ctx, b, nil)
		if err != nil {
			return err
		}
		it := items[0]
		if it.disposition == "" {
			if err := a.claim(ctx, tx, b, []*item{it}); err != nil {
				return err
			}
			if !it.claimed && it.disposition == dedupe.Duplicate {
				// Claimed before with the same payload: dead-lettered then
				// (run its handler again) or applied since (a duplicate).
				disp, err := dedupe.LockClaim(ctx, tx, it.ev.Key)
				if err != nil {
					return fmt.Errorf("reading the claim of dead letter %d: %w", id, err)
				}
				if disp == dedupe.DeadLettered {
					it.claimed, it.disposition = true, ""
				}
			}
			if it.claimed {
				jobs := a.itemJobs(b, []*item{it})
				gate, err := a.parkingGate(ctx, tx, jobs)
				if err != nil {
					return err
				}
				if err := a.runJobs(ctx, tx, jobs, true, gate); err != nil {
					return err
				}
			}
		}
		if it.disposition == dedupe.DeadLettered {
			res.Reason = string(it.reason)
			res.Error = redact.Text(it.err.Error())
			return deadletter.StillDead(ctx, tx, id, res.Reason, res.Error)
		}
		res.Resolution = string(it.disposition)
		rec2 := &pgx.Batch{}
		if it.claimed {
			dedupe.QueueDispositions(rec2, []string{it.ev.Key}, []dedupe.Disposition{it.disposition})
		}
		deadletter.QueueResolved(rec2, id, res.Resolution)
		return tx.SendBatch(ctx, rec2).Close()
	})
	return res, err
}
