package store_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"atrium/internal/errs"
	"atrium/internal/store"
)

func TestLogins(t *testing.T) {
	db := mustOpen(t)
	clk := newClock()
	db.Now = clk.Now
	ctx := context.Background()
	ann := mustUser(t, db, "ann", store.RoleUser)
	t0 := clk.Now()

	live := store.Login{TokenHash: []byte{1, 2, 3}, UserID: ann.ID, ExpiresAt: t0.Add(time.Hour)}
	old := store.Login{TokenHash: []byte{9}, UserID: ann.ID, ExpiresAt: t0.Add(time.Minute)}
	mustNil(t, db.CreateLogin(ctx, live))
	mustNil(t, db.CreateLogin(ctx, old))

	t.Run("lookup joins the user", func(t *testing.T) {
		l, u, err := db.LoginByTokenHash(ctx, live.TokenHash)
		mustNil(t, err)
		if !bytes.Equal(l.TokenHash, live.TokenHash) || l.UserID != ann.ID || u.Username != "ann" {
			t.Errorf("login %+v user %+v", l, u)
		}
		if !l.ExpiresAt.Equal(live.ExpiresAt) || l.CreatedAt.IsZero() || l.LastSeenAt.IsZero() {
			t.Errorf("timestamps %+v", l)
		}
	})
	t.Run("duplicate and unknown user", func(t *testing.T) {
		wantCode(t, db.CreateLogin(ctx, live), errs.Conflict)
		wantCode(t, db.CreateLogin(ctx, store.Login{TokenHash: []byte{7}, UserID: 999}), errs.NotFound)
	})
	t.Run("extend", func(t *testing.T) {
		later := t0.Add(48 * time.Hour)
		mustNil(t, db.ExtendLogin(ctx, live.TokenHash, later))
		l, _, err := db.LoginByTokenHash(ctx, live.TokenHash)
		mustNil(t, err)
		if !l.ExpiresAt.Equal(later) || !l.LastSeenAt.After(t0) {
			t.Errorf("after extend %+v", l)
		}
		wantCode(t, db.ExtendLogin(ctx, []byte("nope"), later), errs.NotFound)
	})
	t.Run("delete expired", func(t *testing.T) {
		clk.Set(t0.Add(2 * time.Minute))
		n, err := db.DeleteExpiredLogins(ctx)
		mustNil(t, err)
		if n != 1 {
			t.Errorf("deleted %d, want 1", n)
		}
		_, _, err = db.LoginByTokenHash(ctx, old.TokenHash)
		wantCode(t, err, errs.NotFound)
	})
	t.Run("delete", func(t *testing.T) {
		mustNil(t, db.DeleteLogin(ctx, live.TokenHash))
		_, _, err := db.LoginByTokenHash(ctx, live.TokenHash)
		wantCode(t, err, errs.NotFound)
		mustNil(t, db.DeleteLogin(ctx, live.TokenHash)) // signing out twice is fine
	})
}
