// Package testkit holds the few helpers that tests of several packages share:
// waiting for a condition instead of sleeping, and a goroutine-leak check in the
// manner of net/http's afterTest.
package testkit

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"
)

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
// waits up to 5 s for every goroutine running this module's code to end, and fails
// the package with their stacks if some do not. A goroutine left behind by a test is
// a run, a connection or a supervisor loop that nobody stops: in the program it
// would pile up.
//
//	func TestMain(m *testing.M) { os.Exit(testkit.CheckLeaks(m.Run())) }
func CheckLeaks(code int) int {
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
