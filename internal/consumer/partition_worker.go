package consumer

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/internal/crashpoint"
	"github.com/effectively-io/effectively/internal/redact"
)

// partitionWorker applies one partition's records in offset order. The poll
// loop pushes records into its queue; when the queue is full, or while a
// batch is being retried, the partition is paused at the client instead of
// blocking the poll loop (a blocked loop never allows a rebalance).
type partitionWorker struct {
	c   *Consumer
	cl  *kgo.Client // the group's client, as the assignment gave it (c.cl may not be set yet)
	tp  topicPartition
	log *zap.Logger

	ctx    context.Context // cancelled on revoke or hard stop
	cancel context.CancelFunc
	done   chan struct{}

	// hwm is the partition's high watermark at the last fetch; end is its
	// last stable offset at the last lag refresh (-1: not yet read);
	// position is the offset after the last record applied, or the stored
	// position the partition resumed from (-1: not yet known).
	hwm      atomic.Int64
	end      atomic.Int64
	position atomic.Int64
	// fetched is the offset after the last record the poll loop pushed (0
	// before the first); stopped is set when the partition's position is
	// outside its log and it was stopped.
	fetched atomic.Int64
	stopped atomic.Bool

	mu     sync.Mutex
	queue  []*kgo.Record
	queued int // bytes of keys and values in queue
	// held is the bytes this partition counts in the member's budget:
	// queued plus the batch being applied; stuck is the part of them
	// counted as stuck (all of them while a batch is retried).
	held, stuck int64
	paused      bool
	retrying    bool
	stopping    bool
	// stored is the position PostgreSQL holds as this member knows it (-1:
	// none): read when the partition was assigned, then each applied
	// batch's next offset, so it only moves forward while the member owns
	// the partition. kafka is the group's committed offset in Kafka as this
	// member last read or committed it (-1: none). While they differ the
	// worker commits stored, also with no record to apply (see syncKafka).
	// applied is set by the first batch applied: a stored position read at
	// assignment is older than that.
	stored, kafka int64
	applied       bool
	// commitRetryAt is when a failed commit of stored is tried again;
	// commitBackoff spaces the attempts (reset by a success).
	commitRetryAt time.Time
	commitBackoff *backoff.ExponentialBackOff
	// state is what effectively_partition_state shows, since when; cause,
	// lastErr and attempts describe the retry or the stop.
	state    string
	since    time.Time
	cause    string
	lastErr  string
	attempts int
	wake     chan struct{} // capacity 1: records arrived or stop requested
}

func newPartitionWorker(c *Consumer, cl *kgo.Client, tp topicPartition) *partitionWorker {
	ctx, cancel := context.WithCancel(c.hardCtx)
	w := &partitionWorker{
		c:      c,
		cl:     cl,
		tp:     tp,
		log:    c.log.With(zap.String("topic", tp.topic), zap.Int32("partition", tp.partition)),
		ctx:    ctx,
		cancel: cancel,
		done:   make(chan struct{}),
		wake:   make(chan struct{}, 1),
	}
	w.end.Store(-1)
	w.position.Store(-1)
	w.stored, w.kafka = -1, -1
	w.commitBackoff = newBackoff(c.opts.RetryInitial, min(c.opts.RetryMax, c.opts.LagInterval))
	w.mu.Lock()
	w.refreshStateLocked()
	w.mu.Unlock()
	return w
}

// refreshStateLocked derives the partition's state from its flags and
// publishes a change: stopped wins over retrying, retrying over a
// backpressure pause.
func (w *partitionWorker) refreshStateLocked() {
	state := StateRunning
	switch {
	case w.stopped.Load():
		state = StateStopped
	case w.retrying:
		state = StateRetrying
	case w.paused:
		state = StatePaused
	}
	cause := ""
	if state == StateRetrying {
		cause = w.cause
	}
	if state != w.state {
		w.since = time.Now()
	}
	w.state = state
	w.c.opts.Metrics.setState(w.tp, state, cause)
}

// status is the partition as this member sees it.
func (w *partitionWorker) status() PartitionStatus {
	w.mu.Lock()
	st := PartitionStatus{Topic: w.tp.topic, Partition: w.tp.partition, State: w.state, Since: w.since, Position: w.position.Load(), EndOffset: w.end.Load(), Lag: -1}
	switch w.state {
	case StateRetrying:
		st.Cause, st.Error, st.Attempts = w.cause, w.lastErr, w.attempts
	case StateStopped:
		st.Error = w.lastErr
	}
	w.mu.Unlock()
	if st.Position >= 0 && st.EndOffset >= 0 {
		st.Lag = max(st.EndOffset-st.Position, 0)
	}
	return st
}

// stop marks the partition stopped (its position is outside its log).
func (w *partitionWorker) stop(why string) {
	w.stopped.Store(true)
	w.mu.Lock()
	w.lastErr = why
	w.refreshStateLocked()
	w.mu.Unlock()
}

// updateLag publishes the partition's lag from its position and the larger
// of the end offset last listed and the high watermark last fetched.
func (w *partitionWorker) updateLag() {
	pos, end, hwm := w.position.Load(), w.end.Load(), w.hwm.Load()
	if pos < 0 || (end < 0 && hwm == 0) {
		return
	}
	w.c.opts.Metrics.setLag(w.tp, max(end, hwm)-pos)
}

func (w *partitionWorker) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// push queues records from the poll loop.
func (w *partitionWorker) push(recs []*kgo.Record) {
	n := int64(recordBytes(recs))
	w.mu.Lock()
	w.queue = append(w.queue, recs...)
	w.queued += int(n)
	changed := w.holdLocked(w.held + n)
	w.updatePauseLocked()
	w.mu.Unlock()
	w.budgetChanged(changed)
	w.signal()
}

// release gives back n bytes of the partition's share of the budget: a
// batch that was applied (or abandoned), or at the end everything left.
func (w *partitionWorker) release(n int64) {
	w.mu.Lock()
	changed := w.holdLocked(w.held - min(n, w.held))
	w.updatePauseLocked()
	w.mu.Unlock()
	w.budgetChanged(changed)
}

// holdLocked sets the bytes the partition holds in the budget; while a
// batch is retried they are all stuck (see budget). It reports whether
// the budget changed state.
func (w *partitionWorker) holdLocked(held int64) (changed bool) {
	stuck := int64(0)
	if w.retrying {
		stuck = held
	}
	changed = w.c.budget.adjust(held-w.held, stuck-w.stuck)
	w.held, w.stuck = held, stuck
	return changed
}

// budgetChanged publishes the bytes held and, when the budget changed
// state, has every partition re-evaluate its pause. Called without w.mu.
func (w *partitionWorker) budgetChanged(changed bool) {
	w.c.opts.Metrics.setInflight(w.c.budget.held())
	if changed {
		w.c.rebudget()
	}
}

// recordBytes is what records count against the bounds: their keys and
// values.
func recordBytes(recs []*kgo.Record) int {
	n := 0
	for _, r := range recs {
		n += len(r.Key) + len(r.Value)
	}
	return n
}

// stopGracefully lets the in-flight batch finish and commit, then stops.
func (w *partitionWorker) stopGracefully() {
	w.mu.Lock()
	w.stopping = true
	w.mu.Unlock()
	w.signal()
}

// updatePauseLocked pauses the partition while its queue is full or a batch
// is being retried, and resumes it once the queue is half empty. Paused
// partitions' buffered fetches are dropped by the client and re-fetched from
// the same position on resume, so nothing is skipped.
func (w *partitionWorker) updatePauseLocked() {
	if w.ctx.Err() != nil {
		// Revoked (or stopping hard): the partition's pause is no longer
		// this worker's to set — the revoke callback resumed it, and a
		// new owner's worker, on this member or another, decides.
		return
	}
	o := w.c.opts
	o.Metrics.setBuffered(w.tp, len(w.queue), w.queued)
	want := w.retrying || len(w.queue) >= o.MaxBufferedRecords || w.queued >= o.MaxBufferedBytes || w.c.budget.exhausted()
	if !want && w.paused && (len(w.queue) > o.MaxBufferedRecords/2 || w.queued > o.MaxBufferedBytes/2) {
		want = true // hysteresis
	}
	if want == w.paused {
		return
	}
	w.paused = want
	tps := map[string][]int32{w.tp.topic: {w.tp.partition}}
	if want {
		w.cl.PauseFetchPartitions(tps)
	} else {
		w.cl.ResumeFetchPartitions(tps)
	}
	w.refreshStateLocked()
}

func (w *partitionWorker) run() {
	defer close(w.done)
	// Whatever the partition still holds (its queue, a cancelled batch) is
	// dropped with the worker.
	defer func() { w.release(math.MaxInt64) }()
	for {
		b, ok := w.next()
		if !ok {
			return
		}
		applied := w.apply(b)
		w.release(int64(recordBytes(b.Records)))
		if !applied {
			return
		}
		crashpoint.Hit(crashpoint.AfterDBCommit)
		if w.ctx.Err() != nil {
			// Revoked while the batch was being applied: the partition is
			// someone else's now, and a commit from here would rewind them.
			// (A revoke landing between this check and the commit below
			// waits for it: the callback waits for this goroutine, and the
			// new owner is assigned only after the callback returns.)
			return
		}
		w.commit(b)
		crashpoint.Hit(crashpoint.AfterKafkaCommit)
	}
}

// next waits for records and takes up to BatchMaxRecords of them, lingering
// up to BatchLinger for a fuller batch. While it waits, it keeps Kafka's
// committed offset at the stored position (see syncKafka).
func (w *partitionWorker) next() (Batch, bool) {
	var linger <-chan time.Time
	for {
		if w.ctx.Err() != nil {
			return Batch{}, false
		}
		w.mu.Lock()
		stopping, n := w.stopping, len(w.queue)
		if !stopping && n > 0 && (n >= w.c.opts.BatchMaxRecords || w.c.opts.BatchLinger <= 0 || lingerDone(linger)) {
			take := min(n, w.c.opts.BatchMaxRecords)
			recs := make([]*kgo.Record, take)
			copy(recs, w.queue)
			w.queued -= recordBytes(recs)
			// Delete clears the slots it vacates: a taken record, and the
			// fetched batch its key and value point into, are not kept
			// alive by the queue's spare capacity.
			w.queue = slices.Delete(w.queue, 0, take)
			w.updatePauseLocked()
			w.mu.Unlock()
			return Batch{Group: w.c.opts.Group, Topic: w.tp.topic, Partition: w.tp.partition, Records: recs}, true
		}
		w.mu.Unlock()
		if stopping {
			// A last attempt if the last commit failed: with no member
			// left (scaled to zero), nobody else would correct Kafka,
			// and an autoscaler would read lag that is not there.
			w.syncKafka(true)
			return Batch{}, false
		}
		if n > 0 && linger == nil {
			t := time.NewTimer(w.c.opts.BatchLinger)
			defer t.Stop()
			linger = t.C
		}
		retry := w.syncKafka(false)
		select {
		case <-w.ctx.Done():
			return Batch{}, false
		case <-w.wake:
		case <-linger:
			linger = closedTimeChan
		case <-retry:
		}
	}
}

var closedTimeChan = func() <-chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()

func lingerDone(c <-chan time.Time) bool { return c == closedTimeChan }

// apply applies b, retrying transient failures with backoff while the
// partition is paused. It returns false when the worker was cancelled.
func (w *partitionWorker) apply(b Batch) bool {
	w.c.partitioner.Load().check(b, w.c.partitionCount(b.Topic))
	start := time.Now()
	attempt := 0
	err := retry(w.ctx, w.c.opts.RetryInitial, w.c.opts.RetryMax, func() error {
		attempt++
		err := w.c.applier.Apply(w.ctx, b)
		if err != nil && w.ctx.Err() == nil {
			cause := RetryCause(err)
			w.c.opts.Metrics.retried(w.tp)
			// The error may hold a URL (a prefetch's source): redacted
			// before the log and /status.
			shown := redact.Error(err)
			w.log.Warn("applying batch failed; retrying with backoff while the partition is paused",
				zap.Int64("first_offset", b.Records[0].Offset), zap.Int("records", len(b.Records)),
				zap.Int("attempt", attempt), zap.String("cause", cause), zap.Error(shown))
			w.setRetrying(true, cause, shown.Error(), attempt)
		}
		return err
	})
	w.setRetrying(false, "", "", 0)
	if err != nil {
		return false
	}
	w.c.opts.Metrics.applied(b, time.Since(start))
	w.position.Store(b.NextOffset())
	w.mu.Lock()
	w.stored, w.applied = b.NextOffset(), true
	w.mu.Unlock()
	w.updateLag()
	return true
}

func (w *partitionWorker) setRetrying(v bool, cause, lastErr string, attempts int) {
	w.mu.Lock()
	if w.retrying == v && w.cause == cause && w.attempts == attempts {
		w.mu.Unlock()
		return
	}
	w.retrying, w.cause, w.lastErr, w.attempts = v, cause, lastErr, attempts
	// A retried batch's bytes are stuck for as long as it fails.
	changed := w.holdLocked(w.held)
	w.updatePauseLocked()
	w.refreshStateLocked()
	w.mu.Unlock()
	w.budgetChanged(changed)
}

// commit commits the batch's next offset to Kafka, after the database
// committed it. A failure is logged and retried by syncKafka, also when no
// record follows; PostgreSQL holds the authoritative position meanwhile, so
// a lagging Kafka commit costs a re-read at most, and lag that Kafka's tools
// read too high until the retry.
func (w *partitionWorker) commit(b Batch) {
	last := b.Records[len(b.Records)-1]
	w.commitOffset(last.Offset+1, last.LeaderEpoch)
}

// syncKafka commits the stored position to Kafka when Kafka's committed
// offset differs from it and no batch is about to: after an assignment that
// found them apart (the previous owner's commit missed between its database
// commit and a crash or a revoke, a rewind whose Kafka step failed, an
// offset moved with Kafka's own tools), after a failed commit, and after a
// stale member's commit rewound Kafka (see Consumer.refreshLagOnce).
// Without it an idle, fully applied partition would show lag in every Kafka
// tool and autoscaler until its next record. Kafka follows PostgreSQL both
// ways here: the worker resumes from the stored position, whatever Kafka
// says. Only the worker's goroutine commits, so the revoke callback, which
// waits for it, fences these commits exactly like a batch's.
//
// A failed attempt waits for a backoff unless now is set; syncKafka returns
// a channel that fires when the next attempt is due, nil when none is.
func (w *partitionWorker) syncKafka(now bool) <-chan time.Time {
	w.mu.Lock()
	stored, kafka, retryAt := w.stored, w.kafka, w.commitRetryAt
	w.mu.Unlock()
	if stored < 0 || stored == kafka || w.ctx.Err() != nil {
		return nil
	}
	if wait := time.Until(retryAt); wait > 0 && !now {
		return time.After(wait)
	}
	if !w.commitOffset(stored, -1) {
		w.mu.Lock()
		wait := time.Until(w.commitRetryAt)
		w.mu.Unlock()
		return time.After(wait)
	}
	w.c.opts.Metrics.kafkaSynced(w.tp.topic)
	w.log.Info("committed the position stored in PostgreSQL to Kafka, whose committed offset differed (Kafka's tools read the true lag again)",
		zap.Int64("offset", stored), zap.Int64("kafka_offset", kafka))
	return nil
}

// commitOffset commits offset for the partition to Kafka and records the
// outcome: on success Kafka's committed offset as the worker knows it, on
// failure when to try again. It reports whether the commit succeeded.
func (w *partitionWorker) commitOffset(offset int64, epoch int32) bool {
	offsets := map[string]map[int32]kgo.EpochOffset{
		w.tp.topic: {w.tp.partition: {Epoch: epoch, Offset: offset}},
	}
	var failed error
	w.cl.CommitOffsetsSync(w.ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err == nil {
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if p.ErrorCode != 0 {
						err = kerrForCode(p.ErrorCode)
					}
				}
			}
		}
		failed = err
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	if failed == nil {
		w.kafka = offset
		w.commitRetryAt = time.Time{}
		w.commitBackoff.Reset()
		return true
	}
	if w.ctx.Err() != nil {
		return false // revoked or stopping hard: the partition is not ours to commit
	}
	wait := w.commitBackoff.NextBackOff()
	w.commitRetryAt = time.Now().Add(wait)
	w.c.opts.Metrics.commitFailed(w.tp.topic)
	w.log.Warn("committing to Kafka failed; PostgreSQL holds the position, and the commit is retried, with or without new records",
		zap.Int64("offset", offset), zap.Duration("retry_in", wait), zap.Error(failed))
	return false
}

// resume sets the positions read when the partition was assigned: stored
// from PostgreSQL, kafka the group's committed offset (-1: none). A worker
// that has applied a batch since knows better and keeps its own.
func (w *partitionWorker) resume(stored, kafka int64) {
	w.mu.Lock()
	if !w.applied {
		w.stored, w.kafka = stored, kafka
		w.position.Store(stored)
	}
	w.mu.Unlock()
	w.signal()
}

// observeKafka compares the group's committed offset read from Kafka with
// what the worker knew before the read (was). An offset below the stored
// position that the worker did not expect means someone else committed
// after it did — a stale member, whose commit rewinds this owner's —, and
// the worker commits the stored position again. A commit of the worker's
// own that finished since the read (kafka changed) makes the read stale:
// it is ignored.
func (w *partitionWorker) observeKafka(was, committed int64) {
	w.mu.Lock()
	rewound := w.kafka == was && committed != was && committed < w.stored
	if rewound {
		w.kafka = committed
	}
	w.mu.Unlock()
	if rewound {
		w.log.Warn("Kafka's committed offset fell behind the position stored in PostgreSQL (a stale member's commit?); committing the stored position again",
			zap.Int64("kafka_offset", committed), zap.Int64("stored_offset", w.storedPosition()))
		w.signal()
	}
}

// storedPosition is the position PostgreSQL holds as the worker knows it.
func (w *partitionWorker) storedPosition() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stored
}

// kafkaPosition is the group's committed offset as the worker knows it.
func (w *partitionWorker) kafkaPosition() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.kafka
}
