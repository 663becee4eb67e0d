package auth_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"atrium/internal/auth"
	"atrium/internal/errs"
	"atrium/internal/store"
	"atrium/internal/store/storetest"
)

// fakeClock is a settable clock for expiry and rate-limit windows.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

const pw = "correct horse battery"

// newLogins returns Logins on a real database holding users alice and (disabled) dave.
func newLogins(t *testing.T) (*auth.Logins, *store.DB, *fakeClock) {
	t.Helper()
	ctx := context.Background()
	db := storetest.Open(t)
	hash, err := auth.HashPassword(pw)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []store.User{
		{Username: "alice", PasswordHash: hash, Role: store.RoleAdmin},
		{Username: "dave", PasswordHash: hash, Role: store.RoleUser, Disabled: true},
	} {
		if err := db.CreateUser(ctx, &u); err != nil {
			t.Fatal(err)
		}
	}
	clk := &fakeClock{t: time.Now()}
	return auth.NewLogins(db, time.Hour, clk.now), db, clk
}

func wantErrCode(t *testing.T, err error, code string) {
	t.Helper()
	if !errs.Is(err, code) || errs.Message(err) == "" {
		t.Fatalf("error = %v, want %q with a message", err, code)
	}
}

func TestLogInAndCurrent(t *testing.T) {
	ctx := context.Background()
	l, _, clk := newLogins(t)
	tok, u, err := l.LogIn(ctx, "alice", pw, "1.2.3.4")
	if err != nil || u.Username != "alice" || tok.Value == "" {
		t.Fatalf("login = %+v, %+v, %v", tok, u, err)
	}
	if got := tok.ExpiresAt.Sub(clk.now()); got != time.Hour {
		t.Errorf("token lives %v, want the ttl", got)
	}
	cur, renewed, err := l.Current(ctx, tok.Value)
	if err != nil || cur.ID != u.ID || !renewed.IsZero() {
		t.Fatalf("current = %+v, %v, %v", cur, renewed, err)
	}

	// Past half its life the login slides forward.
	clk.advance(40 * time.Minute)
	_, renewed, err = l.Current(ctx, tok.Value)
	if err != nil || renewed.Sub(clk.now()) != time.Hour {
		t.Fatalf("renewal = %v, %v", renewed, err)
	}

	_, _, err = l.Current(ctx, "not a token")
	wantErrCode(t, err, errs.Unauthorized)

	if err := l.LogOut(ctx, tok.Value); err != nil {
		t.Fatal(err)
	}
	_, _, err = l.Current(ctx, tok.Value)
	wantErrCode(t, err, errs.Unauthorized)
}

func TestExpiredToken(t *testing.T) {
	ctx := context.Background()
	l, db, clk := newLogins(t)
	tok, _, err := l.LogIn(ctx, "alice", pw, "ip")
	if err != nil {
		t.Fatal(err)
	}
	clk.advance(61 * time.Minute)
	_, _, err = l.Current(ctx, tok.Value)
	wantErrCode(t, err, errs.Unauthorized)
	// The expired login is deleted, not merely refused.
	if _, _, err := db.LoginByTokenHash(ctx, auth.HashToken(tok.Value)); !errs.Is(err, errs.NotFound) {
		t.Errorf("expired login still stored: %v", err)
	}
}

func TestDisabledUserLoggedOut(t *testing.T) {
	ctx := context.Background()
	l, db, _ := newLogins(t)
	u, err := db.UserByUsername(ctx, "dave")
	if err != nil {
		t.Fatal(err)
	}
	// A login made before the account was disabled no longer counts.
	tok, err := l.Start(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = l.Current(ctx, tok.Value)
	wantErrCode(t, err, errs.Unauthorized)
}

func TestLogInFailures(t *testing.T) {
	ctx := context.Background()
	l, _, _ := newLogins(t)
	_, _, errWrong := l.LogIn(ctx, "alice", "wrong password", "ip1")
	_, _, errMissing := l.LogIn(ctx, "nobody", pw, "ip1")
	_, _, errDisabled := l.LogIn(ctx, "dave", pw, "ip1")
	for _, err := range []error{errWrong, errMissing, errDisabled} {
		wantErrCode(t, err, errs.Unauthorized)
		if errs.Message(err) != errs.Message(errWrong) {
			t.Errorf("failure messages differ, which tells usernames apart: %q vs %q", errs.Message(err), errs.Message(errWrong))
		}
	}
}

func TestLogInRateLimit(t *testing.T) {
	ctx := context.Background()
	t.Run("bad tries from one address do not lock out another", func(t *testing.T) {
		l, _, clk := newLogins(t)
		refused := 0
		for range 20 {
			_, _, err := l.LogIn(ctx, "alice", "wrong password", "9.9.9.9")
			if errs.Is(err, errs.RateLimited) {
				refused++
				clk.advance(time.Second) // the attacker waits a little and goes on
			}
		}
		if refused == 0 {
			t.Fatal("20 bad tries from one address were never slowed down")
		}
		if _, _, err := l.LogIn(ctx, "alice", pw, "8.8.8.8"); err != nil {
			t.Fatalf("the right password from another address is refused: %v", err)
		}
		// The guessing address waits, even with the right password, and is told how long.
		_, _, err := l.LogIn(ctx, "alice", pw, "9.9.9.9")
		wantErrCode(t, err, errs.RateLimited)
		if !strings.Contains(errs.Message(err), "Try again in") {
			t.Errorf("no wait in %q", errs.Message(err))
		}
	})
	t.Run("growing delay per username and address", func(t *testing.T) {
		l, _, clk := newLogins(t)
		for range auth.FreeFailuresPerUserIP {
			_, _, err := l.LogIn(ctx, "alice", "wrong password", "ip1")
			wantErrCode(t, err, errs.Unauthorized)
		}
		var waits []string
		for range 4 {
			_, _, err := l.LogIn(ctx, "alice", "wrong password", "ip1")
			wantErrCode(t, err, errs.Unauthorized)
			_, _, err = l.LogIn(ctx, "ALICE", pw, "ip1")
			wantErrCode(t, err, errs.RateLimited)
			waits = append(waits, errs.Message(err))
			clk.advance(time.Minute)
		}
		want := []string{"1 second", "2 seconds", "4 seconds", "8 seconds"}
		for i, w := range want {
			if !strings.Contains(waits[i], w) {
				t.Errorf("wait %d: %q, want %s", i, waits[i], w)
			}
		}
		if _, _, err := l.LogIn(ctx, "alice", pw, "ip1"); err != nil {
			t.Fatalf("refused after the wait: %v", err)
		}
	})
	t.Run("per address", func(t *testing.T) {
		l, _, _ := newLogins(t)
		for i := range auth.FreeFailuresPerIP + 1 {
			_, _, err := l.LogIn(ctx, fmt.Sprintf("user%d", i), "wrong password", "9.9.9.9")
			wantErrCode(t, err, errs.Unauthorized)
		}
		_, _, err := l.LogIn(ctx, "alice", pw, "9.9.9.9")
		wantErrCode(t, err, errs.RateLimited)
		if _, _, err := l.LogIn(ctx, "alice", pw, "8.8.8.8"); err != nil {
			t.Fatalf("another address is slowed down too: %v", err)
		}
	})
	t.Run("per username from many addresses, short", func(t *testing.T) {
		l, _, clk := newLogins(t)
		for i := range auth.FreeFailuresPerUser + 10 {
			l.LogIn(ctx, "alice", "wrong password", fmt.Sprintf("ip%d", i))
			clk.advance(time.Millisecond)
		}
		_, _, err := l.LogIn(ctx, "alice", pw, "fresh-ip")
		wantErrCode(t, err, errs.RateLimited)
		clk.advance(auth.MaxDelayPerUser)
		if _, _, err := l.LogIn(ctx, "alice", pw, "fresh-ip"); err != nil {
			t.Fatalf("still refused after the account-wide maximum delay: %v", err)
		}
	})
	t.Run("success resets the username", func(t *testing.T) {
		l, _, _ := newLogins(t)
		for range auth.FreeFailuresPerUserIP {
			l.LogIn(ctx, "alice", "wrong password", "ip")
		}
		if _, _, err := l.LogIn(ctx, "alice", pw, "ip"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := l.LogIn(ctx, "alice", "wrong password", "ip"); !errs.Is(err, errs.Unauthorized) {
			t.Fatalf("the count was not reset: %v", err)
		}
		if _, _, err := l.LogIn(ctx, "alice", pw, "ip"); err != nil {
			t.Fatalf("refused after a reset: %v", err)
		}
	})
}
