package pgtext

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestCleanAndTruncate(t *testing.T) {
	t.Parallel()
	require.Equal(t, "plain", Clean("plain"))
	require.Equal(t, `a\0b`, Clean("a\x00b"))
	require.Equal(t, "a\uFFFDb", Clean("a\xffb"))
	require.Equal(t, "ab", Truncate("ab", 2))
	// "é" is two bytes: a cut at 2 falls inside it and moves back.
	got := Truncate("aé"+strings.Repeat("x", 10), 2)
	require.Equal(t, "a…", got)
	require.True(t, utf8.ValidString(got))
	for n := 0; n < 20; n++ {
		require.True(t, utf8.ValidString(Truncate(Clean("€\x00é\xff"+strings.Repeat("😀", 3)), n)), "cut at %d", n)
	}
}

func FuzzClean(f *testing.F) {
	f.Add("a\x00\xffé", 3)
	f.Fuzz(func(t *testing.T, s string, n int) {
		c := Truncate(Clean(s), max(n%64, 0))
		if !utf8.ValidString(c) || strings.IndexByte(c, 0) >= 0 {
			t.Fatalf("%q → %q", s, c)
		}
	})
}
