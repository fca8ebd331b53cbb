package service

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestAnswerTimeout(t *testing.T) {
	for _, c := range []struct {
		set  time.Duration
		st   string
		want time.Duration
		err  string
	}{
		{0, "60s", 75 * time.Second, ""},
		{0, "60000", 75 * time.Second, ""},
		{0, "1min", 75 * time.Second, ""},
		{0, "2.5s", 17500 * time.Millisecond, ""},
		{0, "0", time.Hour, ""},
		{10 * time.Second, "8s", 10 * time.Second, ""},
		{10 * time.Second, "", 10 * time.Second, ""},
		{8 * time.Second, "8s", 0, "must exceed the session's statement_timeout (8s)"},
		{0, "+5s", 20 * time.Second, ""},
		{0, "1e3", 16 * time.Second, ""},
		{0, "0x10", 15016 * time.Millisecond, ""},
		{0, "0.5", time.Hour, ""},   // rounds to 0 ms: no statement timeout
		{0, "400us", time.Hour, ""}, // likewise
		{0, "1.6", 15002 * time.Millisecond, ""},
		{0, "5 min", 5*time.Minute + 15*time.Second, ""},
		{0, "300000d", 0, "out of PostgreSQL's range"},
		{0, "-5s", 0, "out of PostgreSQL's range"},
		{0, "soon", 0, "statement_timeout \"soon\""},
		{0, "5 fortnights", 0, "want a number"},
	} {
		got, err := answerTimeout(c.set, c.st)
		if c.err != "" {
			require.ErrorContains(t, err, c.err, "%v %q", c.set, c.st)
			continue
		}
		require.NoError(t, err, "%v %q", c.set, c.st)
		require.Equal(t, c.want, got, "%v %q", c.set, c.st)
	}
}
