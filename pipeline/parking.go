package pipeline

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/effectively-io/effectively/deadletter"
	"github.com/effectively-io/effectively/dedupe"
	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
)

// arrivals are the resources whose prerequisite exists after this batch:
// the subjects of account events that were newly claimed and applied or
// found stale (the account exists either way).
func arrivals(items []*item) []string {
	seen := map[string]bool{}
	var out []string
	for _, it := range items {
		if !it.claimed || !strings.HasPrefix(it.ev.Type, "account.") {
			continue
		}
		if it.disposition != dedupe.Applied && it.disposition != dedupe.Stale {
			continue
		}
		if !seen[it.ev.Subject] {
			seen[it.ev.Subject] = true
			out = append(out, it.ev.Subject)
		}
	}
	sort.Strings(out)
	return out
}

// released is a parked event that was released, with its outcome.
type released struct {
	ev          event.Event
	origin      handlers.Origin
	raw         []byte // the stored event, kept in a dead letter
	disposition dedupe.Disposition
	reason      event.Reason
	err         error
}

func (r *released) letter() deadletter.Letter {
	msg := ""
	if r.err != nil {
		msg = r.err.Error()
	}
	return deadletter.Letter{
		Group: r.origin.Group, Topic: r.origin.Topic, Partition: r.origin.Partition, Offset: r.origin.Offset,
		EventKey: r.ev.Key, RecordKey: []byte(r.ev.Subject), Value: r.raw, Reason: string(r.reason), Error: msg,
	}
}

// releaseSQL takes the parked events of the given resources out of the
// parking lot (in the caller's transaction: if it rolls back, they stay
// parked). Marking them released first means the handlers, run in their
// original order next, no longer see them as something to queue behind.
const releaseSQL = `
UPDATE parked_events SET state = 'released', resolved_at = now()
WHERE state = 'parked' AND resource = ANY($1)
RETURNING event_key, consumer_group, topic, "partition", "offset", resource, event`

// releaseParked applies, in their original order, the parked events of the
// resources whose prerequisite now exists, in the caller's transaction.
func (a *Applier) releaseParked(ctx context.Context, tx pgx.Tx, resources []string, isolated bool) ([]*released, error) {
	if len(resources) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, releaseSQL, resources)
	if err != nil {
		return nil, fmt.Errorf("releasing parked events of %d resources: %w", len(resources), err)
	}
	type row struct {
		key      string
		origin   handlers.Origin
		resource string
		raw      []byte
	}
	var rs []row
	var r row
	_, err = pgx.ForEachRow(rows, []any{&r.key, &r.origin.Group, &r.origin.Topic, &r.origin.Partition, &r.origin.Offset, &r.resource, &r.raw}, func() error {
		rs = append(rs, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("releasing parked events of %d resources: %w", len(resources), err)
	}
	if len(rs) == 0 {
		return nil, nil
	}
	sort.Slice(rs, func(i, j int) bool {
		a, b := rs[i], rs[j]
		if a.resource != b.resource {
			return a.resource < b.resource
		}
		if a.origin.Topic != b.origin.Topic {
			return a.origin.Topic < b.origin.Topic
		}
		if a.origin.Partition != b.origin.Partition {
			return a.origin.Partition < b.origin.Partition
		}
		return a.origin.Offset < b.origin.Offset
	})
	out := make([]*released, len(rs))
	jobs := make([]job, 0, len(rs))
	for i, r := range rs {
		rel := &released{origin: r.origin, raw: r.raw}
		out[i] = rel
		ev, err := handlers.UnmarshalParked(r.raw)
		if err != nil {
			return nil, err // our own encoding: a bug, not the event's fault
		}
		rel.ev = ev
		jobs = append(jobs, job{ev: ev, origin: r.origin, settle: func(d dedupe.Disposition, err error) {
			if err != nil {
				rel.disposition = dedupe.DeadLettered
				rel.reason = event.ReasonOf(err)
				if rel.reason == "" {
					rel.reason = event.ReasonHandlerError
				}
				rel.err = err
				return
			}
			rel.disposition = d
		}})
	}
	if err := a.runJobs(ctx, tx, jobs, isolated); err != nil {
		return nil, err
	}
	// A released event that could not be applied is dead-lettered; its
	// parked row says so.
	var dead []string
	for _, rel := range out {
		if rel.disposition == dedupe.DeadLettered {
			dead = append(dead, rel.ev.Key)
		}
	}
	if len(dead) > 0 {
		if _, err := tx.Exec(ctx, `UPDATE parked_events SET state = 'dead_lettered' WHERE event_key = ANY($1)`, dead); err != nil {
			return nil, fmt.Errorf("marking %d released events dead-lettered: %w", len(dead), err)
		}
	}
	return out, nil
}
