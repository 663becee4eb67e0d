// Package storetest gives other packages' tests a real, throwaway store.DB, so
// that each does not copy its own "open a temp database" helper.
package storetest

import (
	"context"
	"path/filepath"
	"testing"

	"atrium/internal/store"
)

// Open opens a fresh, migrated database in tb.TempDir() and closes it in
// tb.Cleanup. It fails tb if the database cannot be opened.
func Open(tb testing.TB) *store.DB {
	tb.Helper()
	db, err := store.Open(context.Background(), filepath.Join(tb.TempDir(), "atrium.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}
