package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	"github.com/effectively-io/effectively/internal/consumer"
	"github.com/effectively-io/effectively/internal/kafkatest"
)

// gatedApplier holds the first batch of every partition until released, and
// then reports success without storing anything — like a transaction whose
// COMMIT raced the revoke. Positions come from the shared store.
type gatedApplier struct {
	store   *memApplier
	entered chan int32
	release chan struct{}

	mu   sync.Mutex
	seen map[int32]bool
}

func (g *gatedApplier) Apply(ctx context.Context, b consumer.Batch) error {
	g.mu.Lock()
	first := !g.seen[b.Partition]
	g.seen[b.Partition] = true
	g.mu.Unlock()
	if !first {
		return g.store.Apply(ctx, b)
	}
	g.entered <- b.Partition
	<-g.release
	return nil
}

func (g *gatedApplier) Positions(ctx context.Context, group, topic string, ps []int32) (map[int32]consumer.Position, error) {
	return g.store.Positions(ctx, group, topic, ps)
}

// A member whose batch is in flight when its partition is revoked never
// commits that partition afterwards, even when the batch "succeeds" late:
// the revoke callback cancels the worker and returns within RevokeTimeout,
// and the late success finds its context cancelled. Without that, the late
// commit would rewind the new owner. This runs on the real broker: kfake
// refuses a commit for a partition the member no longer owns, which Kafka
// does not, so under kfake this test could not fail.
func TestNoCommitAfterRevoke(t *testing.T) {
	t.Parallel()
	topic := kafkatest.NewTopic(t, 2)
	group := kafkatest.NewGroup(t)
	brokers := kafkatest.Brokers(t)
	prod := kafkatest.Producer(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic(topic))
	for p := int32(0); p < 2; p++ {
		for i := 0; i < 20; i++ {
			require.NoError(t, prod.ProduceSync(context.Background(), &kgo.Record{Partition: p, Value: []byte(fmt.Sprint(i))}).FirstErr())
		}
	}

	store := newMemApplier()
	gate := &gatedApplier{store: store, entered: make(chan int32, 2), release: make(chan struct{}), seen: map[int32]bool{}}
	opts := func(a consumer.Applier) (consumer.Options, consumer.Applier) {
		return consumer.Options{
			Brokers: brokers, Group: group, Topics: []string{topic}, BatchMaxRecords: 10,
			RevokeTimeout: 300 * time.Millisecond, DrainTimeout: time.Second,
			SessionTimeout: 6 * time.Second, RebalanceTimeout: 10 * time.Second,
			RetryInitial: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond,
			Logger: zaptest.NewLogger(t),
		}, a
	}
	run := func(o consumer.Options, a consumer.Applier) func() {
		c, err := consumer.New(withDefaults(o), a)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		return func() { cancel(); require.NoError(t, <-done) }
	}

	stopA := run(opts(gate))
	// A holds a batch of each partition in flight.
	held := map[int32]bool{<-gate.entered: true, <-gate.entered: true}
	require.Len(t, held, 2)

	stopB := run(opts(store))
	// B takes one partition over and applies all of it from the stored
	// position (nothing: A never stored), once each.
	var taken int32 = -1
	waitFor(t, "B applies a partition", func() bool {
		store.mu.Lock()
		defer store.mu.Unlock()
		for p, offs := range store.applied {
			if len(offs) == 20 {
				taken = p
				return true
			}
		}
		return false
	})
	adm := kadm.NewClient(prod)
	committed := func() int64 {
		offs, err := adm.FetchOffsets(context.Background(), group)
		require.NoError(t, err)
		o, _ := offs.Lookup(topic, taken)
		return o.At
	}
	waitFor(t, "B's commit", func() bool { return committed() == 20 })

	// Now A's held batch of that partition "succeeds". A must not commit it.
	close(gate.release)
	time.Sleep(time.Second)
	require.Equal(t, int64(20), committed(), "the revoked member rewound the new owner's commit")
	store.mu.Lock()
	for i, o := range store.applied[taken] {
		require.Equal(t, int64(i), o)
	}
	store.mu.Unlock()
	stopB()
	stopA()
}
