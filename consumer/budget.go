package consumer

import "sync"

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
// are still applied, so the bytes held always fall, and a single record
// larger than the limit still passes (alone).
type budget struct {
	limit int64

	mu   sync.Mutex
	used int64
	over bool
}

// take counts n more bytes held. It reports whether the budget just became
// exhausted: then every partition must be told (see Consumer.rebudget).
func (b *budget) take(n int64) (changed bool) {
	if n == 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used += n
	if !b.over && b.used >= b.limit {
		b.over = true
		return true
	}
	return false
}

// give counts n bytes released. It reports whether the budget just left its
// exhausted state (the bytes held fell to half the limit): then every
// partition must be told.
func (b *budget) give(n int64) (changed bool) {
	if n == 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if b.over && b.used <= b.limit/2 {
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

// held is the bytes held now.
func (b *budget) held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
