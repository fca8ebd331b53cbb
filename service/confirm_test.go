package service

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A step that deletes or changes many rows asks first on a terminal, goes
// on only on y or yes, and without a terminal needs --yes, whatever the
// count.
func TestAsk(t *testing.T) {
	t.Parallel()
	const what = "dead-letter 3 parked events of resource acct-1"
	tests := []struct {
		name     string
		input    string
		terminal bool
		yes      bool
		n        int64
		ok       bool
		asked    bool
		err      string
	}{
		{"--yes", "", false, true, 3, true, false, ""},
		{"--yes on a terminal", "n\n", true, true, 3, true, false, ""},
		{"y", "y\n", true, false, 3, true, true, ""},
		{"yes, any case and space", "  YES \n", true, false, 3, true, true, ""},
		{"n", "n\n", true, false, 3, false, true, "not confirmed: nothing was changed"},
		{"empty line is no", "\n", true, false, 3, false, true, "not confirmed"},
		{"end of input is no", "", true, false, 3, false, true, "not confirmed"},
		{"anything else is no", "sure\n", true, false, 3, false, true, "not confirmed"},
		{"y without a newline", "y", true, false, 3, true, true, ""},
		{"nothing to confirm on a terminal", "", true, false, 0, true, false, ""},
		{"no terminal", "y\n", false, false, 3, false, false, "this would " + what + "; confirm with --yes"},
		{"no terminal, nothing to change: still --yes", "", false, false, 0, false, false, "confirm with --yes"},
	}
	for _, tt := range tests {
		var out bytes.Buffer
		err := ask(context.Background(), strings.NewReader(tt.input), tt.terminal, &out, tt.yes, tt.n, what)
		if tt.ok {
			require.NoError(t, err, tt.name)
		} else {
			require.ErrorContains(t, err, tt.err, tt.name)
			require.Equal(t, ExitUsage, ExitCode(err), tt.name)
		}
		if tt.asked {
			require.Equal(t, "This will "+what+".\nContinue? [y/N] ", out.String(), tt.name)
		} else {
			require.Empty(t, out.String(), tt.name)
		}
	}
	require.False(t, isTerminal(strings.NewReader("")), "only a tty is a terminal")

	// Ctrl-C at the prompt: the signal cancels the command's context (the
	// handler keeps the process alive), and the answer is no, at once,
	// though nothing was typed.
	ctx, cancel := context.WithCancel(context.Background())
	typed, _ := io.Pipe() // a terminal nobody types into
	errc := make(chan error, 1)
	go func() { errc <- ask(ctx, typed, true, io.Discard, false, 3, what) }()
	cancel()
	select {
	case err := <-errc:
		require.ErrorContains(t, err, "not confirmed (interrupted): nothing was changed")
	case <-time.After(time.Minute): // a hang guard
		t.Fatal("the prompt ignored the interrupt")
	}
}
