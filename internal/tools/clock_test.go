package tools

import (
	"context"
	"testing"
	"time"

	"atrium/internal/testkit"
)

// The rules of clock.go with short durations. Lower bounds only (a loaded machine can
// make anything late, never early); "held" waits are bounded below by the hold itself.
func TestCallClock(t *testing.T) {
	const timeout, maxRun = 100 * time.Millisecond, 400 * time.Millisecond
	start := func() (context.Context, chan time.Time, time.Time) {
		fired := make(chan time.Time, 1)
		t0 := time.Now() // before the clock starts: taken after, a preemption made 100 ms look like 97.6
		c := newClock(timeout, maxRun, func() { fired <- time.Now() })
		t.Cleanup(c.stop)
		return context.WithValue(context.Background(), clockKey{}, c), fired, t0
	}
	wait := func(fired chan time.Time) time.Time {
		t.Helper()
		select {
		case at := <-fired:
			return at
		case <-time.After(10 * time.Second):
			t.Fatal("the clock never fired")
		}
		return time.Time{}
	}

	t.Run("no sign of life: the timeout", func(t *testing.T) {
		_, fired, t0 := start()
		if d := wait(fired).Sub(t0); d < timeout {
			t.Fatalf("fired after %s", d)
		}
	})
	t.Run("progress restarts it, up to the longest run", func(t *testing.T) {
		ctx, fired, t0 := start()
		var last time.Time
		testkit.Eventually(t, 10*time.Second, "the clock to fire despite progress", func() bool {
			select {
			case at := <-fired:
				last = at
				return true
			default:
				KeepAlive(ctx)
				return false
			}
		})
		if d := last.Sub(t0); d < maxRun {
			t.Fatalf("fired after %s while progress kept coming; the longest run is %s", d, maxRun)
		}
	})
	t.Run("held while a person answers, then a full timeout", func(t *testing.T) {
		ctx, fired, _ := start()
		release := Hold(ctx)
		time.Sleep(2 * maxRun) // the hold itself is what is measured: nothing may fire in it
		select {
		case <-fired:
			t.Fatal("the clock fired while a person was answering")
		default:
		}
		if KeepAlive(ctx) {
			t.Error("KeepAlive restarted a held clock")
		}
		released := time.Now()
		release()
		release() // a second release is a no-op
		if d := wait(fired).Sub(released); d < timeout {
			t.Fatalf("fired %s after the answer; a full timeout is %s", d, timeout)
		}
	})
	t.Run("outside a call", func(t *testing.T) {
		if KeepAlive(context.Background()) {
			t.Error("KeepAlive outside a call")
		}
		Hold(context.Background())()
	})
}
