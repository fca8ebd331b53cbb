package termsafe

import (
	"bytes"
	"fmt"
	"testing"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestEscape(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"plain", `{"id":"e-1","note":"héllo wörld ✓"}`, `{"id":"e-1","note":"héllo wörld ✓"}`},
		{"newline and tab kept", "line 1\n\tline 2\n", "line 1\n\tline 2\n"},
		{"clear screen", "before\x1b[2Jafter", `before\x1b[2Jafter`},
		{"OSC 52 clipboard", "\x1b]52;c;ZXZpbA==\a", `\x1b]52;c;ZXZpbA==\a`},
		{"carriage return overwrite", "ok\rFAKE", `ok\rFAKE`},
		{"backspace and bell", "a\bb\x07", `a\bb\a`},
		{"NUL and DEL", "\x00\x7f", `\x00\x7f`},
		{"C1 CSI", "x\u009b2Jy", `x\u009b2Jy`},
		{"bidi override", "user\u202etxt.exe", `user\u202etxt.exe`},
		{"zero width", "a\u200bb\ufeff", `a\u200bb\ufeff`},
		{"not UTF-8", "ok\xff\xfe", `ok\xff\xfe`},
		{"truncated rune", "\xe2\x9c", `\xe2\x9c`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Escape(tc.in)
			require.Equal(t, tc.want, got)
			require.NotContains(t, got, "\x1b")
			require.True(t, utf8.ValidString(got))
			require.Equal(t, got, Escape(got), "escaping is stable")
		})
	}
}

// What dlq show and outbox show print: a payload, a header and an error
// carrying ESC[2J come out escaped, through a plain writer and through the
// list commands' tabwriter.
func TestWriter(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	w := NewWriter(&buf)
	fmt.Fprintf(w, "error        %s\n", "bad \x1b[2J error")
	fmt.Fprintf(w, "header       %s\n", "x-evil=\x1b[2J")
	fmt.Fprintf(w, "value (%d bytes)\n%s\n", 12, `{"a":"`+"\x1b[2J"+`"}`)
	require.Equal(t, "error        bad \\x1b[2J error\nheader       x-evil=\\x1b[2J\nvalue (12 bytes)\n{\"a\":\"\\x1b[2J\"}\n", buf.String())

	buf.Reset()
	tw := tabwriter.NewWriter(NewWriter(&buf), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tERROR")
	fmt.Fprintf(tw, "%d\t%s\n", 7, "\x1b[2Jgone")
	require.NoError(t, tw.Flush())
	require.NotContains(t, buf.String(), "\x1b")
	require.Contains(t, buf.String(), `7   \x1b[2Jgone`)
}

func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "plain", "\x1b[2J", "\u009b", "\u202e", "\xff", "a\nb\tc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Escape(s)
		if !utf8.ValidString(got) {
			t.Fatalf("Escape(%q) = %q is not UTF-8", s, got)
		}
		for _, r := range got {
			if unsafeRune(r, utf8.RuneLen(r)) {
				t.Fatalf("Escape(%q) = %q keeps %U", s, got, r)
			}
		}
	})
}
