package pipeline

// DecodingBudgetFree reports whether the whole decoding budget is free:
// no batch holds any of it.
func DecodingBudgetFree(a *Applier) bool {
	if !a.decoded.TryAcquire(a.opts.MaxDecodedBytes) {
		return false
	}
	a.decoded.Release(a.opts.MaxDecodedBytes)
	return true
}
