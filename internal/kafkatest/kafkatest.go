// Package kafkatest gives each test its own randomly named topics and
// consumer group on the test broker, and deletes the topics afterwards.
package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/internal/stacktest"
)

// Brokers returns the test broker's seed addresses.
func Brokers(t testing.TB) []string {
	t.Helper()
	return stacktest.KafkaBrokers(t)
}

// Admin returns an admin client on the test broker, closed with the test.
func Admin(t testing.TB) *kadm.Client {
	t.Helper()
	// Metadata is asked again after 100 ms, not franz-go's 5 s: a test
	// waiting for a topic to be served polls the broker, not a cached
	// "unknown".
	cl, err := kgo.NewClient(kgo.SeedBrokers(Brokers(t)...), kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		t.Fatalf("kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// NewTopic creates a uniquely named topic with the given partition count and
// deletes it when the test ends.
func NewTopic(t testing.TB, partitions int32) string {
	t.Helper()
	if partitions < 1 {
		t.Fatalf("NewTopic(%d): give a partition count", partitions)
	}
	name := Name(t, "topic")
	adm := Admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, 1, nil, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("creating topic %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, name)
	})
	// CreateTopics answers before every broker's metadata serves the
	// topic: a client asking at once can be told it does not exist (CI
	// saw the dead-letter relay size a topic from that answer). Return
	// once the metadata lists this topic, by its ID, with a leader on
	// every partition.
	for {
		tds, err := adm.ListTopics(ctx, name)
		last := fmt.Sprint(err)
		if err == nil {
			td := tds[name]
			if td.Err == nil && td.ID == resp.ID && int32(len(td.Partitions)) == partitions && leadersEverywhere(td) {
				return name
			}
			last = fmt.Sprintf("error %v, ID %s (created %s), %d partitions, leaders everywhere %t", td.Err, td.ID, resp.ID, len(td.Partitions), leadersEverywhere(td))
		}
		select {
		case <-ctx.Done():
			t.Fatalf("topic %s created but not served by the metadata within a minute; last answer: %s", name, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func leadersEverywhere(td kadm.TopicDetail) bool {
	for _, p := range td.Partitions {
		if p.Err != nil || p.Leader < 0 {
			return false
		}
	}
	return true
}

// NewGroup returns a unique consumer group name.
func NewGroup(t testing.TB) string {
	t.Helper()
	return Name(t, "group")
}

// Name returns a unique, readable name for a test resource.
func Name(t testing.TB, kind string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	n := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	if len(n) > 60 {
		n = n[:60]
	}
	return "test." + n + "." + kind + "." + hex.EncodeToString(b)
}

// Producer returns a producer client on the test broker, closed with the test.
func Producer(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(Brokers(t)...)}, opts...)...)
	if err != nil {
		t.Fatalf("kafka producer: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// DeleteOnCleanup deletes topics (made by the code under test, such as a
// dead-letter topic) when the test ends.
func DeleteOnCleanup(t testing.TB, topics ...string) {
	t.Helper()
	adm := Admin(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, topics...)
	})
}

// ReadCommitted reads topic from the start with read_committed isolation
// until it has n records, failing the test after guard.
func ReadCommitted(t testing.TB, topic string, n int, guard time.Duration) []*kgo.Record {
	t.Helper()
	return ReadCommittedFrom(t, Brokers(t), topic, n, guard)
}

// ReadCommittedFrom is ReadCommitted on the given brokers (a test's own).
func ReadCommittedFrom(t testing.TB, brokers []string, topic string, n int, guard time.Duration) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		t.Fatalf("kafka consumer: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records from %s within %s", len(out), n, topic, guard)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

// KeysOnEveryPartition returns each × partitions record keys, prefix
// followed by a number, such that murmur2 — the producer's default key
// partitioner, and Kafka's — puts each of them on every one of the
// partitions.
func KeysOnEveryPartition(prefix string, partitions, each int) []string {
	murmur2 := kgo.StickyKeyPartitioner(nil).ForTopic("")
	taken := make([]int, partitions)
	keys := make([]string, 0, partitions*each)
	for i := 0; len(keys) < cap(keys); i++ {
		k := fmt.Sprintf("%s%06d", prefix, i)
		if p := murmur2.Partition(&kgo.Record{Key: []byte(k)}, partitions); taken[p] < each {
			taken[p]++
			keys = append(keys, k)
		}
	}
	return keys
}
