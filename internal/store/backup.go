package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// Backup writes a consistent copy of the database at src to dst, while other processes
// (a running Atrium) keep reading and writing it. VACUUM INTO reads one snapshot inside a
// read transaction, so what is in the WAL at that moment is included, later commits are
// not, and a writer is never blocked. src is not migrated (a backup taken with a newer
// binary before an upgrade must hold the old schema) and never created.
//
// dst must not exist: the copy is written to a temporary file beside it (mode 0600),
// synced, and linked into place, which fails if dst appeared meanwhile. Nothing is left
// at dst on failure. It returns the size of the copy.
func Backup(ctx context.Context, src, dst string) (int64, error) {
	if _, err := os.Stat(src); err != nil {
		return 0, fmt.Errorf("store: backup: no database: %w", err)
	}
	if _, err := os.Lstat(dst); err == nil {
		return 0, fmt.Errorf("store: backup: %s already exists; refusing to overwrite it", dst)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("store: backup: %w", err)
	}
	// VACUUM INTO accepts an existing empty file, so the temporary file is created here,
	// owner-only (SQLite would create it 0644).
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".atrium-backup-*")
	if err != nil {
		return 0, fmt.Errorf("store: backup: %w", err)
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName)
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return 0, fmt.Errorf("store: backup: %w", err)
	}
	tmp.Close()

	if err := vacuumInto(ctx, src, tmpName); err != nil {
		return 0, err
	}
	f, err := os.Open(tmpName)
	if err != nil {
		return 0, fmt.Errorf("store: backup: %w", err)
	}
	err = f.Sync()
	fi, serr := f.Stat()
	f.Close()
	if err == nil {
		err = serr
	}
	if err != nil {
		return 0, fmt.Errorf("store: backup: %w", err)
	}
	if err := os.Link(tmpName, dst); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return 0, fmt.Errorf("store: backup: %s already exists; refusing to overwrite it", dst)
		}
		return 0, fmt.Errorf("store: backup: %w", err)
	}
	if d, err := os.Open(filepath.Dir(dst)); err == nil {
		d.Sync()
		d.Close()
	}
	return fi.Size(), nil
}

// vacuumInto copies src into the empty file dst over a connection of its own: mode=rw
// so that a missing file is an error rather than a new database, no journal-mode or
// migration statements, and the same 5 s busy wait as the server's connections.
func vacuumInto(ctx context.Context, src, dst string) error {
	if strings.ContainsRune(src, '?') {
		return fmt.Errorf("store: backup: unsupported database path %q", src)
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Set("mode", "rw")
	db, err := sql.Open("sqlite", "file:"+src+"?"+q.Encode())
	if err != nil {
		return fmt.Errorf("store: backup: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if err := pingWhileBusy(ctx, db); err != nil {
		return fmt.Errorf("store: backup: open %s: %w", src, err)
	}
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, dst); err != nil {
		return fmt.Errorf("store: backup: %w", err)
	}
	return nil
}

// CheckBackup opens a backup file without changing it and verifies that it is an
// intact Atrium database: integrity_check passes and its schema version is one this
// build knows (a newer one means the backup came from a newer Atrium).
func CheckBackup(ctx context.Context, path string) error {
	if strings.ContainsRune(path, '?') {
		return fmt.Errorf("store: check backup: unsupported path %q", path)
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("store: check backup: %w", err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&immutable=1")
	if err != nil {
		return fmt.Errorf("store: check backup: %w", err)
	}
	defer db.Close()
	var res string
	if err := db.QueryRowContext(ctx, `PRAGMA integrity_check(1)`).Scan(&res); err != nil {
		return fmt.Errorf("store: check backup: %s is not a SQLite database: %w", path, err)
	}
	if res != "ok" {
		return fmt.Errorf("store: check backup: %s is damaged: %s", path, res)
	}
	return checkSchemaVersion(ctx, db, path)
}

// checkSchemaVersion refuses a backup whose schema is not Atrium's or is newer than
// this build's migrations.
func checkSchemaVersion(ctx context.Context, db *sql.DB, path string) error {
	var v int
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
		return fmt.Errorf("store: check backup: %s is not an Atrium database (no schema_migrations table)", path)
	}
	if known := LatestSchemaVersion(); v > known {
		return fmt.Errorf("store: check backup: %s has schema version %d, newer than this Atrium understands (%d); restore it with the Atrium version that made it", path, v, known)
	}
	return nil
}
