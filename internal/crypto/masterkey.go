// Package crypto manages Atrium's keys and seals secrets at rest.
//
// One master key (ATRIUM_MASTER_KEY or data/master.key) wraps a data key per owner;
// the data keys seal the actual secrets with XChaCha20-Poly1305 and associated data
// that names where the ciphertext belongs, so a sealed value copied to another row
// or another owner does not open.
package crypto

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// KeySize is the length in bytes of the master key and of every data key.
const KeySize = 32

// MasterKeyFile is the name of the key file inside the data directory.
const MasterKeyFile = "master.key"

// DatabaseFile is the name of the database inside the data directory (opened by
// internal/app). A key file is never created beside an existing one.
const DatabaseFile = "atrium.db"

// LoadMasterKey returns the master key.
//
// If fromEnv (the value of ATRIUM_MASTER_KEY) is not empty it must hold 32 bytes,
// written as 64 hex characters or as standard or URL-safe base64 (padded or not);
// the file is then not consulted. Otherwise the key is read from dataDir/master.key,
// which is created with 32 random bytes and mode 0600 when it does not exist; created
// reports that case so the caller can tell the operator to back it up.
//
// Errors are one line and never contain the key. A key file that group or others can
// read is refused rather than used, because it is the secret protecting everything else.
func LoadMasterKey(dataDir, fromEnv string) (key []byte, created bool, err error) {
	if fromEnv != "" {
		key, err := parseEnvKey(fromEnv)
		if err != nil {
			return nil, false, fmt.Errorf("crypto: ATRIUM_MASTER_KEY: %w", err)
		}
		return key, false, nil
	}
	path := filepath.Join(dataDir, MasterKeyFile)
	key, err = readKeyFile(path)
	if err == nil {
		return key, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, err
	}
	// A database without its key file: the key was lost or not copied along. A new key
	// would not open the secrets already sealed, so refuse, and write nothing.
	if _, err := os.Lstat(filepath.Join(dataDir, DatabaseFile)); err == nil {
		return nil, false, fmt.Errorf("crypto: %s is missing but %s holds a database (%s) whose secrets it sealed; restore %s from your backup (or set ATRIUM_MASTER_KEY to the key); to start over with no data, move %s away",
			MasterKeyFile, dataDir, DatabaseFile, MasterKeyFile, DatabaseFile)
	}
	key, created, err = createKeyFile(dataDir, path)
	if err != nil {
		return nil, false, err
	}
	return key, created, nil
}

// LoadMasterKeyFile reads a master key from a file of its own (ATRIUM_MASTER_KEY_FILE,
// e.g. a Docker secret under /run/secrets), written like ATRIUM_MASTER_KEY: 64 hex
// characters or base64, surrounding white space ignored (so a master.key file works
// too). Its mode is not checked: a secret mount is the operator's to protect, and
// Docker mounts them 0444. Errors never contain the key.
func LoadMasterKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("crypto: ATRIUM_MASTER_KEY_FILE: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return nil, fmt.Errorf("crypto: ATRIUM_MASTER_KEY_FILE %s: %w", path, err)
	}
	key, err := parseEnvKey(string(b))
	if err != nil {
		return nil, fmt.Errorf("crypto: ATRIUM_MASTER_KEY_FILE %s: %w", path, err)
	}
	return key, nil
}

// WriteMasterKeyFile writes key as dataDir/master.key (mode 0600), as on first run;
// it refuses to replace an existing file.
func WriteMasterKeyFile(dataDir string, key []byte) error {
	if len(key) != KeySize {
		return fmt.Errorf("crypto: master key must be %d bytes", KeySize)
	}
	path := filepath.Join(dataDir, MasterKeyFile)
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("crypto: %s already exists; refusing to replace a master key", path)
	}
	_, created, err := writeKeyFile(dataDir, path, key)
	if err == nil && !created {
		return fmt.Errorf("crypto: %s already exists; refusing to replace a master key", path)
	}
	return err
}

// parseEnvKey decodes a key given as hex or base64. Its errors describe the shape
// expected, never the value received.
func parseEnvKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if len(s) == 2*KeySize {
		if k, err := hex.DecodeString(s); err == nil {
			return k, nil
		}
	}
	for _, enc := range []*base64.Encoding{
		base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding,
	} {
		if k, err := enc.DecodeString(s); err == nil && len(k) == KeySize {
			return k, nil
		}
	}
	return nil, fmt.Errorf("must be %d bytes written as %d hex characters or as base64 (got %d characters that are neither); generate one with: openssl rand -hex %d",
		KeySize, 2*KeySize, len(s), KeySize)
}

// readKeyFile reads and checks an existing key file. A missing file is returned as
// an error satisfying errors.Is(err, fs.ErrNotExist).
func readKeyFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("crypto: master key file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("crypto: master key file %s is not a regular file", path)
	}
	// Windows has no Unix permission bits; Go reports 0666 there for every file.
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("crypto: master key file %s can be read by group or others (mode %04o); refusing to use it: run chmod 600 %s",
			path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("crypto: master key file: %w", err)
	}
	s := strings.TrimSpace(string(b))
	k, err := hex.DecodeString(s)
	if len(s) != 2*KeySize || err != nil {
		return nil, fmt.Errorf("crypto: master key file %s is malformed: expected %d hex characters (a %d-byte key)",
			path, 2*KeySize, KeySize)
	}
	return k, nil
}

// createKeyFile writes a new random key to path without ever exposing a partial
// file: the key is written and synced to a private temporary file, then hard-linked
// into place, which fails if path already exists (the O_EXCL guarantee). If another
// process won the race, its key is read and returned with created == false.
func createKeyFile(dataDir, path string) (key []byte, created bool, err error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, false, fmt.Errorf("crypto: create data directory: %w", err)
	}
	key, err = randomBytes(KeySize)
	if err != nil {
		return nil, false, err
	}
	return writeKeyFile(dataDir, path, key)
}

// writeKeyFile writes key to path (see createKeyFile); if path exists already, the key
// in it is returned instead, with created == false.
func writeKeyFile(dataDir, path string, key []byte) (_ []byte, created bool, err error) {
	content := []byte(hex.EncodeToString(key) + "\n")

	tmp, err := os.CreateTemp(dataDir, ".master.key.*") // mode 0600
	if err != nil {
		return nil, false, fmt.Errorf("crypto: create master key file: %w", err)
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName)
	if err := tmp.Chmod(0o600); err != nil && runtime.GOOS != "windows" {
		tmp.Close()
		return nil, false, fmt.Errorf("crypto: create master key file: %w", err)
	}
	if _, err := tmp.Write(content); err != nil {
		tmp.Close()
		return nil, false, fmt.Errorf("crypto: write master key file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, false, fmt.Errorf("crypto: write master key file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return nil, false, fmt.Errorf("crypto: write master key file: %w", err)
	}

	err = os.Link(tmpName, path)
	switch {
	case err == nil:
	case errors.Is(err, fs.ErrExist):
		k, err := readKeyFile(path)
		return k, false, err
	default:
		// Some file systems have no hard links: fall back to O_EXCL on the final name.
		if err := writeExclusive(path, content); err != nil {
			if errors.Is(err, fs.ErrExist) {
				k, err := readKeyFile(path)
				return k, false, err
			}
			return nil, false, err
		}
	}
	syncDir(dataDir)
	return key, true, nil
}

func writeExclusive(path string, content []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return err
		}
		return fmt.Errorf("crypto: create master key file: %w", err)
	}
	_, err = f.Write(content)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("crypto: write master key file: %w", err)
	}
	return nil
}

// syncDir makes the new directory entry durable; failure only weakens durability
// after a crash, so it is ignored.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
