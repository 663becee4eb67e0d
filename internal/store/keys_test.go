package store_test

import (
	"bytes"
	"context"
	"testing"

	"atrium/internal/errs"
	"atrium/internal/store"
)

func TestMeta(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	_, err := db.Meta(ctx, "k")
	wantCode(t, err, errs.NotFound)
	for _, v := range [][]byte{[]byte("one"), {0, 1, 2}} {
		mustNil(t, db.SetMeta(ctx, "k", v))
		got, err := db.Meta(ctx, "k")
		mustNil(t, err)
		if !bytes.Equal(got, v) {
			t.Errorf("meta = %q, want %q", got, v)
		}
	}
}

func TestWrappedKeys(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	u := mustUser(t, db, "ann", store.RoleUser)
	tests := []struct {
		name  string
		owner int64
	}{
		{"instance", store.InstanceOwner},
		{"user", u.ID},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := db.WrappedKey(ctx, tc.owner)
			wantCode(t, err, errs.NotFound)
			first := []byte{byte(tc.owner), 0xAA}
			mustNil(t, db.PutWrappedKey(ctx, tc.owner, first))
			wantCode(t, db.PutWrappedKey(ctx, tc.owner, []byte{0xBB}), errs.Conflict)
			got, err := db.WrappedKey(ctx, tc.owner)
			mustNil(t, err)
			if !bytes.Equal(got, first) {
				t.Errorf("wrapped key replaced: %x", got)
			}
		})
	}
	wantCode(t, db.PutWrappedKey(ctx, 7, nil), errs.Invalid)
	// No key for a user that does not exist (or no longer does): a deleted user's
	// key must not come back.
	wantCode(t, db.PutWrappedKey(ctx, u.ID+1, []byte{0xCC}), errs.NotFound)
	_, err := db.WrappedKey(ctx, u.ID+1)
	wantCode(t, err, errs.NotFound)
}

func TestSettings(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	_, err := db.Setting(ctx, "theme")
	wantCode(t, err, errs.NotFound)
	mustNil(t, db.SetSetting(ctx, "theme", "dark"))
	mustNil(t, db.SetSetting(ctx, "theme", "light"))
	v, err := db.Setting(ctx, "theme")
	mustNil(t, err)
	if v != "light" {
		t.Errorf("setting = %q", v)
	}
}
