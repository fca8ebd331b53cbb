// Package termsafe makes untrusted text safe to print to a terminal. What
// operator commands show — a dead letter's payload, headers and error, an
// outbox intent's request and last error — comes from producers and remote
// services; printed raw, an escape sequence in it (ESC[2J clears the screen,
// OSC 52 writes the clipboard, a bidi override reorders what is read) acts on
// the operator's terminal. termsafe escapes control characters the way Go's
// strconv.Quote does (\x1b, \r, \u009b, \u202e) and keeps newlines, tabs and
// all printable text, so a readable payload stays readable.
package termsafe
