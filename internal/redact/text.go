package redact

import (
	"bytes"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// urlInText finds URLs in a free text. It stops at white space, quotes,
// angle brackets and backslashes, so a URL quoted by %q (a *url.Error) or
// inside a JSON string ends where its quotes begin.
var urlInText = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.\-]*://[^\s"'<>\\` + "`" + `]+`)

// trailing are characters that end a sentence more often than a URL: "GET
// https://host/x?token=t: connection refused".
const trailing = ".,;:!?)]}"

// Text hides the credentials of every URL in s by p (see [Policy.URL]), and
// password= / sslpassword= of a keyword/value DSN outside them.
func (p *Policy) Text(s string) string {
	if !mayHide(s) {
		return s // the common case: nothing to look at
	}
	var b strings.Builder
	last := 0
	for _, m := range urlInText.FindAllStringIndex(s, -1) {
		b.WriteString(dsnPassword.ReplaceAllString(s[last:m[0]], "${1}"+Mask))
		u := s[m[0]:m[1]]
		end := strings.TrimRight(u, trailing)
		b.WriteString(p.URL(end))
		b.WriteString(u[len(end):])
		last = m[1]
	}
	if last == 0 {
		return dsnPassword.ReplaceAllString(s, "${1}"+Mask)
	}
	b.WriteString(dsnPassword.ReplaceAllString(s[last:], "${1}"+Mask))
	return b.String()
}

// Error returns err with the credentials in its text hidden by p, for an
// error that may hold a URL (an HTTP client's) on its way to a log, a row
// or a page. A *url.Error comes back as a *url.Error with its URL redacted
// (Timeout and errors.As keep working); any other error whose text
// changes is wrapped: its Error is the redacted text, and errors.Is and
// errors.As still see err. nil stays nil; an error with nothing to hide is
// returned as it is.
func (p *Policy) Error(err error) error {
	if err == nil {
		return nil
	}
	if ue, ok := err.(*url.Error); ok {
		return &url.Error{Op: ue.Op, URL: p.URL(ue.URL), Err: p.Error(ue.Err)}
	}
	msg := err.Error()
	red := p.Text(msg)
	if red == msg {
		return err
	}
	return &redactedError{msg: red, err: err}
}

// redactedError is an error whose text has been redacted; it unwraps to the
// original, so its classification (permanent, timeout) is kept.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// minValue is the shortest value Values hides: a shorter one would mask
// words of the text that merely contain it.
const minValue = 4

// Values replaces every occurrence in s of each of values (credentials a
// caller knows it sent: a bearer token, an API key) by [Mask]: for the
// text of an answer that may echo its request. Values shorter than four
// bytes are left alone.
func Values(s string, values ...string) string {
	vs := slices.DeleteFunc(slices.Clone(values), func(v string) bool { return len(v) < minValue })
	// Longest first: a token that contains another is hidden whole.
	slices.SortFunc(vs, func(a, b string) int { return len(b) - len(a) })
	for _, v := range vs {
		s = strings.ReplaceAll(s, v, Mask)
	}
	return s
}

// mayHide reports whether s may hold something Text hides: a URL, or a
// DSN's password (libpq's keywords are lower case; PASSWORD for shouting).
func mayHide(s string) bool {
	return strings.Contains(s, "://") || strings.Contains(s, "assword") || strings.Contains(s, "ASSWORD")
}

// Writer returns a writer that redacts, by the process's policy at the
// time of each write, every write to w on its own (see [Text]). Each write
// must be whole lines, as a logger's are: a URL split across two writes is
// not recognised.
func Writer(w io.Writer) io.Writer { return writer{w} }

type writer struct{ w io.Writer }

func (w writer) Write(b []byte) (int, error) {
	if !bytes.Contains(b, []byte("://")) && !bytes.Contains(b, []byte("assword")) && !bytes.Contains(b, []byte("ASSWORD")) {
		return w.w.Write(b) // as mayHide, without copying b
	}
	s := string(b)
	red := Text(s)
	if red == s {
		return w.w.Write(b)
	}
	if _, err := io.WriteString(w.w, red); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Sync flushes w when it can (a file; zap syncs its sink).
func (w writer) Sync() error {
	if s, ok := w.w.(interface{ Sync() error }); ok {
		return s.Sync()
	}
	return nil
}
