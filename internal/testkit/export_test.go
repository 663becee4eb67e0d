package testkit

var Leaked = leaked

var WriteSkipSummary = writeSkipSummary

// ResetSkips forgets the skips counted so far (the summary test runs more than once
// with -count).
func ResetSkips() {
	skipped.Lock()
	skipped.n, skipped.reasons = nil, nil
	skipped.Unlock()
}
