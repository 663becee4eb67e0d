package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"atrium/internal/errs"
	"atrium/internal/store"
)

func mustUser(tb testing.TB, db *store.DB, name, role string) store.User {
	tb.Helper()
	u := store.User{Username: name, PasswordHash: "hash-" + name, Role: role}
	if err := db.CreateUser(context.Background(), &u); err != nil {
		tb.Fatalf("create user %s: %v", name, err)
	}
	return u
}

func TestCreateFirstAdmin(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	u, err := db.CreateFirstAdmin(ctx, "root", "h")
	mustNil(t, err)
	if u.ID == 0 || u.Role != store.RoleAdmin || u.Disabled || u.CreatedAt.IsZero() {
		t.Errorf("first admin = %+v", u)
	}
	got, err := db.UserByID(ctx, u.ID)
	mustNil(t, err)
	if got != u {
		t.Errorf("stored %+v, returned %+v", got, u)
	}
	_, err = db.CreateFirstAdmin(ctx, "other", "h")
	wantCode(t, err, errs.Conflict)
}

func TestCreateFirstAdminRace(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	const n = 8
	var wg sync.WaitGroup
	results := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, results[i] = db.CreateFirstAdmin(ctx, fmt.Sprintf("admin%d", i), "h")
		})
	}
	wg.Wait()
	wins := 0
	for _, err := range results {
		switch {
		case err == nil:
			wins++
		case errs.Is(err, errs.Conflict):
		default:
			t.Errorf("unexpected error: %v", err)
		}
	}
	if wins != 1 {
		t.Errorf("%d setups won, want exactly 1", wins)
	}
	if c, _ := db.CountUsers(ctx); c != 1 {
		t.Errorf("%d users, want 1", c)
	}
}

func TestUsers(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	ann := mustUser(t, db, "Ann", store.RoleAdmin)
	bob := mustUser(t, db, "bob", store.RoleUser)

	t.Run("lookup is case insensitive", func(t *testing.T) {
		u, err := db.UserByUsername(ctx, "ANN")
		mustNil(t, err)
		if u.ID != ann.ID {
			t.Errorf("got %+v", u)
		}
	})
	t.Run("duplicate username conflicts", func(t *testing.T) {
		u := store.User{Username: "ann", PasswordHash: "x", Role: store.RoleUser}
		wantCode(t, db.CreateUser(ctx, &u), errs.Conflict)
	})
	t.Run("invalid input", func(t *testing.T) {
		for _, u := range []store.User{
			{Username: "", Role: store.RoleUser},
			{Username: "zed", Role: "root"},
		} {
			wantCode(t, db.CreateUser(ctx, &u), errs.Invalid)
		}
		wantCode(t, db.SetUserRole(ctx, bob.ID, "god"), errs.Invalid)
	})
	t.Run("not found", func(t *testing.T) {
		_, err := db.UserByID(ctx, 999)
		wantCode(t, err, errs.NotFound)
		_, err = db.UserByUsername(ctx, "nobody")
		wantCode(t, err, errs.NotFound)
		wantCode(t, db.SetUserDisabled(ctx, 999, true), errs.NotFound)
		wantCode(t, db.SetUserRole(ctx, 999, store.RoleUser), errs.NotFound)
		wantCode(t, db.SetUserPassword(ctx, 999, "x"), errs.NotFound)
	})
	t.Run("list and count", func(t *testing.T) {
		us, err := db.ListUsers(ctx)
		mustNil(t, err)
		if len(us) != 2 || us[0].Username != "Ann" || us[1].Username != "bob" {
			t.Errorf("list = %+v", us)
		}
		n, err := db.CountUsers(ctx)
		mustNil(t, err)
		if n != 2 {
			t.Errorf("count = %d", n)
		}
	})
}

func TestLastAdminProtected(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	ann := mustUser(t, db, "ann", store.RoleAdmin)
	bob := mustUser(t, db, "bob", store.RoleUser)

	wantCode(t, db.SetUserDisabled(ctx, ann.ID, true), errs.Conflict)
	wantCode(t, db.SetUserRole(ctx, ann.ID, store.RoleUser), errs.Conflict)

	// With a second admin, ann can step down; then bob is the last one.
	mustNil(t, db.SetUserRole(ctx, bob.ID, store.RoleAdmin))
	mustNil(t, db.SetUserRole(ctx, ann.ID, store.RoleUser))
	wantCode(t, db.SetUserDisabled(ctx, bob.ID, true), errs.Conflict)

	// A disabled admin does not count as the spare.
	mustNil(t, db.SetUserRole(ctx, ann.ID, store.RoleAdmin))
	mustNil(t, db.SetUserDisabled(ctx, ann.ID, true))
	wantCode(t, db.SetUserRole(ctx, bob.ID, store.RoleUser), errs.Conflict)
	// Demoting the disabled admin is fine.
	mustNil(t, db.SetUserRole(ctx, ann.ID, store.RoleUser))

	u, err := db.UserByID(ctx, ann.ID)
	mustNil(t, err)
	if !u.Disabled || u.Role != store.RoleUser {
		t.Errorf("ann = %+v", u)
	}
	mustNil(t, db.SetUserDisabled(ctx, ann.ID, false))
	if u, _ := db.UserByID(ctx, ann.ID); u.Disabled {
		t.Error("ann still disabled")
	}
}

func TestPasswordAndDisableDropLogins(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	mustUser(t, db, "root", store.RoleAdmin)
	bob := mustUser(t, db, "bob", store.RoleUser)
	tests := []struct {
		name   string
		change func() error
	}{
		{"password reset", func() error { return db.SetUserPassword(ctx, bob.ID, "new-hash") }},
		{"disable", func() error { return db.SetUserDisabled(ctx, bob.ID, true) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hash := []byte("token-" + tc.name)
			mustNil(t, db.CreateLogin(ctx, store.Login{TokenHash: hash, UserID: bob.ID, ExpiresAt: db.Now().Add(1e12)}))
			if _, _, err := db.LoginByTokenHash(ctx, hash); err != nil {
				t.Fatal(err)
			}
			mustNil(t, tc.change())
			_, _, err := db.LoginByTokenHash(ctx, hash)
			wantCode(t, err, errs.NotFound)
		})
	}
	u, err := db.UserByID(ctx, bob.ID)
	mustNil(t, err)
	if u.PasswordHash != "new-hash" || !u.Disabled {
		t.Errorf("bob = %+v", u)
	}
}
