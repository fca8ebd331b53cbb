package dedupe

// SetAfterDetach makes every generation drop call f between detaching the
// table and dropping it, until restore is called. Tests that set it must not
// run in parallel with others of this package.
func SetAfterDetach(f func(n int32)) (restore func()) {
	afterDetach = f
	return func() { afterDetach = nil }
}
