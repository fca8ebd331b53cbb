package service

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"
)

// confirm asks the operator on the terminal before a step that deletes data
// or changes many rows at once; what says what the step would do, with n,
// the count of what it touches ("dead-letter 3 parked events of resource
// acct-1"; n is 1 for one thing, a topic). yes (the command's --yes) skips
// the question, and so does n = 0 on a terminal: there is nothing to
// confirm. Without a terminal on stdin there is nobody to ask: the step is
// refused with an error that names --yes, whatever n, so a script never
// acts on rows nobody was shown and fails the same way on a quiet day as
// on a busy one.
//
// SIGINT or SIGTERM at the prompt (ctx done) is a no: the signal handler
// keeps the process alive, so the read cannot be what ends it.
func confirm(ctx context.Context, c *CLI, yes bool, n int64, what string) error {
	return ask(ctx, c.stdin, isTerminal(c.stdin), c.stderr, yes, n, what)
}

// ask is confirm's logic on any reader: y or yes (any case) go on,
// anything else (n, an empty line, end of input, ctx done) does not.
func ask(ctx context.Context, in io.Reader, terminal bool, out io.Writer, yes bool, n int64, what string) error {
	switch {
	case yes:
		return nil
	case !terminal:
		return usageError{fmt.Errorf("this would %s; confirm with --yes (stdin is not a terminal, so nobody can be asked)", what)}
	case n == 0:
		return nil
	}
	fmt.Fprintf(out, "This will %s.\nContinue? [y/N] ", what)
	// A read from a terminal cannot be cancelled; on ctx done it is left
	// blocked, and the command, which returns, ends the process with it.
	line := make(chan string, 1)
	go func() {
		answer, _ := bufio.NewReader(in).ReadString('\n')
		line <- answer
	}()
	var answer string
	select {
	case answer = <-line:
	case <-ctx.Done():
		fmt.Fprintln(out)
		return usageError{errors.New("not confirmed (interrupted): nothing was changed")}
	}
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return nil
	}
	return usageError{errors.New("not confirmed: nothing was changed")}
}

// isTerminal reports whether r is a terminal (an *os.File on a tty).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
