package accounts_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/internal/deadletter"
	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/pipeline"
)

// Many large parked events of one resource are released a page at a time
// (more rows and more bytes than a page holds), in the same transaction as
// the arrival, still in their original order and each with its own
// disposition. One that can never apply (a malformed currency) is
// dead-lettered before the gate, with its reason, and never parked; the
// ones after it park and apply.
func TestLargeParkedEventsAreReleasedInPagesInOrder(t *testing.T) {
	t.Parallel()
	b := setupWith(t, pipeline.Options{MaxParkedPerResource: 1000})
	const n = 130
	memo := strings.Repeat("m", 100_000) // 130 × 100 kB: more than one page by rows and by bytes
	var recs []*kgo.Record
	var want []string
	for i := range n {
		id := fmt.Sprintf("big-%03d", i)
		cur := "EUR"
		if i == 57 {
			cur = "XXQ" // refused before the gate: dead-lettered at once, never parked
		} else {
			want = append(want, key(id))
		}
		recs = append(recs, ce(id, "ledger.credited", "a-big", 0, map[string]any{"amount_cents": i + 1, "currency": cur, "memo": memo}))
	}
	res := b.apply(t, 0, recs[:70]...)
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Parked: 69, dedupe.DeadLettered: 1}, res.Counts)
	res = b.apply(t, 0, recs[70:]...)
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Parked: n - 70}, res.Counts)

	res = b.apply(t, 0, acct("o-big", "account.opened", "a-big", 1, "ann"), ledger("after", "ledger.credited", "a-big", 1000, "EUR"))
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 2}, res.Counts)
	// "after" queued behind them, parked and released within the batch.
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: n}, res.Released)
	require.Equal(t, append(want, key("after")), b.ledgerOrder(t, "a-big"))
	require.Equal(t, int64(n), b.count(t, `SELECT count(*) FROM parked_events WHERE state = 'released'`))
	require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM parked_events WHERE state <> 'released'`))
	// The dead letter keeps a prefix of the record and its whole size.
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM dead_letters WHERE reason = 'invalid_currency' AND "offset" = 57
		AND length(value_prefix) = $1 AND value_size > 100000`, deadletter.MaxValueBytes))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM effectively_claims WHERE disposition = 'dead_lettered'`))
	require.Equal(t, int64(n+2), b.count(t, `SELECT next_offset FROM consumer_offsets`))
}
