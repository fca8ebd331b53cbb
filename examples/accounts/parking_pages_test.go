package accounts_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/deadletter"
	"github.com/effectively-io/effectively/dedupe"
	"github.com/effectively-io/effectively/pipeline"
)

// Many large parked events of one resource are released a page at a time
// (more rows and more bytes than a page holds), in the same transaction as
// the arrival, still in their original order and each with its own
// disposition: one that cannot apply is dead-lettered with its reason, the
// ones after it apply.
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
			cur = "XXQ" // refused by the handler when it finally runs
		} else {
			want = append(want, key(id))
		}
		recs = append(recs, ce(id, "ledger.credited", "a-big", 0, map[string]any{"amount_cents": i + 1, "currency": cur, "memo": memo}))
	}
	res := b.apply(t, 0, recs[:70]...)
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Parked: 70}, res.Counts)
	res = b.apply(t, 0, recs[70:]...)
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Parked: n - 70}, res.Counts)

	res = b.apply(t, 0, acct("o-big", "account.opened", "a-big", 1, "ann"), ledger("after", "ledger.credited", "a-big", 1000, "EUR"))
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 2}, res.Counts)
	// "after" queued behind them, parked and released within the batch.
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: n, dedupe.DeadLettered: 1}, res.Released)
	require.Equal(t, append(want, key("after")), b.ledgerOrder(t, "a-big"))
	require.Equal(t, int64(n), b.count(t, `SELECT count(*) FROM parked_events WHERE state = 'released'`))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM parked_events WHERE state = 'dead_lettered'`))
	// The dead letter keeps a prefix of the stored event and its whole size.
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM dead_letters WHERE reason = 'invalid_currency' AND "offset" = 57
		AND length(value_prefix) = $1 AND value_size > 100000`, deadletter.MaxValueBytes))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM effectively_claims WHERE disposition = 'dead_lettered'`))
	require.Equal(t, int64(n+2), b.count(t, `SELECT next_offset FROM consumer_offsets`))
}
