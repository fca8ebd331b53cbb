package termsafe

import (
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Escape returns s with every character that can act on a terminal escaped:
// C0 controls other than newline and tab (ESC, CR, backspace, BEL, …), DEL,
// C1 controls (U+0080–U+009F, which include the one-byte CSI), Unicode
// format characters that reorder or hide text (bidi overrides and isolates,
// zero-width characters), and bytes that are not UTF-8. Everything else is
// kept as is.
func Escape(s string) string {
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if unsafeRune(r, size) {
			break
		}
		i += size
	}
	if i == len(s) {
		return s // the common case: nothing to escape, no copy
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])>>4, 16))
			b.WriteString(strconv.FormatUint(uint64(s[i])&0xf, 16))
		case unsafeRune(r, size):
			q := strconv.QuoteRuneToASCII(r) // '\x1b', '\r', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// unsafeRune reports whether r (size bytes of input) must be escaped.
func unsafeRune(r rune, size int) bool {
	switch {
	case r == utf8.RuneError && size == 1: // not UTF-8
		return true
	case r == '\n' || r == '\t':
		return false
	case r < 0x20 || r == 0x7f: // C0 controls, DEL
		return true
	case r >= 0x80 && r <= 0x9f: // C1 controls
		return true
	case r >= 0x200b && r <= 0x200f, // zero-width space … right-to-left mark
		r >= 0x202a && r <= 0x202e, // bidi embeddings and overrides
		r >= 0x2066 && r <= 0x2069, // bidi isolates
		r == 0x2028 || r == 0x2029, // line and paragraph separators
		r == 0xfeff:                // zero-width no-break space
		return true
	}
	return false
}

// Writer escapes, with [Escape], everything written through it. Each Write
// is escaped on its own: a multi-byte character split over two writes is
// escaped as bytes (fmt.Fprintf writes its whole output at once, so that
// does not happen to formatted output).
type Writer struct {
	w io.Writer
}

// NewWriter returns a Writer that escapes what it writes to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write escapes p and writes it. It reports len(p) when the escaped text was
// written whole.
func (w *Writer) Write(p []byte) (int, error) {
	if _, err := io.WriteString(w.w, Escape(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
