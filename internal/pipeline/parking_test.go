package pipeline

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReleasePagesAreBoundedByRowsAndBytes(t *testing.T) {
	t.Parallel()
	refs := func(sizes ...int64) []parkedRef {
		out := make([]parkedRef, len(sizes))
		for i, s := range sizes {
			out[i] = parkedRef{key: "k", size: s}
		}
		return out
	}
	tests := []struct {
		name  string
		order []parkedRef
		want  int
	}{
		{"one small", refs(10), 1},
		{"rows bound", refs(1, 1, 1, 1, 1), 3},
		{"bytes bound", refs(40, 40, 40), 2},
		{"exactly the bytes", refs(50, 50, 1), 2},
		{"one larger than a page still goes alone", refs(500, 1), 1},
		{"a large one after small ones waits for the next page", refs(10, 500), 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, pageLen(tc.order, 3, 100))
		})
	}
}
