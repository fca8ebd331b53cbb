package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"golang.org/x/sync/semaphore"

	settings "github.com/effectively-io/effectively/consumer"
	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/consumer"
	"github.com/effectively-io/effectively/internal/crashpoint"
	"github.com/effectively-io/effectively/internal/deadletter"
	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/handling"
	"github.com/effectively-io/effectively/internal/outbox"
)

// Options configure an Applier.
type Options struct {
	// Decoders decode each topic's records.
	Decoders map[string]*event.Decoder
	// Handlers apply events by type and name their prerequisites.
	Handlers *handlers.Registry
	// Logger receives per-batch problems.
	Logger *zap.Logger
	// Metrics, when set, counts dispositions.
	Metrics *Metrics
	// Env is the build's targets, the outbox's expiry policy and the HTTP
	// client, for handlers that send side effects and prefetchers that
	// read; the zero value has every declared target off.
	Env handlers.Env
	// MaxParkedPerResource is the most events parked for one resource
	// (parking.max_per_resource); the next is dead-lettered with reason
	// prerequisite_missing. 0 means 1000.
	MaxParkedPerResource int
	// SettledFunc, when set, hears each event's disposition (and a dead
	// letter's reason) as its batch records it, before the commit: tracing
	// puts it on the event's span. Nil costs nothing.
	SettledFunc func(ctx context.Context, ev event.Event, d dedupe.Disposition, reason event.Reason)
	// MaxDecodedBytes bounds the bytes of data the process's batches may
	// hold beyond their records' own (consumer.max_inflight_bytes counts
	// those): a registry format's record decodes to JSON of up to 16
	// times its bytes. A batch whose decoding would pass it is applied in
	// parts, one transaction each. 0 means half of
	// settings.MaxInflightBytesDefault.
	MaxDecodedBytes int64
}

// Applier applies batches, one transaction each: lock the partition's
// position, claim the batch's event keys, run the handlers of the newly
// claimed events in offset order, record dispositions and dead letters, and
// move the position forward.
type Applier struct {
	pool *pgxpool.Pool
	opts Options
	log  *zap.Logger
	gens *dedupe.Generations
	reg  handling.Registry // opts.Handlers, as the engine reads it
	// decoded holds what decoded batches hold beyond their records' bytes
	// (decodePart), process-wide: opts.MaxDecodedBytes of it.
	decoded *semaphore.Weighted
}

// NewApplier returns an Applier on pool.
func NewApplier(pool *pgxpool.Pool, opts Options) *Applier {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Handlers == nil {
		opts.Handlers = &handlers.Registry{}
	}
	if opts.Env.Targets == nil {
		opts.Env = handling.Of(opts.Handlers).Env(nil, outbox.Expiry{}, opts.Env.HTTPClient, 0)
	}
	if opts.MaxParkedPerResource <= 0 {
		opts.MaxParkedPerResource = 1000
	}
	if opts.MaxDecodedBytes <= 0 {
		opts.MaxDecodedBytes = settings.MaxInflightBytesDefault / 2
	}
	return &Applier{pool: pool, opts: opts, log: opts.Logger, gens: dedupe.NewGenerations(pool), reg: handling.Of(opts.Handlers),
		decoded: semaphore.NewWeighted(opts.MaxDecodedBytes)}
}

var _ consumer.Applier = (*Applier)(nil)

// Positions implements consumer.Applier.
func (a *Applier) Positions(ctx context.Context, group, topic string, partitions []int32) (map[int32]consumer.Position, error) {
	stored, err := dedupe.Positions(ctx, a.pool, group, topic, partitions)
	if err != nil {
		return nil, err
	}
	out := make(map[int32]consumer.Position, len(stored))
	for p, pos := range stored {
		out[p] = consumer.Position(pos)
	}
	return out, nil
}

// item is one record of a batch on its way to a disposition.
type item struct {
	rec *kgo.Record
	ev  event.Event
	// disposition is the outcome; reason and err explain a dead letter.
	disposition dedupe.Disposition
	reason      event.Reason
	err         error
	// claimed: this transaction claimed ev.Key (the handlers run).
	claimed bool
}

func (it *item) deadLetter(err error) {
	it.disposition = dedupe.DeadLettered
	it.reason = event.ReasonOf(err)
	if it.reason == "" {
		it.reason = event.ReasonHandlerError
	}
	it.err = err
}

// Result counts what a batch did, by disposition.
type Result struct {
	Counts map[dedupe.Disposition]int
	// DeadLetters by reason (conflicts included, reason "conflict").
	DeadLetters map[event.Reason]int
	// Isolated is true when a statement failed and the batch was redone one
	// event at a time to isolate the culprit.
	Isolated bool
	// Released counts parked events (of this batch or earlier ones) that
	// their prerequisite's arrival in this batch released, by outcome.
	Released map[dedupe.Disposition]int
	// Letters are the batch's own records that were dead-lettered.
	Letters []LetterRef
	// Fenced counts the batch's records that were already applied (the
	// partition's stored position was past them): by another member — this
	// one held them after losing the partition (a zombie cut from the
	// broker, a paused process), or the previous owner's last batch
	// committed just before the revoke — or by an earlier attempt of this
	// very batch whose COMMIT reached PostgreSQL and whose answer was lost.
	// They were not applied again.
	Fenced int
	// Position is the partition's stored position the batch found.
	Position int64
	// Parts is how many transactions the batch was committed in: more than
	// one when its records decoded to more data than the process's
	// decoding budget had room for (Options.MaxDecodedBytes).
	Parts int
}

// Apply implements consumer.Applier.
func (a *Applier) Apply(ctx context.Context, b consumer.Batch) error {
	_, err := a.ApplyBatch(ctx, b)
	return err
}

// ApplyBatch applies b and reports what became of its records.
//
// A batch is applied in one transaction, unless its records decode to more
// data than the process's decoding budget has room for (decodePart): then
// in parts, one transaction each, as if the consumer had taken smaller
// batches. A failure stops at the part that failed; the parts before it
// are committed, and their records are fenced when the batch is retried.
func (a *Applier) ApplyBatch(ctx context.Context, b consumer.Batch) (Result, error) {
	var sum Result
	for part := 0; ; part++ {
		p, items, held, err := a.decodePart(ctx, b)
		if err != nil {
			return sum, err
		}
		res, err := a.applyPart(ctx, p, items)
		a.decoded.Release(held)
		if err != nil {
			return sum, err // what the parts before it committed
		}
		sum.add(res, part == 0)
		if len(p.Records) == len(b.Records) {
			if part > 0 {
				a.log.Info("applied a batch in parts: its records decode to more data than the decoding budget (half of consumer.max_inflight_bytes) has room for at once",
					zap.String("topic", b.Topic), zap.Int32("partition", b.Partition), zap.Int64("last_offset", b.Records[len(b.Records)-1].Offset),
					zap.Int("parts", sum.Parts))
			}
			return sum, nil
		}
		b.Records = b.Records[len(p.Records):]
	}
}

// applyPart applies b, decoded to items, in one transaction.
func (a *Applier) applyPart(ctx context.Context, b consumer.Batch, items []*item) (Result, error) {
	if err := a.prefetch(ctx, items); err != nil {
		return Result{}, err
	}
	res, err := a.inTx(ctx, b, items, false)
	// A rotation closed the claims generation this process inserts into:
	// learn the open one and redo the batch (the records' decoding stands;
	// nothing of the lost transaction does).
	for tries := 0; errors.Is(err, dedupe.ErrGenerationClosed) && tries < 3; tries++ {
		if _, rerr := a.gens.Refresh(ctx); rerr != nil {
			return Result{}, rerr
		}
		a.log.Info("claims generation rotated; redoing the batch in the open one",
			zap.String("topic", b.Topic), zap.Int32("partition", b.Partition), zap.Int64("first_offset", b.Records[0].Offset))
		if items, err = a.decodeAll(ctx, b, items); err != nil {
			return Result{}, err
		}
		if err := a.prefetch(ctx, items); err != nil {
			return Result{}, err
		}
		res, err = a.inTx(ctx, b, items, false)
	}
	if _, fault := eventsFault(err); fault {
		// A statement failed for a reason that retrying cannot fix and that
		// lies in one event's values (sqlstate.go), or the batch's effects
		// refused one event's (a permanent error from Flush: a change's
		// sequence on a bigint version column). The transaction is gone;
		// redo the batch with each event's effects in a savepoint, so the
		// culprit is dead-lettered and its batch-mates commit.
		a.log.Warn("a statement failed; redoing the batch one event at a time",
			zap.String("topic", b.Topic), zap.Int32("partition", b.Partition),
			zap.Int64("first_offset", b.Records[0].Offset), zap.Error(err))
		if items, err = a.decodeAll(ctx, b, items); err != nil {
			return Result{}, err
		}
		if err := a.prefetch(ctx, items); err != nil {
			return Result{}, err
		}
		res, err = a.inTx(ctx, b, items, true)
		res.Isolated = true
	}
	if err != nil {
		return res, err
	}
	a.opts.Metrics.record(b.Topic, res)
	a.logLetters(res.Letters)
	if res.Fenced > 0 {
		a.log.Info("records already applied were not applied again (fenced by the partition's stored position): another member applied them, or an earlier attempt of this batch whose COMMIT answer was lost",
			zap.String("topic", b.Topic), zap.Int32("partition", b.Partition), zap.Int64("first_offset", b.Records[0].Offset),
			zap.Int64("stored_position", res.Position), zap.Int("fenced", res.Fenced))
	}
	return res, nil
}

// add adds a part's result to r; the first part's position is the batch's.
func (r *Result) add(part Result, first bool) {
	if first {
		r.Position = part.Position
	}
	r.Counts = addCounts(r.Counts, part.Counts)
	r.Released = addCounts(r.Released, part.Released)
	r.DeadLetters = addCounts(r.DeadLetters, part.DeadLetters)
	r.Isolated = r.Isolated || part.Isolated
	r.Letters = append(r.Letters, part.Letters...)
	r.Fenced += part.Fenced
	r.Parts++
}

// addCounts adds from's counts to to's (made when needed) and returns it.
func addCounts[K comparable](to, from map[K]int) map[K]int {
	if len(from) > 0 && to == nil {
		to = make(map[K]int, len(from))
	}
	for k, n := range from {
		to[k] += n
	}
	return to
}

// prefetchConcurrency bounds the outside reads of one batch.
const prefetchConcurrency = 8

// prefetch lets handlers that read the outside world (the doorbell) do so
// before the transaction begins, concurrently. A transient failure fails the
// batch (it is retried with backoff while the partition is paused); a
// permanent one dead-letters that event.
func (a *Applier) prefetch(ctx context.Context, items []*item) error {
	sem := make(chan struct{}, prefetchConcurrency)
	errs := make(chan error, len(items))
	var wg sync.WaitGroup
	for _, it := range items {
		if it.disposition != "" {
			continue
		}
		h, _ := a.reg.Handler(it.ev.Type)
		pf, ok := h.(handlers.Prefetcher)
		if !ok {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ev, err := pf.Prefetch(ctx, a.opts.Env, it.ev)
			switch {
			case err == nil:
				it.ev = ev
			case event.IsPermanent(err):
				it.deadLetter(err)
			default:
				errs <- consumer.WithRetryCause(consumer.CauseSourceUnavailable, fmt.Errorf("prefetching %s %s: %w", it.ev.Type, truncateKey(it.ev.Key), err))
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs // the first transient failure, or nil
}

// decodePart decodes b's records from the first, outside the transaction
// (CPU work that need not hold locks), as many as fit in a part's share of
// the process's decoding budget, and at least one: it returns them as the
// part of b to apply, and what it holds of the budget until that part is
// applied.
//
// Records that can decode to more than their bytes (a registry format's:
// a 1 MiB record can become 16 MiB of JSON, Decoder.MaxDataBytes) are
// decoded under the budget (Options.MaxDecodedBytes), a quarter of it at a
// time (at least 2 MiB, so that a small budget still takes batches of
// small records whole), or more for a first record that can decode to
// more (up to all of it). A part takes its share before it decodes such a record, waiting its
// turn among the other partitions' while holding nothing; decodes records
// while the most the next can decode to fits in what its events have left
// of the share; and gives back, once decoded, what its events do not hold
// (Event.Size, beyond the records' bytes). So at most four parts decode
// such records at once (two of 1 MiB records at the default), and a part's
// events hold at most its share, or one record's data when a record's
// bound alone passes the whole budget (it is then alone in its part; its
// data past the budget is not counted). Other records (JSON,
// CloudEvents) take nothing: their events hold a copy of their data and a
// small event's index (up to twice it), which the memory formula of
// docs/operations/capacity.md counts with consumer.max_inflight_bytes.
// A Protobuf record's messages, built while it decodes, are bounded apart
// (the event package's protoDecodeHeap).
//
// A record that cannot be decoded is dead-lettered; a schema registry
// that does not answer fails the batch, to be retried while the partition
// waits (the record is not at fault).
func (a *Applier) decodePart(ctx context.Context, b consumer.Batch) (consumer.Batch, []*item, int64, error) {
	dec := a.opts.Decoders[b.Topic]
	share := min(max(a.opts.MaxDecodedBytes/4, 2<<20), a.opts.MaxDecodedBytes)
	items := make([]*item, 0, len(b.Records))
	var taken, used int64 // of the budget; by the part's events, beyond their records' bytes
	for _, r := range b.Records {
		var bound int64
		if dec != nil {
			bound = int64(dec.MaxDataBytes(event.Record{Key: r.Key, Value: r.Value}) - len(r.Value))
		}
		if bound > 0 {
			if taken == 0 {
				want := min(max(share, bound), a.opts.MaxDecodedBytes)
				if err := a.decoded.Acquire(ctx, want); err != nil {
					return b, nil, 0, err
				}
				taken = want
			}
			if len(items) > 0 && used+bound > taken {
				break
			}
		}
		it, err := a.decodeRecord(ctx, dec, b.Topic, r)
		if err != nil {
			a.decoded.Release(taken)
			return b, nil, 0, err
		}
		if bound > 0 && it.disposition == "" {
			used += int64(max(it.ev.Size()-len(r.Value), 0))
		}
		items = append(items, it)
	}
	held := min(used, taken)
	a.decoded.Release(taken - held)
	b.Records = b.Records[:len(items)]
	return b, items, held, nil
}

// decodeAll decodes every record of b: a redo's (the part holds its share
// of the budget still) or a redrive's (one record). old, the items of an
// earlier attempt, is emptied first, so that its data can go.
func (a *Applier) decodeAll(ctx context.Context, b consumer.Batch, old []*item) ([]*item, error) {
	dec := a.opts.Decoders[b.Topic]
	clear(old)
	items := make([]*item, len(b.Records))
	for i, r := range b.Records {
		it, err := a.decodeRecord(ctx, dec, b.Topic, r)
		if err != nil {
			return nil, err
		}
		items[i] = it
	}
	return items, nil
}

// decodeRecord decodes one record of topic; an error is the schema
// registry's (the batch waits), a record at fault is dead-lettered.
func (a *Applier) decodeRecord(ctx context.Context, dec *event.Decoder, topic string, r *kgo.Record) (*item, error) {
	it := &item{rec: r}
	if dec == nil {
		it.deadLetter(event.PermanentWithReason(ReasonUnconfiguredTopic, fmt.Errorf("no decoder for topic %s", topic)))
		return it, nil
	}
	hs := make([]event.Header, len(r.Headers))
	for j, h := range r.Headers {
		hs[j] = event.Header{Key: h.Key, Value: h.Value}
	}
	ev, err := dec.DecodeContext(ctx, event.Record{
		Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
		Key: r.Key, Value: r.Value, Headers: hs, Timestamp: r.Timestamp,
	})
	switch {
	case event.IsSkip(err):
		it.disposition = dedupe.Skipped
	case errors.Is(err, event.ErrSchemaRegistryUnavailable):
		return nil, consumer.WithRetryCause(consumer.CauseSchemaRegistryUnavailable,
			fmt.Errorf("decoding %s/%d at %d: %w", r.Topic, r.Partition, r.Offset, err))
	case err != nil && !event.IsPermanent(err) && ctx.Err() != nil:
		return nil, fmt.Errorf("decoding %s/%d at %d: %w", r.Topic, r.Partition, r.Offset, err) // stopped while it waited: the record is not at fault
	case err != nil:
		it.deadLetter(err)
	default:
		it.ev = ev
	}
	return it, nil
}

func (a *Applier) inTx(ctx context.Context, b consumer.Batch, items []*item, isolated bool) (Result, error) {
	tx, err := a.pool.Begin(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("beginning transaction: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit

	res, err := a.apply(ctx, tx, b, items, isolated)
	if err != nil {
		return res, err
	}
	crashpoint.Hit(crashpoint.BeforeDBCommit)
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("committing batch of %s/%d at %d: %w", b.Topic, b.Partition, b.Records[0].Offset, err)
	}
	return res, nil
}

func (a *Applier) apply(ctx context.Context, tx pgx.Tx, b consumer.Batch, items []*item, isolated bool) (Result, error) {
	stored, err := dedupe.LockPosition(ctx, tx, b.Group, b.Topic, b.Partition, b.Records[0].Offset)
	if err != nil {
		return Result{}, err
	}
	// Records below the stored position were applied by another member:
	// the partition's new owner if this member is a zombie, or the previous
	// owner whose last batch committed just before the revoke.
	fenced := 0
	for len(items) > 0 && items[0].rec.Offset < stored {
		items = items[1:]
		fenced++
	}
	if len(items) == 0 {
		return Result{Fenced: fenced, Position: stored}, nil
	}

	if err := a.claim(ctx, tx, b, items); err != nil {
		return Result{}, err
	}
	jobs := a.itemJobs(b, items)
	gate, err := a.parkingGate(ctx, tx, jobs)
	if err != nil {
		return Result{}, err
	}
	if err := a.runJobs(ctx, tx, jobs, isolated, gate); err != nil {
		return Result{}, err
	}
	released, err := a.releaseParked(ctx, tx, a.arrivals(items), isolated)
	if err != nil {
		return Result{}, err
	}

	// Record: dispositions other than applied, dead letters, the position.
	rec := &pgx.Batch{}
	var keys []string
	var disps []dedupe.Disposition
	res := Result{Counts: map[dedupe.Disposition]int{}, DeadLetters: map[event.Reason]int{}, Released: map[dedupe.Disposition]int{}, Fenced: fenced, Position: stored}
	inBatch := make(map[string]*item, len(items))
	for _, it := range items {
		if it.claimed {
			inBatch[it.ev.Key] = it
		}
	}
	for _, r := range released {
		res.Released[r.disposition]++
		if it := inBatch[r.ev.Key]; it != nil {
			// Parked and released within this batch: one disposition.
			it.disposition, it.reason, it.err = r.disposition, r.reason, r.err
			continue
		}
		if r.disposition == dedupe.DeadLettered {
			res.DeadLetters[r.reason]++
		}
		if a.opts.SettledFunc != nil {
			a.opts.SettledFunc(ctx, r.ev, r.disposition, r.reason)
		}
		recordReleased(rec, r)
	}
	for _, it := range items {
		if a.opts.SettledFunc != nil {
			a.opts.SettledFunc(ctx, it.ev, it.disposition, it.reason)
		}
		res.Counts[it.disposition]++
		if it.claimed && it.disposition != dedupe.Applied {
			keys = append(keys, it.ev.Key)
			disps = append(disps, it.disposition)
		}
		if it.disposition == dedupe.DeadLettered {
			res.DeadLetters[it.reason]++
			deadletter.Queue(rec, a.letter(b, it))
			res.Letters = append(res.Letters, LetterRef{Topic: b.Topic, Partition: b.Partition, Offset: it.rec.Offset, EventKey: it.ev.Key, Reason: it.reason})
		}
	}
	dedupe.QueueDispositions(rec, keys, disps)
	dedupe.QueueAdvance(rec, b.Group, b.Topic, b.Partition, b.NextOffset())
	if err := tx.SendBatch(ctx, rec).Close(); err != nil {
		return Result{}, fmt.Errorf("recording dispositions of %s/%d: %w", b.Topic, b.Partition, err)
	}
	return res, nil
}

// claim claims the keys of the decoded items. A key seen earlier in the
// batch, or claimed before, is a duplicate when the payload hash matches and
// a conflict (dead-lettered, never dropped) when it does not.
func (a *Applier) claim(ctx context.Context, tx pgx.Tx, b consumer.Batch, items []*item) error {
	first := make(map[string]*item, len(items))
	var claims []dedupe.Claim
	for _, it := range items {
		if it.disposition != "" && it.ev.Key == "" {
			continue // undecodable: dead-lettered without a claim
		}
		// An event whose prefetch failed permanently is claimed as
		// dead-lettered (a redelivery is then a duplicate, and only a
		// redrive re-applies it), unless it is a repeat itself.
		if prev, ok := first[it.ev.Key]; ok {
			a.settleRepeat(it, prev.ev.PayloadHash[:])
			continue
		}
		first[it.ev.Key] = it
		claims = append(claims, dedupe.Claim{
			Key: it.ev.Key, Strategy: it.ev.Strategy, PayloadHash: it.ev.PayloadHash[:],
			Type: it.ev.Type, Subject: it.ev.Subject, Topic: b.Topic, Partition: b.Partition, Offset: it.rec.Offset,
		})
	}
	gen, err := a.gens.Open(ctx, tx)
	if err != nil {
		return err
	}
	claimed, err := dedupe.ClaimAll(ctx, tx, gen, b.Group, claims)
	if err != nil {
		return err
	}
	var taken []string
	for _, c := range claims {
		if claimed[c.Key] {
			first[c.Key].claimed = true
		} else {
			taken = append(taken, c.Key)
		}
	}
	stored, err := dedupe.Lookup(ctx, tx, taken)
	if err != nil {
		return err
	}
	for _, k := range taken {
		h, ok := stored[k]
		if !ok {
			return fmt.Errorf("claim of %s neither inserted nor found (pruned concurrently?)", k)
		}
		a.settleRepeat(first[k], h)
	}
	return nil
}

// ReasonConflict: the same event key arrived with a different payload.
const ReasonConflict event.Reason = "conflict"

func (a *Applier) settleRepeat(it *item, storedHash []byte) {
	if bytes.Equal(storedHash, it.ev.PayloadHash[:]) {
		it.disposition, it.reason, it.err = dedupe.Duplicate, "", nil
		return
	}
	it.deadLetter(event.PermanentWithReason(ReasonConflict,
		fmt.Errorf("event key %s was claimed with a different payload (stored hash %x, this one %x)",
			truncateKey(it.ev.Key), storedHash[:8], it.ev.PayloadHash[:8])))
}

func truncateKey(k string) string {
	if len(k) > 80 {
		return k[:80] + "…"
	}
	return k
}

// job is one event to hand to its handler, and where its outcome goes.
type job struct {
	ev     event.Event
	origin handlers.Origin
	// settle records the outcome: a disposition, or a permanent error.
	settle func(d dedupe.Disposition, err error)
}

// itemJobs are the batch's newly claimed events, in offset order.
func (a *Applier) itemJobs(b consumer.Batch, items []*item) []job {
	jobs := make([]job, 0, len(items))
	for _, it := range items {
		if !it.claimed || it.disposition != "" {
			continue // a repeat, or dead-lettered by its prefetch
		}
		jobs = append(jobs, job{
			ev:     it.ev,
			origin: handlers.Origin{Group: b.Group, Topic: b.Topic, Partition: b.Partition, Offset: it.rec.Offset},
			settle: func(d dedupe.Disposition, err error) {
				if err != nil {
					it.deadLetter(err)
					return
				}
				it.disposition = d
			},
		})
	}
	return jobs
}

// runJobs runs the jobs' handlers in order and sends their statements: all
// in one round trip, or, isolated, each event's in a savepoint of its own.
// With a gate, an event that waits for a prerequisite that does not exist
// yet (or for a resource with parked events) is parked instead; without
// one (parked events being released) every event runs its handler.
func (a *Applier) runJobs(ctx context.Context, tx pgx.Tx, jobs []job, isolated bool, gate *gate) error {
	effects := handling.NewEffects(a.opts.Env)
	type pending struct {
		j   *job
		out *handling.Outcome
	}
	queued := make([]pending, 0, len(jobs))
	for i := range jobs {
		j := &jobs[i]
		h, ok := a.reg.Handler(j.ev.Type)
		if !ok {
			j.settle("", handlers.UnknownType(j.ev.Type))
			continue
		}
		if isolated {
			effects = handling.NewEffects(a.opts.Env)
		}
		out := effects.Begin(j.origin, j.ev)
		park := false
		if gate != nil {
			// Validate before the gate: an event that can never apply is
			// dead-lettered now, not parked until parking.max_age.
			if err := a.reg.Validate(j.ev); err != nil {
				j.settle("", err)
				continue
			}
			var err error
			if park, err = gate.mustPark(j.ev); err != nil {
				j.settle("", err)
				continue
			}
		}
		var err error
		if park {
			err = queuePark(effects.Effects(), *j)
		} else {
			err = h.Handle(ctx, effects.Effects(), j.ev)
		}
		if err != nil {
			if _, fault := eventsFault(err); !fault {
				return fmt.Errorf("handling %s %s: %w", j.ev.Type, truncateKey(j.ev.Key), err)
			}
			effects.Discard() // none of a dead-lettered event's effects apply
			j.settle("", err)
			continue
		}
		queued = append(queued, pending{j, out})
		if isolated {
			if err := sendIsolated(ctx, tx, effects); err != nil {
				reason, fault := eventsFault(err)
				if !fault {
					return err
				}
				j.settle("", event.PermanentWithReason(reason, fmt.Errorf("applying %s: %w", j.ev.Type, err)))
				queued = queued[:len(queued)-1]
				continue
			}
		}
		if gate != nil && !park {
			// A batch that fails here is redone isolated, where only an
			// event whose statements committed gets this far.
			gate.created(j.ev)
		}
	}
	if !isolated && effects.Len() > 0 {
		if err := effects.Flush(ctx, tx); err != nil {
			return fmt.Errorf("applying %d events: %w", len(queued), err)
		}
	}
	for _, p := range queued {
		p.j.settle(p.out.Disposition, p.out.Err)
	}
	return nil
}

// sendIsolated sends one event's statements inside a savepoint, rolling back
// to it when a statement fails.
func sendIsolated(ctx context.Context, tx pgx.Tx, effects handling.Effects) error {
	if effects.Len() == 0 {
		return nil
	}
	sp, err := tx.Begin(ctx) // a savepoint
	if err != nil {
		return err
	}
	if err := effects.Flush(ctx, sp); err != nil {
		if rerr := sp.Rollback(ctx); rerr != nil {
			return rerr
		}
		return err
	}
	return sp.Commit(ctx)
}

func (a *Applier) letter(b consumer.Batch, it *item) deadletter.Letter {
	hs := make([]deadletter.Header, len(it.rec.Headers))
	for i, h := range it.rec.Headers {
		hs[i] = deadletter.NewHeader(h.Key, h.Value)
	}
	msg := ""
	if it.err != nil {
		msg = it.err.Error()
	}
	return deadletter.Letter{
		Group: b.Group, Topic: b.Topic, Partition: b.Partition, Offset: it.rec.Offset,
		EventKey: it.ev.Key, RecordKey: it.rec.Key, Value: it.rec.Value, Headers: hs,
		Reason: string(it.reason), Error: msg,
	}
}
