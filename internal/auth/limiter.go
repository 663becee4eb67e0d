package auth

import (
	"container/list"
	"sync"
	"time"
)

// MaxLimiterKeys bounds the memory of a Limiter: when a new key would exceed it, the
// key whose last failure is oldest is forgotten.
const MaxLimiterKeys = 10_000

// Limiter slows down repeated failures per key (a username and address, an address)
// with growing delays instead of a lock-out: the first Free failures cost nothing,
// then each one makes the key wait Base, 2×Base, 4×Base … up to Max after it. A key
// whose last failure is Forget old starts over. Safe for concurrent use; its memory
// is bounded.
type Limiter struct {
	free         int
	base, max    time.Duration
	forget       time.Duration
	now          func() time.Time
	mu           sync.Mutex
	keys         map[string]*list.Element // of *limitEntry
	order        *list.List               // least recently failed first
	maxDoublings int
}

type limitEntry struct {
	key   string
	fails int       // failures since the key started over
	last  time.Time // the latest failure
}

// NewLimiter returns a Limiter that lets free failures pass, then delays by base,
// doubling up to max, and forgets a key forget after its last failure. A nil now
// means time.Now.
func NewLimiter(free int, base, max, forget time.Duration, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	n := 0
	for d := base; d > 0 && d < max; d *= 2 {
		n++
	}
	return &Limiter{free: max0(free), base: base, max: max, forget: forget, now: now,
		keys: map[string]*list.Element{}, order: list.New(), maxDoublings: n}
}

func max0(n int) int {
	if n < 0 {
		return 0
	}
	return n
}

// Allow reports whether key may try now. When it may not, retryAfter is how long
// until it may.
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
	if wait := e.last.Add(l.delay(e.fails)).Sub(now); wait > 0 {
		return false, wait
	}
	return true, 0
}

// delay is how long a key with fails failures waits after the last one.
func (l *Limiter) delay(fails int) time.Duration {
	if fails <= l.free {
		return 0
	}
	if n := fails - l.free - 1; n < l.maxDoublings {
		return l.base << n
	}
	return l.max
}

// Fail records a failed attempt for key.
func (l *Limiter) Fail(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.prune(now)
	if el, found := l.keys[key]; found {
		e := el.Value.(*limitEntry)
		e.fails++
		e.last = now
		l.order.MoveToBack(el)
		return
	}
	if len(l.keys) >= MaxLimiterKeys {
		oldest := l.order.Front()
		l.order.Remove(oldest)
		delete(l.keys, oldest.Value.(*limitEntry).key)
	}
	l.keys[key] = l.order.PushBack(&limitEntry{key: key, fails: 1, last: now})
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

// prune forgets keys whose latest failure is forget old. The list is ordered by
// latest failure, so it stops at the first key that is younger.
func (l *Limiter) prune(now time.Time) {
	for el := l.order.Front(); el != nil; el = l.order.Front() {
		e := el.Value.(*limitEntry)
		if now.Sub(e.last) < l.forget {
			return
		}
		l.order.Remove(el)
		delete(l.keys, e.key)
	}
}
