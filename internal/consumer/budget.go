package consumer

import (
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// budget bounds the bytes of records a member holds across all its
// partitions: fetched into a partition's queue, or taken into the batch
// being applied, until that batch is done. A partition's own bound
// (MaxBufferedBytes) keeps one partition from filling memory; the budget
// keeps many from doing it together (16 partitions of 8 MiB of 1 MiB
// records each would otherwise be 128 MiB of queues, and the batches being
// applied hold their records about three times over).
//
// Once the bytes held reach the limit every partition is paused; once they
// fall to half of it every partition re-evaluates its own bounds and the
// ones free to fetch resume. Pausing stops fetching only: queued records
// are still applied, so the bytes held fall — except those of a partition
// whose batch is being retried (PostgreSQL down for it, a lock, a source),
// which may hold them for as long as the fault lasts. Those are stuck:
// they still count as held but not towards exhaustion, so a few failing
// partitions cannot stall the healthy ones (memory stays bounded by the
// budget plus each retrying partition's own bound). A single record larger
// than the limit still passes, alone.
type budget struct {
	limit int64

	mu          sync.Mutex
	used, stuck int64
	over        bool
}

// adjust counts used more bytes held, stuck more of them stuck (either may
// be negative). It reports whether the budget just became exhausted or
// just left that state (the bytes held and not stuck fell to half the
// limit): then every partition must be told (see Consumer.rebudget).
func (b *budget) adjust(used, stuck int64) (changed bool) {
	if used == 0 && stuck == 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used += used
	b.stuck += stuck
	free := b.used - b.stuck
	switch {
	case !b.over && free >= b.limit:
		b.over = true
		return true
	case b.over && free <= b.limit/2:
		b.over = false
		return true
	}
	return false
}

// exhausted reports whether partitions must stay paused.
func (b *budget) exhausted() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.over
}

// held is the bytes held now, stuck ones included.
func (b *budget) held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// fetchSizer keeps what the Kafka client buffers within a share of the
// budget. Kafka's fetch limits (kafka.fetch_max_bytes and
// fetch_max_partition_bytes) count bytes as stored, compressed; the client
// decompresses a fetch when it arrives and holds it until it is polled, so
// 50 MiB of JSON compressed tenfold is 500 MiB in memory. It watches the
// ratio of the batches read and asks for at most fetchShare of the budget,
// decompressed, per fetch (never more than configured; Kafka still returns
// at least one record batch, so a partition never stalls on its size).
type fetchSizer struct {
	cl                atomic.Pointer[kgo.Client]
	maxBytes, maxPart int32 // configured
	want              int64 // decompressed bytes per fetch
	mu                sync.Mutex
	ratio             float64 // decompressed / compressed, smoothed (≥ 1)
	curBytes, curPart int32
}

// fetchShare is the budget's share one fetch may take, decompressed: the
// queues and batches keep the rest.
const fetchShare = 4

// minFetchBytes is the least a fetch asks for.
const minFetchBytes = 64 << 10

func newFetchSizer(budget int64, maxBytes, maxPart int32) *fetchSizer {
	f := &fetchSizer{maxBytes: maxBytes, maxPart: maxPart, want: budget / fetchShare, ratio: 1}
	f.curBytes, f.curPart = f.sizes()
	return f
}

// sizes are the fetch limits for the current ratio, under f.mu (or before
// the client exists).
func (f *fetchSizer) sizes() (maxBytes, maxPart int32) {
	b := int32(min(float64(f.maxBytes), max(float64(f.want)/f.ratio, minFetchBytes)))
	return b, min(f.maxPart, b)
}

// OnFetchBatchRead implements kgo.HookFetchBatchRead.
func (f *fetchSizer) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	if m.CompressedBytes <= 0 || m.UncompressedBytes <= 0 {
		return
	}
	r := max(float64(m.UncompressedBytes)/float64(m.CompressedBytes), 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	// A better compressing batch counts at once, a worse one slowly: the
	// limit errs on the side of memory.
	if r > f.ratio {
		f.ratio = r
	} else {
		f.ratio = 0.9*f.ratio + 0.1*r
	}
	b, p := f.sizes()
	if cl := f.cl.Load(); cl != nil && (b != f.curBytes || p != f.curPart) && (int64(b) < int64(f.curBytes)*9/10 || int64(b) > int64(f.curBytes)*11/10 || p != f.curPart) {
		f.curBytes, f.curPart = b, p
		cl.UpdateFetchMaxBytes(b, p)
	}
}
