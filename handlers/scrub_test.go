package handlers

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// A batch whose string and byte arguments reach scrubAbove gets a last
// statement as wide as its widest, every argument nil; a smaller one gets
// none.
func TestQueueScrub(t *testing.T) {
	big := make([]byte, scrubAbove/2)
	small := &pgx.Batch{}
	small.Queue("SELECT $1::text, $2::jsonb[]", "x", [][]byte{big})
	small.Queue("SELECT $1::text", strings.Repeat("y", 100))
	queueScrub(small)
	require.Len(t, small.QueuedQueries, 2, "no scrub below scrubAbove")

	b := &pgx.Batch{}
	b.Queue("SELECT $1::text[], $2::jsonb[], $3::int8[]", []string{"a", string(big)}, [][]byte{big}, []int64{1})
	b.Queue("SELECT $1::text", "z")
	b.Queue("SELECT $1, $2, $3, $4", []any{big[:10], "s", nil}, nil, "t", int64(1))
	queueScrub(b)
	require.Len(t, b.QueuedQueries, 4)
	scrub := b.QueuedQueries[3]
	require.Equal(t, "SELECT cardinality(ARRAY[$1::bool, $2::bool, $3::bool, $4::bool])", scrub.SQL)
	require.Equal(t, []any{nil, nil, nil, nil}, scrub.Arguments)

	require.Equal(t, 3+len(big)+10+1, argBytes([]any{"abc", big, []any{big[:10], []string{"d"}}, int64(7)}))
}
