package contextwin_test

import (
	"context"
	"testing"

	"atrium/internal/store"
	"atrium/internal/store/storetest"
)

// openSession opens a fresh database with one session, for the benchmark that
// loads its tail the way a turn does (store.DB.LoadContextMessages, tested in
// internal/store).
func openSession(tb testing.TB) (*store.DB, string) {
	tb.Helper()
	ctx := context.Background()
	db := storetest.Open(tb)
	u := store.User{Username: "ann", PasswordHash: "h", Role: store.RoleUser}
	if err := db.CreateUser(ctx, &u); err != nil {
		tb.Fatal(err)
	}
	s := store.Session{ID: "s1", OwnerID: u.ID}
	if err := db.CreateSession(ctx, &s); err != nil {
		tb.Fatal(err)
	}
	return db, s.ID
}
