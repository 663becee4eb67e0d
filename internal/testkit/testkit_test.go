package testkit_test

import (
	"strings"
	"testing"
	"time"

	"atrium/internal/testkit"
)

func blockUntil(ch chan struct{}) { <-ch }

func TestLeakedFindsAGoroutineLeftRunning(t *testing.T) {
	stop := make(chan struct{})
	go blockUntil(stop)
	testkit.Eventually(t, time.Second, "the goroutine to be seen", func() bool {
		for _, g := range testkit.Leaked() {
			if strings.Contains(g, "testkit_test.blockUntil") {
				return true
			}
		}
		return false
	})
	close(stop)
	testkit.Eventually(t, time.Second, "the goroutine to end", func() bool { return len(testkit.Leaked()) == 0 })
}

func TestSkipSummary(t *testing.T) {
	testkit.ResetSkips()
	t.Cleanup(testkit.ResetSkips)
	t.Run("a", func(t *testing.T) { testkit.Skip(t, "chromium not found") })
	t.Run("b", func(t *testing.T) { testkit.Skip(t, "chromium not found") })
	t.Run("c", func(t *testing.T) { testkit.Skip(t, "node missing") })
	var out strings.Builder
	testkit.WriteSkipSummary(&out)
	want := "testkit: skipped 3 test(s) in this package:\n  2 × chromium not found\n  1 × node missing\n"
	if out.String() != want {
		t.Errorf("summary\n%s\nwant\n%s", out.String(), want)
	}
}
