package replay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/effectively-io/effectively/internal/consumer"
	"github.com/effectively-io/effectively/internal/pipeline"
)

// BoundedOptions configure a bounded replay.
type BoundedOptions struct {
	// Consumer configures the replay's group member: Group is the replay
	// group, Topics the one topic replayed. StopAt is set from To.
	Consumer consumer.Options
	// Applier is the worker's own pipeline: the same decoders and handlers.
	Applier *pipeline.Applier
	// Topic is replayed over [From, To) of each partition. The replay
	// group's stored positions must already be at From.
	Topic    string
	From, To map[int32]int64
	// Progress, when set, is called after every applied batch with the
	// offsets done and the total.
	Progress func(done, total int64)
}

// Report is what a bounded replay did.
type Report struct {
	Group string `json:"group"`
	Topic string `json:"topic"`
	// Records is the offsets replayed (up to each partition's To).
	Records int64 `json:"records"`
	// Dispositions counts the replayed records by disposition (applied,
	// duplicate, stale, parked, dead_lettered).
	Dispositions map[string]int64 `json:"dispositions"`
	// DeadLetters counts the dead-lettered ones by reason.
	DeadLetters map[string]int64 `json:"dead_letters"`
	// Released counts parked events (possibly parked before the replay)
	// that a replayed prerequisite released, by outcome.
	Released map[string]int64 `json:"released"`
	// Elapsed is from the start to the end of the replay; Steady from the
	// first applied batch to the end. Rate is Records / Steady.
	Elapsed time.Duration `json:"-"`
	Steady  time.Duration `json:"-"`
	Seconds float64       `json:"seconds"`
	Rate    float64       `json:"records_per_second"`
	// Complete is false when the replay was interrupted.
	Complete bool `json:"complete"`
}

// tracker is the replay's consumer.Applier: the worker's pipeline, plus
// counting and the end condition.
type tracker struct {
	*pipeline.Applier
	from, to map[int32]int64
	total    int64
	progress func(done, total int64)
	finished context.CancelFunc

	mu      sync.Mutex
	next    map[int32]int64
	report  *Report
	firstAt time.Time
	pending int // partitions not yet at their To
}

// Apply implements consumer.Applier.
func (t *tracker) Apply(ctx context.Context, b consumer.Batch) error {
	res, err := t.ApplyBatch(ctx, b)
	t.mu.Lock()
	defer t.mu.Unlock()
	// A batch applied in parts that fails keeps the parts it committed:
	// count them now, as the retry fences their records.
	for d, n := range res.Counts {
		t.report.Dispositions[string(d)] += int64(n)
	}
	for r, n := range res.DeadLetters {
		t.report.DeadLetters[string(r)] += int64(n)
	}
	for d, n := range res.Released {
		t.report.Released[string(d)] += int64(n)
	}
	if err != nil {
		return err
	}
	if t.firstAt.IsZero() {
		t.firstAt = time.Now()
	}
	prev := t.next[b.Partition]
	next := max(prev, b.NextOffset())
	t.next[b.Partition] = next
	if prev < t.to[b.Partition] && next >= t.to[b.Partition] {
		t.pending--
		if t.pending == 0 {
			t.finished()
		}
	}
	if t.progress != nil {
		t.progress(t.doneLocked(), t.total)
	}
	return nil
}

func (t *tracker) doneLocked() int64 {
	var n int64
	for p, from := range t.from {
		n += min(t.next[p], t.to[p]) - from
	}
	return n
}

// Bounded replays the topic over [From, To) of each partition through the
// worker's pipeline, as a member of its own group, and returns when every
// partition has reached its To (or ctx is cancelled: then the report is
// incomplete and the error says so).
func Bounded(ctx context.Context, opts BoundedOptions) (Report, error) {
	rep := Report{Group: opts.Consumer.Group, Topic: opts.Topic,
		Dispositions: map[string]int64{}, DeadLetters: map[string]int64{}, Released: map[string]int64{}}
	runCtx, finished := context.WithCancel(ctx)
	defer finished()
	t := &tracker{Applier: opts.Applier, from: opts.From, to: opts.To, progress: opts.Progress, finished: finished,
		next: map[int32]int64{}, report: &rep}
	stopAt := map[int32]int64{}
	for p, from := range opts.From {
		to := opts.To[p]
		stopAt[p] = to
		t.next[p] = from
		if to > from {
			t.total += to - from
			t.pending++
		}
	}
	start := time.Now()
	if t.pending > 0 {
		co := opts.Consumer
		co.Topics = []string{opts.Topic}
		co.StopAt = map[string]map[int32]int64{opts.Topic: stopAt}
		cons, err := consumer.New(co, t)
		if err != nil {
			return rep, err
		}
		if err := cons.Run(runCtx); err != nil {
			return rep, err
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	rep.Records = t.doneLocked()
	rep.Elapsed = time.Since(start)
	rep.Steady = rep.Elapsed
	if !t.firstAt.IsZero() {
		rep.Steady = time.Since(t.firstAt)
	}
	rep.Seconds = rep.Steady.Seconds()
	if rep.Seconds > 0 {
		rep.Rate = float64(rep.Records) / rep.Seconds
	}
	rep.Complete = t.pending == 0
	if !rep.Complete {
		err := ctx.Err()
		if err == nil {
			err = errors.New("the consumer stopped")
		}
		return rep, fmt.Errorf("replay of %s interrupted after %d of %d records: %w", opts.Topic, rep.Records, t.total, err)
	}
	return rep, nil
}
