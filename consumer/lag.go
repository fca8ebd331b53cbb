package consumer

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"go.uber.org/zap"
)

// refreshLag recomputes the owned partitions' lag every LagInterval from the
// broker's end offsets until ctx ends. The end is the last stable offset
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
	c.mu.Lock()
	workers := make([]*partitionWorker, 0, len(c.workers))
	topics := map[string]bool{}
	for _, w := range c.workers {
		workers = append(workers, w)
		topics[w.tp.topic] = true
	}
	c.mu.Unlock()
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
		if w.position.Load() < 0 && c.opts.StartOffset != "latest" {
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
}
