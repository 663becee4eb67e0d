package tools

import (
	"context"
	"sync"
	"time"

	"atrium/internal/llm"
)

// Hooks connect a running call to the chat it runs for. The agent sets them on the
// context it dispatches with (WithHooks); an executor finds them in Call.Hooks. Any
// field may be nil or empty.
type Hooks struct {
	// CallKey names the call's tool card (store.ToolCallKey).
	CallKey string
	// Progress shows a progress report on the call's tool card.
	Progress func(Progress)
	// Sample runs the chat's model for a request made on the call's behalf (an MCP
	// server's sampling request) and records it in the run.
	// server names who asks, for the record.
	Sample func(ctx context.Context, server string, req llm.Request) (llm.Response, error)
}

// Progress is one progress report of a running call. Total is 0 when unknown.
type Progress struct {
	Progress, Total float64
	Message         string
}

type hooksKey struct{}

// WithHooks returns ctx carrying h for the calls dispatched with it.
func WithHooks(ctx context.Context, h Hooks) context.Context {
	return context.WithValue(ctx, hooksKey{}, h)
}

func hooksFrom(ctx context.Context) Hooks {
	h, _ := ctx.Value(hooksKey{}).(Hooks)
	return h
}

// The timeout rules of a call (the README's "Timeouts" under MCP):
//
//   - A call ends with a timeout when it has run for the tool's Timeout without a sign
//     of life.
//   - KeepAlive (an MCP progress notification) restarts that clock, but never past the
//     tool's MaxRun of running time in all.
//   - While a person is answering a question the call asked (Hold … release), neither
//     clock runs: the question has its own limits. On release the call gets its full
//     Timeout again.
//
// The caller's context (Stop, shutdown) ends the call whatever the clock says.

// callClock is the timeout of one running call.
type callClock struct {
	mu       sync.Mutex
	timeout  time.Duration
	maxRun   time.Duration // running time allowed in all, holds excluded
	ran      time.Duration // running time before the current stretch
	started  time.Time     // start of the current running stretch (zero while held)
	holds    int
	timer    *time.Timer
	expire   func()
	finished bool
}

type clockKey struct{}

func newClock(timeout, maxRun time.Duration, expire func()) *callClock {
	if maxRun < timeout {
		maxRun = timeout
	}
	c := &callClock{timeout: timeout, maxRun: maxRun, started: time.Now(), expire: expire}
	c.timer = time.AfterFunc(timeout, c.fire)
	return c
}

func (c *callClock) fire() {
	c.mu.Lock()
	if c.finished || c.holds > 0 {
		c.mu.Unlock()
		return
	}
	c.finished = true
	c.mu.Unlock()
	c.expire()
}

// restartLocked arms the timer for a full Timeout, or what is left of MaxRun.
func (c *callClock) restartLocked() {
	left := c.maxRun - c.ran - time.Since(c.started)
	d := min(c.timeout, left)
	if d <= 0 {
		d = time.Nanosecond
	}
	c.timer.Stop()
	c.timer = time.AfterFunc(d, c.fire)
}

func (c *callClock) stop() {
	c.mu.Lock()
	c.finished = true
	c.timer.Stop()
	c.mu.Unlock()
}

// KeepAlive tells the registry that the call ctx belongs to is still working (e.g. it
// reported progress): its timeout starts again, within the tool's MaxRun. It reports
// whether ctx belongs to a call whose clock is running.
func KeepAlive(ctx context.Context) bool {
	c, _ := ctx.Value(clockKey{}).(*callClock)
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.finished || c.holds > 0 {
		return false
	}
	c.restartLocked()
	return true
}

// Hold suspends the timeout of the call ctx belongs to while a person answers
// something the call asked; release (call it exactly once) starts it again with a full
// Timeout. Outside a call it does nothing.
func Hold(ctx context.Context) (release func()) {
	c, _ := ctx.Value(clockKey{}).(*callClock)
	if c == nil {
		return func() {}
	}
	c.mu.Lock()
	if c.holds == 0 && !c.finished {
		c.timer.Stop()
		c.ran += time.Since(c.started)
		c.started = time.Time{}
	}
	c.holds++
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.holds--
			if c.holds == 0 && !c.finished {
				c.started = time.Now()
				c.ran = min(c.ran, c.maxRun-c.timeout) // a full Timeout after an answer
				c.restartLocked()
			}
		})
	}
}
