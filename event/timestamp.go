package event

import (
	"fmt"
	"time"
)

// ParseTime parses a CloudEvents time attribute strictly as RFC 3339
// (section 5.6) and returns it in UTC.
//
// time.Parse with time.RFC3339Nano is not strict enough to be the gate of
// a record: it accepts offsets of +24:00 and +23:60 (which no later
// encoder can print again: encoding/json refuses an hour outside [0,23]
// and so a parked event holding one could not be written), a comma before
// the fraction, and years that leave 0001–9999 once moved to UTC. Each of
// those is refused here, so a time that passes can be printed, stored and
// compared everywhere after the decoder. Lower-case 't' and 'z', which RFC
// 3339 allows, are accepted; a leap second (:60), which Go cannot
// represent, is refused.
func ParseTime(s string) (time.Time, error) {
	// YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)
	const minLen = len("2006-01-02T15:04:05Z")
	if len(s) < minLen {
		return time.Time{}, fmt.Errorf("too short for YYYY-MM-DDTHH:MM:SSZ")
	}
	for i, c := range []byte(s[:19]) {
		switch i {
		case 4, 7:
			if c != '-' {
				return time.Time{}, fmt.Errorf("want '-' at position %d", i+1)
			}
		case 10:
			if c != 'T' && c != 't' {
				return time.Time{}, fmt.Errorf("want 'T' between date and time")
			}
		case 13, 16:
			if c != ':' {
				return time.Time{}, fmt.Errorf("want ':' at position %d", i+1)
			}
		default:
			if c < '0' || c > '9' {
				return time.Time{}, fmt.Errorf("want a digit at position %d", i+1)
			}
		}
	}
	rest := s[19:]
	if rest[0] == '.' {
		n := 1
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		if n == 1 || n > 10 {
			return time.Time{}, fmt.Errorf("a fraction of a second needs 1 to 9 digits")
		}
		rest = rest[n:]
	}
	switch {
	case rest == "Z" || rest == "z":
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':' &&
		isDigits(rest[1:3]) && isDigits(rest[4:6]):
		if h, m := atoi2(rest[1:3]), atoi2(rest[4:6]); h > 23 || m > 59 {
			return time.Time{}, fmt.Errorf("offset %s is outside ±23:59", rest)
		}
	default:
		return time.Time{}, fmt.Errorf("want 'Z' or an offset ±HH:MM at the end")
	}
	// The shape is RFC 3339's; time.Parse checks the ranges of the fields
	// (month 13, February 30, hour 24, second 60).
	norm := s[:10] + "T" + s[11:len(s)-len(rest)]
	if rest == "z" {
		rest = "Z"
	}
	t, err := time.Parse(time.RFC3339Nano, norm+rest)
	if err != nil {
		return time.Time{}, err
	}
	t = t.UTC()
	if y := t.Year(); y < 1 || y > 9999 {
		return time.Time{}, fmt.Errorf("year %d in UTC is outside 0001–9999", y)
	}
	return t, nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func atoi2(s string) int { return int(s[0]-'0')*10 + int(s[1]-'0') }
