package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/deadletter"
	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/handling"
)

// arrivals are the resources that exist after this batch: the subjects of
// newly claimed events of a type that creates a prerequisite, applied or
// found stale (the resource exists either way).
func (a *Applier) arrivals(items []*item) []string {
	seen := map[string]bool{}
	var out []string
	for _, it := range items {
		if !it.claimed || !a.reg.Creates(it.ev.Type) {
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
	reg    handling.Registry
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
		if p := a.reg.WaitsFor(j.ev); p != nil {
			byPrereq[p] = append(byPrereq[p], j.ev.Subject)
			all = append(all, j.ev.Subject)
		}
	}
	if len(all) == 0 {
		return nil, nil
	}
	g := &gate{reg: a.reg, limit: a.opts.MaxParkedPerResource, exists: map[prereqKey]bool{}, parked: map[string]int{}}
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

// queuePark queues the statement that parks j's event, or returns the
// permanent error of an event that cannot be encoded for its row.
func queuePark(e *handlers.Effects, j job) error {
	raw, err := MarshalParked(j.ev)
	if err != nil {
		return event.PermanentWithReason(ReasonUnencodable, fmt.Errorf("encoding %s for its parked row: %w", truncateKey(j.ev.Key), err))
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
	ev     event.Event
	origin handlers.Origin
	// raw is the stored event, kept in a dead letter: whole while its
	// handler runs, then cut to the prefix a dead letter keeps (rawSize is
	// the whole size).
	raw         []byte
	rawSize     int
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
		EventKey: r.ev.Key, RecordKey: []byte(r.ev.Subject), Value: r.raw, ValueSize: r.rawSize, Reason: string(r.reason), Error: msg,
	}
}

// trim drops what a released event no longer needs once its handler ran,
// so that a release holds one page of payloads, not every page's: its data,
// and its stored form beyond the prefix a dead letter keeps.
func (r *released) trim() {
	r.ev.Data = nil
	r.rawSize = len(r.raw)
	if r.disposition != dedupe.DeadLettered {
		r.raw = nil
	} else if len(r.raw) > deadletter.MaxValueBytes {
		r.raw = bytes.Clone(r.raw[:deadletter.MaxValueBytes])
	}
}

// Releasing is paged, so that a resource with many large parked events
// (parking.max_per_resource × consumer.max_payload_bytes: a gigabyte at the
// defaults) never sits in memory at once. A page holds at most
// releasePageRows events and at most releasePageBytes of them as
// PostgreSQL sends them (the text of the stored jsonb), except that a page
// always holds at least one event, however large. So a release holds at
// most:
//
//   - the order of one resource's parked events: their keys and sizes, a
//     few hundred bytes each (≤ parking.max_per_resource of them);
//   - one page of events: max(releasePageBytes, the largest one event);
//   - the outcome of each released event of the batch: its key, and for a
//     dead-lettered one the first deadletter.MaxValueBytes of it.
//
// One stored event can be larger than its record (≤ consumer.max_payload_
// bytes): jsonb keeps numbers as numeric and prints them in full, so 1e308
// comes back as 309 digits.
const (
	releasePageRows  = 100
	releasePageBytes = 8 << 20
)

// releaseOrderSQL lists, and locks, the parked events of one resource in
// their original order, with the size each will have when fetched. The
// topic compares bytewise, so the order does not depend on the database's
// collation. A concurrent release of the same resource (the sweeper, another
// member's zombie) waits here and then finds nothing parked.
const releaseOrderSQL = `
SELECT resource, event_key, octet_length(event::text)
FROM parked_events
WHERE state = 'parked' AND resource = ANY($1)
ORDER BY resource COLLATE "C", topic COLLATE "C", "partition", "offset"
FOR UPDATE`

// releasePageSQL takes one page of parked events out of the parking lot
// (in the caller's transaction: if it rolls back, they stay parked).
// Marking them released first means the handlers, run in their original
// order next, no longer see them as something to queue behind.
const releasePageSQL = `
UPDATE parked_events SET state = 'released', resolved_at = now()
WHERE state = 'parked' AND event_key = ANY($1)
RETURNING event_key, consumer_group, topic, "partition", "offset", event`

// releaseParked applies, in their original order, the parked events of the
// resources whose prerequisite now exists, in the caller's transaction, a
// page at a time.
func (a *Applier) releaseParked(ctx context.Context, tx pgx.Tx, resources []string, isolated bool) ([]*released, error) {
	if len(resources) == 0 {
		return nil, nil
	}
	// One round trip finds what the arrivals release (usually nothing);
	// only resources with parked events go on, one at a time, in pages.
	rows, err := tx.Query(ctx, releaseOrderSQL, resources)
	if err != nil {
		return nil, fmt.Errorf("finding the parked events of %d resources: %w", len(resources), err)
	}
	var orders [][]parkedRef
	var names []string
	var resource string
	var ref parkedRef
	if _, err := pgx.ForEachRow(rows, []any{&resource, &ref.key, &ref.size}, func() error {
		if len(names) == 0 || names[len(names)-1] != resource {
			names = append(names, resource)
			orders = append(orders, nil)
		}
		orders[len(orders)-1] = append(orders[len(orders)-1], ref)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("finding the parked events of %d resources: %w", len(resources), err)
	}
	var out []*released
	for i, order := range orders {
		rels, err := a.releaseResource(ctx, tx, order, isolated)
		if err != nil {
			return nil, fmt.Errorf("releasing the parked events of %s: %w", event.Excerpt(names[i]), err)
		}
		out = append(out, rels...)
	}
	return out, nil
}

type parkedRef struct {
	key  string
	size int64
}

// releaseResource releases one resource's parked events, in their order, a
// page at a time.
func (a *Applier) releaseResource(ctx context.Context, tx pgx.Tx, order []parkedRef, isolated bool) ([]*released, error) {
	var out []*released
	for len(order) > 0 {
		n := pageLen(order, releasePageRows, releasePageBytes)
		page := order[:n]
		order = order[n:]
		rels, err := a.releasePage(ctx, tx, page, isolated)
		if err != nil {
			return nil, err
		}
		out = append(out, rels...)
	}
	return out, nil
}

// pageLen is how many of order make the next page: at most rows of them
// and at most bytes together, but at least one.
func pageLen(order []parkedRef, rows int, bytes int64) int {
	n, size := 0, int64(0)
	for n < len(order) && n < rows && (n == 0 || size+order[n].size <= bytes) {
		size += order[n].size
		n++
	}
	return n
}

// releasePage releases the events of page, in page order, and returns their
// outcomes trimmed of their payloads.
func (a *Applier) releasePage(ctx context.Context, tx pgx.Tx, page []parkedRef, isolated bool) ([]*released, error) {
	keys := make([]string, len(page))
	pos := make(map[string]int, len(page))
	for i, p := range page {
		keys[i] = p.key
		pos[p.key] = i
	}
	rows, err := tx.Query(ctx, releasePageSQL, keys)
	if err != nil {
		return nil, err
	}
	byPos := make([]*released, len(page))
	var key string
	var origin handlers.Origin
	var raw []byte
	_, err = pgx.ForEachRow(rows, []any{&key, &origin.Group, &origin.Topic, &origin.Partition, &origin.Offset, &raw}, func() error {
		i, ok := pos[key]
		if !ok {
			return fmt.Errorf("released %s, which was not asked for", truncateKey(key))
		}
		byPos[i] = &released{origin: origin, raw: raw}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]*released, 0, len(page))
	jobs := make([]job, 0, len(page))
	for _, rel := range byPos {
		if rel == nil {
			continue // released meanwhile (the rows are locked: not expected)
		}
		ev, err := UnmarshalParked(rel.raw)
		if err != nil {
			return nil, err // our own encoding: a bug, not the event's fault
		}
		rel.ev = ev
		out = append(out, rel)
		jobs = append(jobs, job{ev: ev, origin: rel.origin, settle: func(d dedupe.Disposition, err error) {
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
		rel.trim()
	}
	if len(dead) > 0 {
		if _, err := tx.Exec(ctx, `UPDATE parked_events SET state = 'dead_lettered' WHERE event_key = ANY($1)`, dead); err != nil {
			return nil, fmt.Errorf("marking %d released events dead-lettered: %w", len(dead), err)
		}
	}
	return out, nil
}
