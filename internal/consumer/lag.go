package consumer

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"go.uber.org/zap"

	settings "github.com/effectively-io/effectively/consumer"
)

// refreshLag recomputes the owned partitions' lag every LagInterval from the
// broker's end offsets until ctx ends, and checks Kafka's committed offsets
// against the stored positions. The end is the last stable offset
// (the group reads read_committed, so records of open transactions are not
// yet lag) and the position is the one this member applied, so the lag
// keeps rising while a partition cannot apply: PostgreSQL down, a stopped
// partition, a stuck handler.
func (c *Consumer) refreshLag(ctx context.Context) {
	t := time.NewTicker(c.opts.LagInterval)
	defer t.Stop()
	adm := kadm.NewClient(c.cl)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.refreshLagOnce(ctx, adm)
	}
}

func (c *Consumer) refreshLagOnce(ctx context.Context, adm *kadm.Client) {
	workers := c.ownedWorkers()
	topics := map[string]bool{}
	for _, w := range workers {
		topics[w.tp.topic] = true
	}
	if len(workers) == 0 {
		return
	}
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.LagInterval)
	defer cancel()
	ends, err := adm.ListCommittedOffsets(ctx, names...)
	if err != nil && len(ends) == 0 {
		if ctx.Err() == nil {
			c.log.Debug("listing end offsets for lag failed; trying again", zap.Error(err))
		}
		return
	}
	var starts kadm.ListedOffsets
	for _, w := range workers {
		if e, ok := ends.Lookup(w.tp.topic, w.tp.partition); ok && e.Err == nil {
			w.end.Store(e.Offset)
		}
		if w.position.Load() < 0 && c.opts.StartOffset != settings.StartOffsetLatest {
			// Nothing applied and no stored position: the partition
			// starts at its log start.
			if starts == nil {
				starts, _ = adm.ListStartOffsets(ctx, names...)
			}
			if s, ok := starts.Lookup(w.tp.topic, w.tp.partition); ok && s.Err == nil {
				w.position.CompareAndSwap(-1, s.Offset)
			}
		}
		w.updateLag()
	}
	c.checkCommitted(ctx, adm, workers)
}

// checkCommitted reads the group's committed offsets in Kafka and hands each
// worker its partition's (see partitionWorker.observeKafka), so that a stale
// member's commit that rewound Kafka behind this member's is undone within a
// LagInterval, not at the partition's next record. One OffsetFetch request
// per interval.
func (c *Consumer) checkCommitted(ctx context.Context, adm *kadm.Client, workers []*partitionWorker) {
	// What each worker knew before the read: a commit of its own that
	// finishes during the read makes the read stale for that partition.
	was := make([]int64, len(workers))
	for i, w := range workers {
		was[i] = w.kafkaPosition()
	}
	committed, err := adm.FetchOffsets(ctx, c.opts.Group)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Debug("reading the group's committed offsets failed; trying again", zap.Error(err))
		}
		return
	}
	for i, w := range workers {
		at := int64(-1) // absent: nothing committed
		if o, ok := committed.Lookup(w.tp.topic, w.tp.partition); ok {
			if o.Err != nil {
				continue
			}
			at = o.At
		}
		w.observeKafka(was[i], at)
	}
}
