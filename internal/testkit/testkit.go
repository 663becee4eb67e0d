// Package testkit holds the few helpers that tests of several packages share:
// waiting for a condition instead of sleeping, a goroutine-leak check in the manner of
// net/http's afterTest, and skips that are summed up once per package.
package testkit

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// skipped counts the tests skipped by Skip, by reason.
var skipped struct {
	sync.Mutex
	n       map[string]int
	reasons []string // in the order first seen
}

// Skip skips tb for reason (say what to install or set) and counts it for the
// package's summary, which CheckLeaks prints once after the tests: a plain
// "go test ./..." shows only "ok" for a package whose tests skipped, so
// "go test -v ./... | grep -A3 '^testkit: skipped'" tells why in one line a package.
func Skip(tb testing.TB, reason string) {
	tb.Helper()
	skipped.Lock()
	if skipped.n == nil {
		skipped.n = map[string]int{}
	}
	if skipped.n[reason] == 0 {
		skipped.reasons = append(skipped.reasons, reason)
	}
	skipped.n[reason]++
	skipped.Unlock()
	tb.Skip(reason)
}

// writeSkipSummary writes one line per skip reason, with how many tests it skipped.
func writeSkipSummary(w io.Writer) {
	skipped.Lock()
	defer skipped.Unlock()
	total := 0
	for _, n := range skipped.n {
		total += n
	}
	if total == 0 {
		return
	}
	fmt.Fprintf(w, "testkit: skipped %d test(s) in this package:\n", total)
	for _, r := range skipped.reasons {
		fmt.Fprintf(w, "  %d × %s\n", skipped.n[r], r)
	}
}

// Eventually polls cond every few milliseconds until it holds, failing tb with what
// it was waiting for when within passes first.
func Eventually(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for wait := time.Millisecond; !cond(); wait = min(2*wait, 20*time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("waited %s for %s", within, what)
		}
		time.Sleep(wait)
	}
}

// CheckLeaks is for TestMain: after the package's tests (code is m.Run's result) it
// prints the summary of Skip's skips, then waits up to 5 s for every goroutine running this module's code to end, and fails
// the package with their stacks if some do not. A goroutine left behind by a test is
// a run, a connection or a supervisor loop that nobody stops: in the program it
// would pile up.
//
//	func TestMain(m *testing.M) { os.Exit(testkit.CheckLeaks(m.Run())) }
func CheckLeaks(code int) int {
	writeSkipSummary(os.Stdout)
	if code != 0 {
		return code
	}
	var left []string
	deadline := time.Now().Add(5 * time.Second)
	for {
		left = leaked()
		if len(left) == 0 {
			return code
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "testkit: %d goroutine(s) still running after the tests:\n\n%s\n", len(left), strings.Join(left, "\n\n"))
	return 1
}

// leaked returns the stacks of goroutines in this module's code, other than the
// caller's own and the test runner's.
func leaked() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "atrium/") || strings.Contains(g, "atrium/internal/testkit.") ||
			strings.Contains(g, "testing.(*M).") || strings.Contains(g, "testing.tRunner") {
			continue
		}
		out = append(out, g)
	}
	sort.Strings(out)
	return out
}

// PeakRSS is this process's peak resident set in bytes (VmHWM in /proc/self/status);
// the test is skipped where there is no /proc.
func PeakRSS(tb testing.TB) int64 {
	tb.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Skip("no /proc/self/status:", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				tb.Fatalf("VmHWM %q: %v", v, err)
			}
			return kb << 10
		}
	}
	tb.Fatal("no VmHWM in /proc/self/status")
	return 0
}
