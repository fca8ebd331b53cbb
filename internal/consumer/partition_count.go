package consumer

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// WarnPartitionCount logs that a topic's partition count changed from was
// to now. Producers hash keys over the partition count, so most resources
// now land in another partition than their earlier events: until the old
// partitions have drained, one resource's events are in two partitions and
// may apply out of order (version gates keep absolute state right; parked
// and dependent events may wait or dead-letter).
func WarnPartitionCount(log *zap.Logger, topic string, was, now int) {
	log.Warn("the topic's partition count changed: keys now hash to other partitions, so one resource's events can sit in two "+
		"partitions and apply out of order until the older ones drain (the producer contract asks for a fixed count). "+
		"If this was not deliberate, stop producers and consumers before changing partitions; if it was, let the group catch up "+
		"before producing again, and watch effectively_dead_letters_total and the parked count",
		zap.String("topic", topic), zap.Int("partitions_before", was), zap.Int("partitions_now", now))
}

// partitionsGrew runs when a partition at or beyond the topic's known count
// is assigned: it looks up the new count, warns, and replaces the member's
// counts, so the partitioner check does not take the new partitions for a
// producer with another partitioner.
func (c *Consumer) partitionsGrew(cl *kgo.Client, topic string, was, atLeast int) {
	now := atLeast
	ctx, cancel := context.WithTimeout(c.hardCtx, 10*time.Second)
	defer cancel()
	details, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if d, ok := details[topic]; err == nil && ok && d.Err == nil && len(d.Partitions) > now {
		now = len(d.Partitions)
	} else if err != nil {
		c.log.Warn("looking up the topic's new partition count failed; using the highest partition assigned", zap.String("topic", topic), zap.Error(err))
	}
	c.mu.Lock()
	counts := map[string]int{topic: now}
	for t, n := range *c.counts.Load() {
		if t != topic {
			counts[t] = n
		}
	}
	c.counts.Store(&counts)
	c.growing[topic] = false
	c.mu.Unlock()
	WarnPartitionCount(c.log, topic, was, now)
	if c.opts.OnPartitionCount != nil {
		c.opts.OnPartitionCount(topic, now)
	}
}
