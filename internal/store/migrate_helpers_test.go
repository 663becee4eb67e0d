package store

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
)

// databaseBefore writes a database file with every migration below version applied,
// as an older Atrium left it, and returns its path, the open handle (the caller closes
// it before Open) and an exec that fails the test on an error.
func databaseBefore(t *testing.T, version int) (string, *sql.DB, func(q string, args ...any)) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "old.db")
	raw, err := sql.Open("sqlite", path+"?_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	list, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := raw.ExecContext(context.Background(), q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`)
	for _, m := range list {
		if m.version >= version {
			break
		}
		exec(m.sql)
		exec(`INSERT INTO schema_migrations VALUES (?, ?, 0)`, m.version, m.name)
	}
	return path, raw, exec
}
