package consumer

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The fetch sizes follow the records' compression: Kafka's limits count
// compressed bytes, memory holds them decompressed.
func TestFetchSizesFollowCompression(t *testing.T) {
	t.Parallel()
	f := newFetchSizer(64<<20, 50<<20, 1<<20)
	b, p := f.sizes()
	require.Equal(t, int32(16<<20), b, "uncompressed: a quarter of the budget, under fetch_max_bytes")
	require.Equal(t, int32(1<<20), p, "fetch_max_partition_bytes as configured")

	// JSON compressed tenfold: a fetch asks for a tenth.
	f.OnFetchBatchRead(kgo.BrokerMetadata{}, "t", 0, kgo.FetchBatchMetrics{CompressedBytes: 100_000, UncompressedBytes: 1_000_000})
	b, p = f.sizes()
	require.InDelta(t, float64(16<<20)/10, float64(b), 1)
	require.Equal(t, int32(1<<20), p)

	// A bomb: the limit drops to its floor at once, and the partition
	// limit with it.
	f.OnFetchBatchRead(kgo.BrokerMetadata{}, "t", 0, kgo.FetchBatchMetrics{CompressedBytes: 1_000, UncompressedBytes: 100_000_000})
	b, p = f.sizes()
	require.Equal(t, int32(minFetchBytes), b)
	require.Equal(t, int32(minFetchBytes), p)

	// Incompressible batches bring it back, slowly.
	for range 200 {
		f.OnFetchBatchRead(kgo.BrokerMetadata{}, "t", 0, kgo.FetchBatchMetrics{CompressedBytes: 1_000, UncompressedBytes: 1_000})
	}
	b, _ = f.sizes()
	require.InEpsilon(t, float64(16<<20), float64(b), 0.01)

	// Never above what is configured.
	small := newFetchSizer(1<<30, 8<<20, 512<<10)
	b, p = small.sizes()
	require.Equal(t, int32(8<<20), b)
	require.Equal(t, int32(512<<10), p)
}
