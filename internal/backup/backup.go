// Package backup is `atrium backup` and `atrium restore`: an online copy of the database
// of a data directory, and putting such a copy (and the master key) into a fresh one.
// The SQL is in internal/store (Backup, CheckBackup).
package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"atrium/internal/crypto"
	"atrium/internal/store"
)

// Backup copies dataDir's database to dst (which must not exist) while Atrium may be
// running on it, and returns the size written. The master key is not in the copy.
func Backup(ctx context.Context, dataDir, dst string) (int64, error) {
	return store.Backup(ctx, filepath.Join(dataDir, crypto.DatabaseFile), dst)
}

// Restore makes src (a file written by Backup) the database of dataDir, and keyFile,
// when not empty, its master.key. It refuses a data directory that already has a
// database (or its -wal/-shm files, which SQLite would apply to the restored copy) or a
// key file, and a backup that is damaged or from a newer Atrium. Files are written
// 0600 through a temporary name, so a failure leaves no half-written database. Run as
// root (e.g. `docker run --user 0`), it gives the new files the owner of dataDir, so
// that Atrium, running as that user, can open them.
func Restore(ctx context.Context, src, keyFile, dataDir string) error {
	if err := store.CheckBackup(ctx, src); err != nil {
		return err
	}
	var key []byte
	if keyFile != "" {
		k, err := crypto.LoadMasterKeyFile(keyFile)
		if err != nil {
			return err
		}
		key = k
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("restore: data directory: %w", err)
	}
	db := filepath.Join(dataDir, crypto.DatabaseFile)
	for _, p := range []string{db, db + "-wal", db + "-shm"} {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("restore: %s already exists; restore into a new, empty data directory (stop Atrium and move the old one away first)", p)
		}
	}
	keyPath := filepath.Join(dataDir, crypto.MasterKeyFile)
	if key != nil {
		if _, err := os.Lstat(keyPath); err == nil {
			return fmt.Errorf("restore: %s already exists; refusing to replace a master key", keyPath)
		}
	}
	dirInfo, err := os.Stat(dataDir)
	if err != nil {
		return fmt.Errorf("restore: data directory: %w", err)
	}

	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	defer in.Close()
	if err := writeNew(dataDir, db, in, dirInfo); err != nil {
		return err
	}
	if key != nil {
		if err := crypto.WriteMasterKeyFile(dataDir, key); err != nil {
			os.Remove(db) // the database alone would be refused at start-up anyway; leave the directory as found
			return err
		}
		chownLike(keyPath, dirInfo)
	}
	return nil
}

// writeNew copies r to a new file path (0600) via a temporary file in dir and a hard
// link, which fails rather than replace a file that appeared meanwhile.
func writeNew(dir, path string, r io.Reader, owner fs.FileInfo) error {
	tmp, err := os.CreateTemp(dir, ".atrium-restore-*")
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	name := tmp.Name()
	defer os.Remove(name)
	err = tmp.Chmod(0o600)
	if err == nil {
		_, err = io.Copy(tmp, r)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("restore: write %s: %w", path, err)
	}
	chownLike(name, owner)
	if err := os.Link(name, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("restore: %s already exists", path)
		}
		return fmt.Errorf("restore: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
