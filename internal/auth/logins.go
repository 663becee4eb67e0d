package auth

import (
	"context"
	"strings"
	"sync"
	"time"

	"atrium/internal/errs"
	"atrium/internal/store"
)

// Login rate limits: failures per client address and per username within LimitWindow.
const (
	MaxFailuresPerIP   = 20
	MaxFailuresPerUser = 10
	LimitWindow        = 15 * time.Minute
)

// User-facing messages of LogIn's errors. Every credential failure has the same one so
// that usernames cannot be probed.
const (
	msgRateLimited = "Too many failed logins. Wait a few minutes and try again."
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
		ipLimit:   NewLimiter(MaxFailuresPerIP, LimitWindow, now),
		userLimit: NewLimiter(MaxFailuresPerUser, LimitWindow, now)}
}

// LogIn checks username and password and starts a login. Failures count against ip
// and the username; past either limit it refuses even right passwords with
// errs.RateLimited. A wrong password, unknown user or disabled account is
// errs.Unauthorized, with one message for all three.
func (l *Logins) LogIn(ctx context.Context, username, password, ip string) (Token, store.User, error) {
	ipKey, userKey := "ip:"+ip, "user:"+strings.ToLower(username)
	if ok, _ := l.ipLimit.Allow(ipKey); !ok {
		return Token{}, store.User{}, errs.E(errs.RateLimited, msgRateLimited)
	}
	if ok, _ := l.userLimit.Allow(userKey); !ok {
		return Token{}, store.User{}, errs.E(errs.RateLimited, msgRateLimited)
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
		l.ipLimit.Fail(ipKey)
		l.userLimit.Fail(userKey)
		return Token{}, store.User{}, errs.E(errs.Unauthorized, msgBadLogin)
	}
	l.userLimit.Reset(userKey)
	t, err := l.Start(ctx, u)
	return t, u, err
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
