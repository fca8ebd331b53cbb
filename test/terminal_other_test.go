//go:build !linux

package test

import "testing"

// runOnTerminal needs a pseudo-terminal, which the helper opens on Linux
// only (where the stack and CI run).
func runOnTerminal(t *testing.T, _ []string, _ string, _ ...string) (code int, stdout, stderr string) {
	t.Skip("the pseudo-terminal helper is Linux-only")
	return 0, "", ""
}
