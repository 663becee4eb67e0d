package auth

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"atrium/internal/errs"
	"atrium/internal/store"
)

// Login rate limits: growing delays, never a lock-out of the account. Failures count
// per username and client address (one guesser, one account), per address (one
// guesser spraying usernames) and per username from every address (a distributed
// guess). Only the first two ever wait long, so bad tries from one address do not keep
// the right password out from another; the account-wide one starts late and stays
// short. Each limiter lets its first failures pass, then waits one second, doubling
// up to its maximum; a key is forgotten an hour after its last failure.
const (
	FreeFailuresPerUserIP = 5
	FreeFailuresPerIP     = 20
	FreeFailuresPerUser   = 50
	MaxDelayPerUserIP     = 15 * time.Minute
	MaxDelayPerIP         = 15 * time.Minute
	MaxDelayPerUser       = 30 * time.Second
	LimitForget           = time.Hour
)

// User-facing messages of LogIn's errors. Every credential failure has the same one so
// that usernames cannot be probed.
const (
	msgRateLimited = "Too many failed logins. Try again in %s."
	msgBadLogin    = "Wrong username or password, or the account is disabled."
)

// LoginStore is what Logins needs of the database.
type LoginStore interface {
	UserByUsername(ctx context.Context, name string) (store.User, error)
	CreateLogin(ctx context.Context, l store.Login) error
	LoginByTokenHash(ctx context.Context, hash []byte) (store.Login, store.User, error)
	ExtendLogin(ctx context.Context, hash []byte, expiresAt time.Time) error
	DeleteLogin(ctx context.Context, hash []byte) error
}

// Token is a login token for the client's cookie, and when it expires.
type Token struct {
	Value     string
	ExpiresAt time.Time
}

// Logins checks credentials and keeps login tokens: it logs in (rate-limited), resolves
// a token to its user with a sliding expiry, and logs out. Safe for concurrent use.
type Logins struct {
	store     LoginStore
	ttl       time.Duration
	now       func() time.Time
	pairLimit *Limiter // username and address
	ipLimit   *Limiter
	userLimit *Limiter
}

// NewLogins returns Logins whose tokens live ttl after their last renewal. A nil now
// means time.Now.
func NewLogins(st LoginStore, ttl time.Duration, now func() time.Time) *Logins {
	if now == nil {
		now = time.Now
	}
	return &Logins{store: st, ttl: ttl, now: now,
		pairLimit: NewLimiter(FreeFailuresPerUserIP, time.Second, MaxDelayPerUserIP, LimitForget, now),
		ipLimit:   NewLimiter(FreeFailuresPerIP, time.Second, MaxDelayPerIP, LimitForget, now),
		userLimit: NewLimiter(FreeFailuresPerUser, time.Second, MaxDelayPerUser, LimitForget, now)}
}

// LogIn checks username and password and starts a login. Failures count against the
// username and ip together, ip, and the username (see the limits above); while one of
// them must wait, even the right password is refused with errs.RateLimited, saying how
// long to wait. A wrong password, unknown user or disabled account is
// errs.Unauthorized, with one message for all three.
func (l *Logins) LogIn(ctx context.Context, username, password, ip string) (Token, store.User, error) {
	name := strings.ToLower(username)
	pairKey, ipKey, userKey := "pair:"+ip+"\x00"+name, "ip:"+ip, "user:"+name
	var wait time.Duration
	for _, c := range []struct {
		lim *Limiter
		key string
	}{{l.pairLimit, pairKey}, {l.ipLimit, ipKey}, {l.userLimit, userKey}} {
		if ok, retry := c.lim.Allow(c.key); !ok {
			wait = max(wait, retry)
		}
	}
	if wait > 0 {
		return Token{}, store.User{}, errs.E(errs.RateLimited, msgRateLimited, roundUp(wait))
	}
	u, err := l.store.UserByUsername(ctx, username)
	if err != nil && !errs.Is(err, errs.NotFound) {
		return Token{}, store.User{}, err
	}
	ok := false
	if err == nil {
		ok, _ = VerifyPassword(u.PasswordHash, password)
	} else {
		// Spend the same time as a real check so a missing user is not detectable.
		_, _ = VerifyPassword(dummyHash(), password)
	}
	if !ok || u.Disabled {
		l.pairLimit.Fail(pairKey)
		l.ipLimit.Fail(ipKey)
		l.userLimit.Fail(userKey)
		return Token{}, store.User{}, errs.E(errs.Unauthorized, msgBadLogin)
	}
	l.pairLimit.Reset(pairKey)
	l.userLimit.Reset(userKey)
	t, err := l.Start(ctx, u)
	return t, u, err
}

// roundUp says a wait in whole seconds or minutes, never "0 seconds".
func roundUp(d time.Duration) string {
	if d > 90*time.Second {
		return fmt.Sprintf("%d minutes", (d+time.Minute-1)/time.Minute)
	}
	if s := (d + time.Second - 1) / time.Second; s != 1 {
		return fmt.Sprintf("%d seconds", s)
	}
	return "1 second"
}

// dummyHash is verified against when the username does not exist. Made on first use,
// not at start-up, where it would cost tens of milliseconds.
var dummyHash = sync.OnceValue(func() string {
	h, _ := HashPassword("not a real password, only for timing")
	return h
})

// Start creates a login for u without a password check, as right after setup.
func (l *Logins) Start(ctx context.Context, u store.User) (Token, error) {
	token, hash, err := NewToken()
	if err != nil {
		return Token{}, err
	}
	now := l.now()
	t := Token{Value: token, ExpiresAt: now.Add(l.ttl)}
	if err := l.store.CreateLogin(ctx, store.Login{TokenHash: hash, UserID: u.ID, CreatedAt: now, ExpiresAt: t.ExpiresAt, LastSeenAt: now}); err != nil {
		return Token{}, err
	}
	return t, nil
}

// Current returns the user logged in with token. An unknown or expired token, or a
// disabled user, is errs.Unauthorized (the expired login is deleted). When the expiry
// slid forward, renewed is the token's new expiry, for the cookie; else it is zero.
func (l *Logins) Current(ctx context.Context, token string) (u store.User, renewed time.Time, err error) {
	hash := HashToken(token)
	login, u, err := l.store.LoginByTokenHash(ctx, hash)
	now := l.now()
	switch {
	case errs.Is(err, errs.NotFound):
		return store.User{}, time.Time{}, errs.E(errs.Unauthorized, "You are not logged in.")
	case err != nil:
		return store.User{}, time.Time{}, err
	case now.After(login.ExpiresAt) || u.Disabled:
		_ = l.store.DeleteLogin(ctx, hash)
		return store.User{}, time.Time{}, errs.E(errs.Unauthorized, "You are not logged in.")
	}
	// Sliding expiry, written at most once per half-life to keep reads cheap.
	if login.ExpiresAt.Sub(now) < l.ttl/2 {
		if err := l.store.ExtendLogin(ctx, hash, now.Add(l.ttl)); err == nil {
			renewed = now.Add(l.ttl)
		}
	}
	return u, renewed, nil
}

// LogOut ends the login of token. An unknown token is not an error.
func (l *Logins) LogOut(ctx context.Context, token string) error {
	return l.store.DeleteLogin(ctx, HashToken(token))
}
