package pipeline

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/effectively-io/effectively/deadletter"
	"github.com/effectively-io/effectively/dedupe"
	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
)

// arrivals are the resources that exist after this batch: the subjects of
// newly claimed events of a type that creates a prerequisite, applied or
// found stale (the resource exists either way).
func (a *Applier) arrivals(items []*item) []string {
	seen := map[string]bool{}
	var out []string
	for _, it := range items {
		if !it.claimed || !a.opts.Handlers.Creates(it.ev.Type) {
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

// gate decides, in offset order, which of a batch's events wait: it starts
// from what the database says (which resources exist, how many events each
// has parked) and follows the batch (an event that creates a resource lets
// the later ones of that resource through; a parked one makes them queue
// behind it).
type gate struct {
	reg    *handlers.Registry
	limit  int
	exists map[prereqKey]bool
	parked map[string]int // by resource
}

type prereqKey struct{ name, resource string }

// mustPark reports whether ev is parked rather than applied, or the
// permanent error of an event that would exceed the per-resource bound.
func (g *gate) mustPark(ev event.Event) (bool, error) {
	p := g.reg.WaitsFor(ev)
	if p == nil {
		return false, nil
	}
	n := g.parked[ev.Subject]
	if n == 0 && g.exists[prereqKey{p.Name, ev.Subject}] {
		return false, nil
	}
	if n >= g.limit {
		return false, event.PermanentWithReason(handlers.ReasonPrerequisiteMissing,
			fmt.Errorf("%s %s does not exist and already has %d parked events (parking.max_per_resource %d)", p.Name, event.Excerpt(ev.Subject), n, g.limit))
	}
	g.parked[ev.Subject]++
	return true, nil
}

// created records that ev, applied, made its resource exist.
func (g *gate) created(ev event.Event) {
	for _, p := range g.reg.CreatedBy(ev.Type) {
		g.exists[prereqKey{p.Name, ev.Subject}] = true
	}
}

// parkedCountsSQL counts the events parked per resource.
const parkedCountsSQL = `
SELECT resource, count(*) FROM parked_events
WHERE state = 'parked' AND resource = ANY($1)
GROUP BY resource`

// parkingGate reads, in one round trip, what the gate starts from: for the
// resources that the jobs' waiting events name, whether their prerequisite
// exists and how many events they have parked. Nil when no job waits.
func (a *Applier) parkingGate(ctx context.Context, tx pgx.Tx, jobs []job) (*gate, error) {
	byPrereq := map[*handlers.Prerequisite][]string{}
	var all []string
	for _, j := range jobs {
		if p := a.opts.Handlers.WaitsFor(j.ev); p != nil {
			byPrereq[p] = append(byPrereq[p], j.ev.Subject)
			all = append(all, j.ev.Subject)
		}
	}
	if len(all) == 0 {
		return nil, nil
	}
	g := &gate{reg: a.opts.Handlers, limit: a.opts.MaxParkedPerResource, exists: map[prereqKey]bool{}, parked: map[string]int{}}
	b := &pgx.Batch{}
	for p, ids := range byPrereq {
		b.Queue(p.ExistsSQL, ids).Query(func(rows pgx.Rows) error {
			var id string
			_, err := pgx.ForEachRow(rows, []any{&id}, func() error {
				g.exists[prereqKey{p.Name, id}] = true
				return nil
			})
			if err != nil {
				return fmt.Errorf("checking whether %s exists (%s): %w", p.Name, p.ExistsSQL, err)
			}
			return nil
		})
	}
	b.Queue(parkedCountsSQL, all).Query(func(rows pgx.Rows) error {
		var r string
		var n int
		_, err := pgx.ForEachRow(rows, []any{&r, &n}, func() error {
			g.parked[r] = n
			return nil
		})
		return err
	})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("reading the prerequisites of %d waiting events: %w", len(all), err)
	}
	return g, nil
}

// parkSQL parks an event. Nothing is inserted when the key has a parked
// row already (from a claim that has since expired): the event is then
// dead-lettered rather than parked where nothing would release it.
const parkSQL = `
INSERT INTO parked_events (event_key, consumer_group, topic, "partition", "offset", resource, event_type, event)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (event_key) DO NOTHING`

// queuePark queues the statement that parks j's event.
func queuePark(e *handlers.Effects, j job) error {
	raw, err := MarshalParked(j.ev)
	if err != nil {
		return err
	}
	o := j.origin
	e.Exec(func(ct pgconn.CommandTag) (dedupe.Disposition, error) {
		if ct.RowsAffected() == 0 {
			return dedupe.DeadLettered, event.PermanentWithReason(handlers.ReasonPrerequisiteMissing,
				fmt.Errorf("%s was parked before and resolved; it cannot wait again", truncateKey(j.ev.Key)))
		}
		return dedupe.Parked, nil
	}, parkSQL, j.ev.Key, o.Group, o.Topic, o.Partition, o.Offset, j.ev.Subject, j.ev.Type, raw)
	return nil
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
		ev, err := UnmarshalParked(r.raw)
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
	if err := a.runJobs(ctx, tx, jobs, isolated, nil); err != nil {
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
