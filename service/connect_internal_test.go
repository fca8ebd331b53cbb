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
		{0, "soon", 0, "statement_timeout \"soon\""},
		{0, "5 fortnights", 0, "unknown unit"},
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
