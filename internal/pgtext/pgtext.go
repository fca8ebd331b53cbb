// Package pgtext makes text from outside — an error message, a producer's
// field, an operator's form — storable in a PostgreSQL text column.
// PostgreSQL refuses a text value that is not UTF-8 or that holds a NUL
// (SQLSTATE 22021), and an insert that fails on one loses its whole row: a
// dead letter, an operator's action.
package pgtext

import (
	"strings"
	"unicode/utf8"
)

// Clean returns s as valid UTF-8 without NUL: each run of invalid bytes
// becomes U+FFFD, a NUL the two characters \0.
func Clean(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", `\0`)
}

// Truncate cuts s to at most n bytes on a rune boundary, so that valid
// UTF-8 stays valid, and marks a cut with "…" (three bytes more).
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// Storable is s cleaned ([Clean]), then cut to at most n bytes
// ([Truncate]): always storable, at most n+3 bytes.
func Storable(s string, n int) string { return Truncate(Clean(s), n) }
