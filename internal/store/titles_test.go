package store_test

import (
	"context"
	"testing"

	"atrium/internal/store"
)

// The first line titles an untitled chat only; the model's title replaces only that;
// a title the user typed is never replaced.
func TestTitleSources(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	u := store.User{Username: "ann", PasswordHash: "h", Role: store.RoleUser}
	mustNil(t, db.CreateUser(ctx, &u))
	s := store.Session{ID: "s1", OwnerID: u.ID}
	mustNil(t, db.CreateSession(ctx, &s))
	check := func(title, source string) {
		t.Helper()
		got, err := db.SessionForOwner(ctx, "s1", u.ID)
		mustNil(t, err)
		if got.Title != title || got.TitleSource != source {
			t.Fatalf("title %q (%s), want %q (%s)", got.Title, got.TitleSource, title, source)
		}
	}
	set := func(f func(context.Context, string, int64, string) (bool, error), title string, want bool) {
		t.Helper()
		ok, err := f(ctx, "s1", u.ID, title)
		mustNil(t, err)
		if ok != want {
			t.Fatalf("set %q: %v, want %v", title, ok, want)
		}
	}
	set(db.SetModelTitle, "too early", false) // no provisional title yet
	set(db.SetFirstLineTitle, "first line", true)
	set(db.SetFirstLineTitle, "second message", false)
	check("first line", store.TitleFromMessage)
	set(db.SetModelTitle, "Model title", true)
	check("Model title", store.TitleByModel)
	set(db.SetModelTitle, "again", false)
	mustNil(t, db.RenameSession(ctx, "s1", u.ID, "Mine"))
	check("Mine", store.TitleByUser)
	set(db.SetFirstLineTitle, "x", false)
	set(db.SetModelTitle, "x", false)
	set(db.SetFirstLineTitle, "someone else's", false)
	if ok, _ := db.SetFirstLineTitle(ctx, "s1", u.ID+1, "foreign"); ok {
		t.Error("another owner's write went through")
	}
}
