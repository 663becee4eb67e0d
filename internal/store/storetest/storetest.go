// Package storetest gives other packages' tests a real, throwaway store.DB, so
// that each does not copy its own "open a temp database" helper, and a few
// raw-SQL helpers for what store methods do not show. For tests only.
package storetest

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"atrium/internal/store"
	"atrium/internal/store/internal/testpool"
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

// The helpers below run raw SQL on db's pool, for tests that check what is
// stored byte for byte or set up failures (e.g. triggers) that no store method
// can. They fail tb on any error. Production code has no such access.

// Exec runs query (one or more statements) with args.
func Exec(tb testing.TB, db *store.DB, query string, args ...any) {
	tb.Helper()
	if _, err := testpool.Of(db).ExecContext(context.Background(), query, args...); err != nil {
		tb.Fatalf("storetest: exec %q: %v", query, err)
	}
}

// Int returns the single integer query yields, e.g. a COUNT(*).
func Int(tb testing.TB, db *store.DB, query string, args ...any) int64 {
	tb.Helper()
	var n int64
	if err := testpool.Of(db).QueryRowContext(context.Background(), query, args...).Scan(&n); err != nil {
		tb.Fatalf("storetest: query %q: %v", query, err)
	}
	return n
}

// Strings returns the first column of every row query yields, as text.
func Strings(tb testing.TB, db *store.DB, query string, args ...any) []string {
	tb.Helper()
	rows, err := testpool.Of(db).QueryContext(context.Background(), query, args...)
	if err != nil {
		tb.Fatalf("storetest: query %q: %v", query, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			tb.Fatalf("storetest: query %q: %v", query, err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		tb.Fatalf("storetest: query %q: %v", query, err)
	}
	return out
}

// Pool is db's connection pool itself, for a test that reads rows of several
// columns (blobs included) that the helpers above do not cover.
func Pool(tb testing.TB, db *store.DB) *sql.DB {
	tb.Helper()
	return testpool.Of(db)
}

// WriterExec runs query on db's one writer connection, e.g. a per-connection
// pragma such as max_page_count that only the writer's writes obey.
func WriterExec(tb testing.TB, db *store.DB, query string, args ...any) {
	tb.Helper()
	if _, err := testpool.Writer(db).ExecContext(context.Background(), query, args...); err != nil {
		tb.Fatalf("storetest: exec %q: %v", query, err)
	}
}
