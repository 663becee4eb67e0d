package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"atrium/internal/backup"
	"atrium/internal/crypto"
)

// backupCommand is `atrium backup [-data DIR] PATH|-` and
// `atrium restore [-data DIR] [-key FILE] PATH`. Both work in the scratch image (no
// shell): `docker exec atrium /atrium backup /data/backup.db`.
func backupCommand(ctx context.Context, name string, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("atrium "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := getenv("ATRIUM_DATA")
	if def == "" {
		def = "./atrium-data"
	}
	dataDir := fs.String("data", def, "data directory (default $ATRIUM_DATA, else ./atrium-data)")
	var keyFile *string
	if name == "restore" {
		keyFile = fs.String("key", "", "the backed-up master.key to install beside the database (optional: or set ATRIUM_MASTER_KEY_FILE / ATRIUM_MASTER_KEY when starting)")
		fs.Usage = func() {
			fmt.Fprintln(stderr, "usage: atrium restore [-data DIR] [-key MASTER_KEY_FILE] BACKUP_FILE\n\nPuts a file written by `atrium backup` into a new, empty data directory.")
			fs.PrintDefaults()
		}
	} else {
		fs.Usage = func() {
			fmt.Fprintln(stderr, "usage: atrium backup [-data DIR] BACKUP_FILE|-\n\nWrites a consistent copy of the database (mode 0600; never overwrites; - = standard output), also while Atrium runs.")
			fs.PrintDefaults()
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return configError{fmt.Errorf("%s: %w", name, err)}
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return configError{fmt.Errorf("%s: want one file name, got %d arguments", name, fs.NArg())}
	}
	path := fs.Arg(0)

	if name == "backup" {
		report := stdout
		var n int64
		var err error
		if path == "-" {
			// To standard output, for `docker exec atrium /atrium backup - > file`: no
			// copy is left in the volume (the image has no rm) and the file on the
			// host is the host user's.
			report, path = stderr, "standard output"
			n, err = backupToWriter(ctx, *dataDir, stdout)
		} else {
			n, err = backup.Backup(ctx, *dataDir, path)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(report, "wrote %s (%d bytes), a copy of %s\n", path, n, filepath.Join(*dataDir, crypto.DatabaseFile))
		fmt.Fprintf(report, "It does not hold the master key: keep a copy of %s (or of your ATRIUM_MASTER_KEY) apart from it; without the key the sealed secrets and memories in the backup cannot be read.\n",
			filepath.Join(*dataDir, crypto.MasterKeyFile))
		return nil
	}
	if err := backup.Restore(ctx, path, *keyFile, *dataDir); err != nil {
		return ownershipHint(err, *dataDir)
	}
	fmt.Fprintf(stdout, "restored %s into %s\n", path, filepath.Join(*dataDir, crypto.DatabaseFile))
	if *keyFile == "" {
		fmt.Fprintf(stdout, "No -key given: before starting, put the master key of the backed-up instance in %s (mode 0600), or set ATRIUM_MASTER_KEY_FILE.\n",
			filepath.Join(*dataDir, crypto.MasterKeyFile))
	}
	return nil
}

// backupToWriter writes the backup to a private temporary directory, then to w.
func backupToWriter(ctx context.Context, dataDir string, w io.Writer) (int64, error) {
	dir, err := os.MkdirTemp("", "atrium-backup-")
	if err != nil {
		return 0, fmt.Errorf("backup: %w", err)
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, crypto.DatabaseFile)
	if _, err := backup.Backup(ctx, dataDir, tmp); err != nil {
		return 0, err
	}
	f, err := os.Open(tmp)
	if err != nil {
		return 0, fmt.Errorf("backup: %w", err)
	}
	defer f.Close()
	n, err := io.Copy(w, f)
	if err != nil {
		return n, fmt.Errorf("backup: write to standard output: %w", err)
	}
	return n, nil
}

// ownershipHint adds what to do to a "permission denied" on the data directory: the
// usual cause is files copied in as root (docker cp restores as root) while Atrium
// runs as another user (uid 65532 in the image).
func ownershipHint(err error, dataDir string) error {
	var pe *fs.PathError
	if !errors.Is(err, fs.ErrPermission) || !errors.As(err, &pe) || !inDir(pe.Path, dataDir) {
		return err // e.g. an ATRIUM_MASTER_KEY_FILE elsewhere: its own error says which file
	}
	return fmt.Errorf("%w (every file in the data directory %s must belong to the user Atrium runs as: run chown -R %d:%d %s; for a Docker volume: docker run --rm -v VOLUME:/data busybox chown -R %d:%d /data, see docs/docker.md)",
		err, dataDir, os.Getuid(), os.Getgid(), dataDir, os.Getuid(), os.Getgid())
}

// inDir reports whether path is dir or inside it.
func inDir(path, dir string) bool {
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
