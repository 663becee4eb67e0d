package store_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"atrium/internal/store"
	"atrium/internal/store/storetest"
)

// Backup copies what is committed, including what is still only in the WAL of an open
// database, writes 0600, never overwrites and never creates a missing source.
func TestBackup(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := filepath.Join(dir, "atrium.db")
	db, err := store.Open(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.SetMeta(ctx, "backup_probe", []byte("in the wal")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(src + "-wal"); err != nil || fi.Size() == 0 {
		t.Fatalf("want the write still in the WAL: %v", err)
	}
	dst := filepath.Join(dir, "copy.db")
	n, err := store.Backup(ctx, src, dst)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dst)
	if err != nil || fi.Size() != n || fi.Mode().Perm() != 0o600 {
		t.Fatalf("copy: %v, size %d (reported %d), mode %04o", err, fi.Size(), n, fi.Mode().Perm())
	}
	if err := store.CheckBackup(ctx, dst); err != nil {
		t.Fatal(err)
	}
	cp, err := store.Open(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := cp.Meta(ctx, "backup_probe"); err != nil || string(got) != "in the wal" {
		t.Errorf("copy lacks the WAL's write: %q %v", got, err)
	}
	cp.Close()

	before, _ := os.ReadFile(dst)
	if _, err := store.Backup(ctx, src, dst); err == nil || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Errorf("backup over an existing file: %v", err)
	}
	if after, _ := os.ReadFile(dst); string(after) != string(before) {
		t.Error("the existing file was changed")
	}
	missing := filepath.Join(dir, "none", "atrium.db")
	if _, err := store.Backup(ctx, missing, filepath.Join(dir, "x.db")); err == nil {
		t.Error("backup of a missing database succeeded")
	}
	if _, err := os.Stat(missing); err == nil {
		t.Error("backup created the missing database")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".atrium-backup-*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if _, err := os.Stat(filepath.Join(dir, "x.db")); err == nil {
		t.Error("a failed backup left its file")
	}
}

// CheckBackup refuses what is not an Atrium backup, or one from a newer Atrium.
func TestCheckBackup(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.db")
	os.WriteFile(junk, []byte(strings.Repeat("not sqlite ", 100)), 0o600)
	if err := store.CheckBackup(ctx, junk); err == nil {
		t.Error("junk accepted")
	}
	newer := filepath.Join(dir, "newer.db")
	db, err := store.Open(ctx, newer)
	if err != nil {
		t.Fatal(err)
	}
	storetest.Exec(t, db, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, 'future', 0)`)
	db.Close()
	if err := store.CheckBackup(ctx, newer); err == nil || !strings.Contains(err.Error(), "newer than this Atrium") {
		t.Errorf("backup from a newer Atrium: %v", err)
	}
}
