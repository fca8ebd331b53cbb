package pgtext

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// A character straddling the limit is left out whole, whatever its width;
// NUL and invalid bytes are replaced; the result is valid UTF-8 within n+3
// bytes.
func TestStorable(t *testing.T) {
	t.Parallel()
	for _, ch := range []string{"é", "€", "𝄞"} { // 2, 3 and 4 bytes
		for shift := range len(ch) {
			n := 10
			s := strings.Repeat("a", n-shift) + ch + "tail"
			got := Storable(s, n)
			require.True(t, utf8.ValidString(got), "%q", got)
			if shift == 0 {
				require.Equal(t, strings.Repeat("a", n)+"…", got, "the character starts at n: cut before it")
			} else {
				require.Equal(t, strings.Repeat("a", n-shift)+"…", got, "%q cut %d bytes in: left out whole", ch, shift)
			}
		}
	}
	require.Equal(t, "é", Storable("é", 2), "fits: untouched")
	require.Equal(t, `a\0b`, Storable("a\x00b", 10))
	require.Equal(t, "a\uFFFDb", Storable("a\xff\xfeb", 10))
	require.Equal(t, "\uFFFD", Storable("\xc3", 10), "half a character")
	require.Equal(t, "…", Storable("€", 1))
	got := Storable(strings.Repeat("\x00\xff€", 1000), 100)
	require.True(t, utf8.ValidString(got))
	require.NotContains(t, got, "\x00")
	require.LessOrEqual(t, len(got), 103)
}
