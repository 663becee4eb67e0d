package llm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"
)

// watchdog bounds the waits of one streamed call. Before each blocking read the
// caller arms it (StartTimeout until the first chunk, IdleTimeout after); when a
// timer fires it records that and cancels the call's derived context, so the
// failure can be reported as KindTimeout rather than context.Canceled. The time
// the caller spends in onEvent is not counted.
type watchdog struct {
	cancel      context.CancelFunc
	start, idle time.Duration

	mu      sync.Mutex
	timer   *time.Timer
	gen     int  // bumps on every arm/disarm so a stale timer does nothing
	started bool // a first chunk has arrived
	fired   *Error
}

func newWatchdog(parent context.Context, start, idle time.Duration) (context.Context, *watchdog) {
	ctx, cancel := context.WithCancel(parent)
	return ctx, &watchdog{cancel: cancel, start: start, idle: idle}
}

// arm starts the timer for the next wait.
func (w *watchdog) arm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fired != nil {
		return
	}
	w.gen++
	gen, started, d := w.gen, w.started, w.start
	if started {
		d = w.idle
	}
	if w.timer != nil {
		w.timer.Stop()
	}
	w.timer = time.AfterFunc(d, func() {
		w.mu.Lock()
		if w.gen != gen || w.fired != nil {
			w.mu.Unlock()
			return
		}
		w.fired = timeoutError(d, started)
		w.mu.Unlock()
		w.cancel()
	})
}

// chunk stops the timer after a read returned a chunk.
func (w *watchdog) chunk() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gen++
	w.started = true
	if w.timer != nil {
		w.timer.Stop()
	}
}

// stop releases the timer and the derived context.
func (w *watchdog) stop() {
	w.mu.Lock()
	w.gen++
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
	w.cancel()
}

// timeout returns the timeout error if a timer fired.
func (w *watchdog) timeout() *Error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fired
}

// tap is an SDK middleware that records what the HTTP exchange looked like, so
// errors are classified from the status and body the provider really sent and
// not from SDK-specific error types.
type tap struct {
	mu      sync.Mutex
	status  int // 0: no response headers
	errBody []byte
}

const maxErrBody = 64 << 10

func (t *tap) middleware(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	res, err := next(req)
	if err != nil || res == nil {
		return res, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.status = res.StatusCode
	if res.StatusCode >= 400 && res.Body != nil {
		body, _ := io.ReadAll(io.LimitReader(res.Body, maxErrBody))
		_ = res.Body.Close()
		t.errBody = body
		res.Body = io.NopCloser(bytes.NewReader(body))
	}
	return res, err
}

func (t *tap) result() (int, []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.status, t.errBody
}

// call holds what every provider call needs to classify its failure.
type call struct {
	parent context.Context
	dog    *watchdog
	tap    *tap
	base   string
	key    string
}

// fail turns err (from the SDK, after the stream or request ended) into what
// Stream or Models returns: a timeout, the caller's ctx.Err(), or an *Error.
// streamErr converts provider-specific error events (may be nil).
func (c *call) fail(err error, streamErr func(error) *Error) error {
	if c.dog != nil {
		if te := c.dog.timeout(); te != nil {
			return te
		}
	}
	if cerr := c.parent.Err(); cerr != nil {
		return cerr
	}
	status, body := c.tap.result()
	if status >= 400 {
		return statusError(status, providerDetail(body, c.key))
	}
	if e, ok := AsError(err); ok {
		return e
	}
	if streamErr != nil {
		if e := streamErr(err); e != nil {
			return e
		}
	}
	if status != 0 {
		return brokenError(err) // headers arrived, then the body failed
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// Not our timer and not the caller's context: the HTTP client's own timeout.
		return &Error{Kind: KindTimeout, Message: "The provider did not answer in time.", cause: err}
	}
	return networkError(c.base, err)
}
