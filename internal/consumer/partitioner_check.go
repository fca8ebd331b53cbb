package consumer

import (
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// partitionerCheck verifies that records were partitioned by murmur2 of their
// key (Java's and franz-go's default). A producer using another partitioner
// (Sarama's FNV-1a, librdkafka's CRC32) spreads one resource's events over
// two partitions, and per-resource order is gone. Mismatches are counted and
// warned about once per topic; they are not errors, since some topics use
// another partitioner on purpose (configurable off per topic).
type partitionerCheck struct {
	log     *zap.Logger
	metrics *Metrics
	// checked are the topics whose records are checked.
	checked map[string]bool

	mu     sync.Mutex
	warned map[string]bool
}

func newPartitionerCheck(log *zap.Logger, m *Metrics, topics []string) *partitionerCheck {
	checked := make(map[string]bool, len(topics))
	for _, t := range topics {
		checked[t] = true
	}
	return &partitionerCheck{log: log, metrics: m, checked: checked, warned: map[string]bool{}}
}

// murmur2 is franz-go's default key partitioner: murmur2, as Kafka's Java
// client computes it.
var murmur2 = kgo.StickyKeyPartitioner(nil).ForTopic("")

// check inspects one batch's records against the topic's partition count n.
func (pc *partitionerCheck) check(b Batch, n int) {
	if pc == nil || !pc.checked[b.Topic] || n <= 0 {
		return
	}
	mismatches := 0
	var example *kgo.Record
	for _, r := range b.Records {
		if r.Key == nil {
			continue
		}
		if int32(murmur2.Partition(r, n)) != r.Partition {
			mismatches++
			example = r
		}
	}
	if mismatches == 0 {
		return
	}
	pc.metrics.partitionerMismatch(b.Topic, mismatches)
	pc.mu.Lock()
	first := !pc.warned[b.Topic]
	pc.warned[b.Topic] = true
	pc.mu.Unlock()
	if first {
		pc.log.Warn("records are not partitioned by murmur2 of their key: a producer of this topic uses another partitioner "+
			"(Sarama's FNV-1a or librdkafka's CRC32?), so one resource's events can land in two partitions and lose their order; "+
			"make every producer use murmur2, or set the topic's check_partitioner to false if this is on purpose",
			zap.String("topic", b.Topic), zap.Int32("partition", example.Partition), zap.Int64("offset", example.Offset),
			zap.Int("expected_partition", murmur2.Partition(example, n)))
	}
}
