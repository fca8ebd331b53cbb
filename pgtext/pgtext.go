// Package pgtext makes untrusted text storable in a PostgreSQL text column.
// PostgreSQL refuses a NUL character and bytes that are not UTF-8 in text
// (SQLSTATE 22021, 22P05); a statement that writes an error message, a
// remote answer or an operator's note must not fail because of what that
// text holds, or the row it records (a dead letter, an outbox outcome, an
// operator action) could never be written and the work behind it would be
// retried for ever.
package pgtext

import (
	"strings"
	"unicode/utf8"
)

// Clean returns s as valid UTF-8 (invalid bytes become U+FFFD) with every
// NUL written as the two characters \0.
func Clean(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", `\0`)
}

// Truncate returns s cut to at most n bytes at a character boundary, with
// "…" appended when it was cut (so the result can be n+3 bytes long). s
// should be Clean already: a cut never splits a character, and never makes
// invalid UTF-8 out of valid.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
