package auth

import (
	"container/list"
	"sync"
	"time"
)

// MaxLimiterKeys bounds the memory of a Limiter: when a new key would exceed it, the
// key whose last failure is oldest is forgotten.
const MaxLimiterKeys = 10_000

// Limiter counts failed logins per key (a username, an IP address) in a sliding
// window and refuses further attempts once max failures fall within it. It is safe
// for concurrent use and its memory is bounded.
type Limiter struct {
	max    int
	window time.Duration
	now    func() time.Time

	mu    sync.Mutex
	keys  map[string]*list.Element // of *limitEntry
	order *list.List               // least recently failed first
}

type limitEntry struct {
	key   string
	fails []time.Time // the last max failures, oldest first
}

// NewLimiter returns a Limiter allowing fewer than max failures per key within
// window. max below 1 is taken as 1; a nil now means time.Now.
func NewLimiter(max int, window time.Duration, now func() time.Time) *Limiter {
	if max < 1 {
		max = 1
	}
	if now == nil {
		now = time.Now
	}
	return &Limiter{max: max, window: window, now: now, keys: map[string]*list.Element{}, order: list.New()}
}

// Allow reports whether key may try again. When it may not, retryAfter is how long
// until the oldest counted failure leaves the window.
func (l *Limiter) Allow(key string) (ok bool, retryAfter time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.prune(now)
	el, found := l.keys[key]
	if !found {
		return true, 0
	}
	e := el.Value.(*limitEntry)
	e.fails = l.recent(e.fails, now)
	if len(e.fails) < l.max {
		return true, 0
	}
	return false, e.fails[0].Add(l.window).Sub(now)
}

// Fail records a failed attempt for key.
func (l *Limiter) Fail(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.prune(now)
	if el, found := l.keys[key]; found {
		e := el.Value.(*limitEntry)
		e.fails = append(l.recent(e.fails, now), now)
		if len(e.fails) > l.max {
			e.fails = append(e.fails[:0], e.fails[len(e.fails)-l.max:]...)
		}
		l.order.MoveToBack(el)
		return
	}
	if len(l.keys) >= MaxLimiterKeys {
		oldest := l.order.Front()
		l.order.Remove(oldest)
		delete(l.keys, oldest.Value.(*limitEntry).key)
	}
	l.keys[key] = l.order.PushBack(&limitEntry{key: key, fails: []time.Time{now}})
}

// Reset forgets the failures of key, as after a successful login.
func (l *Limiter) Reset(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if el, found := l.keys[key]; found {
		l.order.Remove(el)
		delete(l.keys, key)
	}
}

// recent drops failures that have left the window.
func (l *Limiter) recent(fails []time.Time, now time.Time) []time.Time {
	i := 0
	for i < len(fails) && now.Sub(fails[i]) >= l.window {
		i++
	}
	return fails[i:]
}

// prune forgets keys whose latest failure has left the window. The list is ordered
// by latest failure, so it stops at the first key still in the window.
func (l *Limiter) prune(now time.Time) {
	for el := l.order.Front(); el != nil; el = l.order.Front() {
		e := el.Value.(*limitEntry)
		if now.Sub(e.fails[len(e.fails)-1]) < l.window {
			return
		}
		l.order.Remove(el)
		delete(l.keys, e.key)
	}
}
