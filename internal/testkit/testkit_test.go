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
