package store_test

import (
	"context"
	"encoding/binary"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"atrium/internal/errs"
	"atrium/internal/store"
)

// mustOpen opens a fresh database in a temporary directory, with a fake clock, and
// closes it when the test ends.
func mustOpen(tb testing.TB) *store.DB {
	tb.Helper()
	return mustOpenPath(tb, filepath.Join(tb.TempDir(), "atrium.db"))
}

func mustOpenPath(tb testing.TB, path string) *store.DB {
	tb.Helper()
	db, err := store.Open(context.Background(), path)
	if err != nil {
		tb.Fatalf("open %s: %v", path, err)
	}
	db.Now = newClock().Now
	tb.Cleanup(func() {
		if err := db.Close(); err != nil {
			tb.Errorf("close: %v", err)
		}
	})
	return db
}

// clock is a fake time source that advances one millisecond per call, so that
// every write gets a distinct, increasing timestamp.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got nil error, want %s", code)
	}
	if got := errs.Code(err); got != code {
		t.Fatalf("got code %s (%v), want %s", got, err, code)
	}
}

func mustNil(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

func TestOpenPragmas(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	for _, tc := range []struct{ pragma, want string }{
		{"journal_mode", "wal"},
		{"foreign_keys", "1"},
		{"busy_timeout", "5000"},
		{"synchronous", "1"},
		{"secure_delete", "1"},
	} {
		t.Run(tc.pragma, func(t *testing.T) {
			var got string
			mustNil(t, db.SQLForTest().QueryRowContext(ctx, "PRAGMA "+tc.pragma).Scan(&got))
			if got != tc.want {
				t.Errorf("PRAGMA %s = %q, want %q", tc.pragma, got, tc.want)
			}
		})
	}
	mustNil(t, db.Ping(ctx))
}

func TestMigrationsRerunIsNoop(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "atrium.db")
	db, err := store.Open(ctx, path)
	mustNil(t, err)
	v, err := db.SchemaVersion(ctx)
	mustNil(t, err)
	if v != store.LatestSchemaVersion() || v < 1 {
		t.Fatalf("schema version %d, latest %d", v, store.LatestSchemaVersion())
	}
	u := store.User{Username: "ann", PasswordHash: "h", Role: store.RoleUser}
	mustNil(t, db.CreateUser(ctx, &u))
	mustNil(t, db.Close())

	db = mustOpenPath(t, path) // re-run: must not fail or wipe data
	var applied int
	mustNil(t, db.SQLForTest().QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&applied))
	// One row per migration file; numbers may have gaps while branches are merged.
	files, err := filepath.Glob("migrations/*.sql")
	mustNil(t, err)
	if applied != len(files) {
		t.Errorf("schema_migrations has %d rows, want %d", applied, len(files))
	}
	if _, err := db.UserByUsername(ctx, "ann"); err != nil {
		t.Errorf("data lost on reopen: %v", err)
	}
}

// A migration numbered below the highest applied one (two branches merged out of
// order) is still applied when the database opens.
func TestMigrationBelowHighestIsApplied(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "atrium.db")
	db := mustOpenPath(t, path)
	// Undo 0023 (runs.pinned) as if this database had never seen it.
	for _, q := range []string{`DROP INDEX runs_prunable`, `ALTER TABLE runs DROP COLUMN pinned`,
		`DELETE FROM schema_migrations WHERE version = 23`} {
		_, err := db.SQLForTest().ExecContext(ctx, q)
		mustNil(t, err)
	}
	mustNil(t, db.Close())

	db = mustOpenPath(t, path)
	var n int
	mustNil(t, db.SQLForTest().QueryRowContext(ctx,
		`SELECT COUNT(*) FROM pragma_table_info('runs') WHERE name = 'pinned'`).Scan(&n))
	if n != 1 {
		t.Fatal("migration 0023 was skipped because a higher version was already applied")
	}
}

func TestConcurrentOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "atrium.db")
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			db, err := store.Open(context.Background(), path)
			if err == nil {
				err = db.Close()
			}
			errc <- err
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Error(err)
		}
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "atrium.db")
	db, err := store.Open(ctx, path)
	mustNil(t, err)
	_, err = db.SQLForTest().ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, '0999_future.sql', 0)`)
	mustNil(t, err)
	mustNil(t, db.Close())

	_, err = store.Open(ctx, path)
	if err == nil {
		t.Fatal("opened a database from the future")
	}
	want := "database schema version 999 is newer than this Atrium understands"
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "Upgrade Atrium") || !strings.Contains(err.Error(), "restore the backup") {
		t.Errorf("error %q does not explain the problem", err)
	}
}

func TestOpenBadPath(t *testing.T) {
	for _, p := range []string{"", ":memory:", "x.db?mode=ro"} {
		t.Run(p, func(t *testing.T) {
			if db, err := store.Open(context.Background(), p); err == nil {
				db.Close()
				t.Fatalf("Open(%q) succeeded", p)
			}
		})
	}
}

func TestVec(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	v, err := db.VecVersion(ctx)
	mustNil(t, err)
	if !strings.HasPrefix(v, "v0.") {
		t.Errorf("vec_version() = %q", v)
	}
	_, err = db.SQLForTest().ExecContext(ctx, `CREATE VIRTUAL TABLE v USING vec0(embedding float[4])`)
	mustNil(t, err)
	rows := map[int64]string{
		1: "[1, 0, 0, 0]",
		2: "[0, 1, 0, 0]",
		3: "[0.9, 0.1, 0, 0]",
		4: "[0, 0, 0, 1]",
	}
	for id, e := range rows {
		_, err := db.SQLForTest().ExecContext(ctx, `INSERT INTO v (rowid, embedding) VALUES (?, ?)`, id, e)
		mustNil(t, err)
	}
	tests := []struct {
		name  string
		query any
	}{
		{"json", "[1, 0.05, 0, 0]"},
		{"blob", float32Blob(1, 0.05, 0, 0)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := db.SQLForTest().QueryContext(ctx, `SELECT rowid, distance FROM v WHERE embedding MATCH ? ORDER BY distance LIMIT 2`, tc.query)
			mustNil(t, err)
			defer rs.Close()
			var got []int64
			var prev float64
			for rs.Next() {
				var id int64
				var d float64
				mustNil(t, rs.Scan(&id, &d))
				if d < prev {
					t.Errorf("distances not ascending: %v after %v", d, prev)
				}
				prev = d
				got = append(got, id)
			}
			mustNil(t, rs.Err())
			if len(got) != 2 || got[0] != 1 || got[1] != 3 {
				t.Errorf("nearest = %v, want [1 3]", got)
			}
		})
	}
}

func float32Blob(fs ...float32) []byte {
	b := make([]byte, 4*len(fs))
	for i, f := range fs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}
