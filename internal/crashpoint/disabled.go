//go:build !crashpoint

package crashpoint

// Enabled reports whether this binary has the crash-point hook.
const Enabled = false

// Check does nothing in a build without the crashpoint tag: the environment
// is not read.
func Check() error { return nil }

// Hit does nothing in a build without the crashpoint tag; the compiler
// inlines it away.
func Hit(string) {}
