package audit

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Records nothing explained are pruned when at or below their partition's
// watermark, or when another record of their event key is (a duplicate
// processed before its claim expired); unaccounted otherwise, listed in
// partition and offset order up to MaxListed.
func TestSettlePending(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		pending         []Record
		pruned          map[int32]int64
		maxListed       int
		wantPruned      int64
		wantUnaccounted []int64 // offsets listed
		wantCount       int64
	}{
		{
			name:            "nothing pruned: all unaccounted",
			pending:         []Record{{Partition: 0, Offset: 5, EventKey: "a"}, {Partition: 0, Offset: 2}},
			maxListed:       10,
			wantUnaccounted: []int64{2, 5},
			wantCount:       2,
		},
		{
			name:            "at or below the watermark of its own partition",
			pending:         []Record{{Partition: 0, Offset: 5, EventKey: "a"}, {Partition: 0, Offset: 6, EventKey: "b"}, {Partition: 1, Offset: 3}},
			pruned:          map[int32]int64{0: 5},
			maxListed:       10,
			wantPruned:      1,
			wantUnaccounted: []int64{6, 3},
			wantCount:       2,
		},
		{
			name:       "a duplicate above the watermark of a key pruned below it",
			pending:    []Record{{Partition: 2, Offset: 1, EventKey: "k"}, {Partition: 2, Offset: 900, EventKey: "k"}},
			pruned:     map[int32]int64{2: 10},
			maxListed:  10,
			wantPruned: 2,
		},
		{
			name:            "undecodable records have no key to share",
			pending:         []Record{{Partition: 2, Offset: 1}, {Partition: 2, Offset: 900}},
			pruned:          map[int32]int64{2: 10},
			maxListed:       10,
			wantPruned:      1,
			wantUnaccounted: []int64{900},
			wantCount:       1,
		},
		{
			name:            "the list is bounded, the count is not",
			pending:         []Record{{Offset: 3}, {Offset: 1}, {Offset: 2}},
			maxListed:       2,
			wantUnaccounted: []int64{1, 2},
			wantCount:       3,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rep := &Report{Counts: map[string]int64{}}
			a := &auditor{rep: rep, opts: Options{MaxListed: tc.maxListed}, pending: tc.pending}
			a.settlePending(tc.pruned)
			require.Equal(t, tc.wantPruned, rep.Counts[Pruned])
			require.Equal(t, tc.wantCount, rep.Counts[Unaccounted])
			var got []int64
			for _, r := range rep.Unaccounted {
				got = append(got, r.Offset)
			}
			require.Equal(t, tc.wantUnaccounted, got)
		})
	}
}

func TestPrintable(t *testing.T) {
	t.Parallel()
	require.Equal(t, "acct-1", printable([]byte("acct-1")))
	require.Equal(t, "0xff00", printable([]byte{0xff, 0x00}))
	require.Equal(t, "", printable(nil))
}
