package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The memory run's records are about the size asked for, valid JSON, on
// every partition; the handlers' come in pairs on one account's key, the
// account opened first.
func TestLargeRecords(t *testing.T) {
	murmur2 := kgo.StickyKeyPartitioner(nil).ForTopic("")
	for _, kind := range []string{"sink", "handlers"} {
		recs := largeRecords(kind, 32, 16, 200_000)
		require.Len(t, recs, 32, kind)
		per := map[int]int{}
		for i, r := range recs {
			require.InDelta(t, 200_000, len(r.value), 1000, "%s record %d", kind, i)
			require.True(t, json.Valid(r.value), "%s record %d", kind, i)
			require.True(t, json.Valid(r.items))
			per[murmur2.Partition(&kgo.Record{Key: []byte(r.key)}, 16)]++
		}
		require.Len(t, per, 16, "%s: every partition", kind)
		for p, n := range per {
			require.Equal(t, 2, n, "%s: partition %d", kind, p)
		}
	}
	h := largeRecords("handlers", 4, 2, 10_000)
	require.Equal(t, h[0].key, h[1].key)
	require.Contains(t, string(h[0].value), `"type":"account.opened"`)
	require.Contains(t, string(h[1].value), `"type":"ledger.credited"`)
}
