package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/internal/consumer"
	"github.com/effectively-io/effectively/internal/kafkatest"
)

// StopAt bounds a member (a bounded replay): each partition is applied up to
// its bound and not one record further, however much more arrives.
func TestStopAtBoundsConsumption(t *testing.T) {
	t.Parallel()
	topic := kafkatest.NewTopic(t, 2)
	produce(t, topic, 300, 0)
	ends, err := kafkatest.Admin(t).ListEndOffsets(context.Background(), topic)
	require.NoError(t, err)
	end1, ok := ends.Lookup(topic, 1)
	require.True(t, ok)
	require.Greater(t, end1.Offset, int64(20))
	bounds := map[int32]int64{0: 20, 1: end1.Offset}

	a := newMemApplier()
	stop := startConsumer(t, consumer.Options{Group: kafkatest.NewGroup(t), Topics: []string{topic}, BatchMaxRecords: 7,
		StopAt: map[string]map[int32]int64{topic: bounds}}, a)
	want := int(bounds[0] + bounds[1])
	waitFor(t, "both partitions applied up to their bounds", func() bool { return a.total() >= want })
	produce(t, topic, 100, 300) // more arrives past the bounds
	time.Sleep(2 * time.Second)
	stop()

	a.mu.Lock()
	defer a.mu.Unlock()
	for p, bound := range bounds {
		offs := a.applied[p]
		require.Len(t, offs, int(bound), "partition %d: applied exactly up to its bound", p)
		for i, o := range offs {
			require.Equal(t, int64(i), o, "partition %d", p)
		}
	}
}
