package crypto_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"atrium/internal/crypto"
	"atrium/internal/errs"
)

// fakeStore is an in-memory KeyStore.
type fakeStore struct {
	mu   sync.Mutex
	meta map[string][]byte
	keys map[int64][]byte
	puts int

	onMiss func() // called, unlocked, when WrappedKey finds nothing
}

func newFakeStore() *fakeStore {
	return &fakeStore{meta: map[string][]byte{}, keys: map[int64][]byte{}}
}

func (s *fakeStore) Meta(_ context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.meta[key]
	if !ok {
		return nil, errs.E(errs.NotFound, "no meta %q", key)
	}
	return bytes.Clone(v), nil
}

func (s *fakeStore) SetMeta(_ context.Context, key string, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.meta[key] = bytes.Clone(value)
	return nil
}

func (s *fakeStore) WrappedKey(_ context.Context, owner int64) ([]byte, error) {
	s.mu.Lock()
	v, ok := s.keys[owner]
	s.mu.Unlock()
	if !ok {
		if s.onMiss != nil {
			s.onMiss()
		}
		return nil, errs.E(errs.NotFound, "no key for %d", owner)
	}
	return bytes.Clone(v), nil
}

func (s *fakeStore) PutWrappedKey(_ context.Context, owner int64, wrapped []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.puts++
	if _, ok := s.keys[owner]; ok {
		return errs.E(errs.Conflict, "key exists for %d", owner)
	}
	s.keys[owner] = bytes.Clone(wrapped)
	return nil
}

func masterKey(b byte) []byte { return bytes.Repeat([]byte{b}, crypto.KeySize) }

func mustKeyring(t *testing.T, master []byte, ks crypto.KeyStore) *crypto.Keyring {
	t.Helper()
	k, err := crypto.NewKeyring(context.Background(), master, ks)
	if err != nil {
		t.Fatalf("NewKeyring: %v", err)
	}
	return k
}

func TestSealOpenRoundTrip(t *testing.T) {
	ctx := context.Background()
	k := mustKeyring(t, masterKey(1), newFakeStore())
	ad := crypto.AD("provider", "12", "api_key")
	for _, pt := range [][]byte{nil, []byte("x"), []byte("sk-secret-api-key-1234567890"), bytes.Repeat([]byte("z"), 1<<16)} {
		sealed, err := k.Seal(ctx, 0, pt, ad)
		if err != nil {
			t.Fatal(err)
		}
		if len(pt) >= 8 && bytes.Contains(sealed, pt) {
			t.Fatal("sealed value contains the plaintext")
		}
		got, err := k.Open(ctx, 0, sealed, ad)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		if !bytes.Equal(got, pt) {
			t.Fatalf("round trip: got %d bytes, want %d", len(got), len(pt))
		}
	}
	a, _ := k.Seal(ctx, 0, []byte("same"), ad)
	b, _ := k.Seal(ctx, 0, []byte("same"), ad)
	if bytes.Equal(a, b) {
		t.Fatal("two seals of the same plaintext are equal; nonce not random")
	}
}

func TestOpenTampered(t *testing.T) {
	ctx := context.Background()
	k := mustKeyring(t, masterKey(1), newFakeStore())
	ad := crypto.AD("memory", "7")
	sealed, err := k.Seal(ctx, 5, []byte("my secret memory"), ad)
	if err != nil {
		t.Fatal(err)
	}
	for i := range sealed {
		bad := bytes.Clone(sealed)
		bad[i] ^= 0x01
		if _, err := k.Open(ctx, 5, bad, ad); err == nil {
			t.Fatalf("flipping byte %d: Open succeeded", i)
		}
	}
	if _, err := k.Open(ctx, 5, sealed[:len(sealed)-1], ad); err == nil {
		t.Fatal("truncated: Open succeeded")
	}
	if _, err := k.Open(ctx, 5, nil, ad); err == nil {
		t.Fatal("empty: Open succeeded")
	}
}

func TestOpenWrongADOrOwner(t *testing.T) {
	ctx := context.Background()
	k := mustKeyring(t, masterKey(1), newFakeStore())
	sealed, err := k.Seal(ctx, 1, []byte("token"), crypto.AD("mcp", "3", "header"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = k.Open(ctx, 1, sealed, crypto.AD("mcp", "4", "header"))
	if !errors.Is(err, crypto.ErrOpen) {
		t.Fatalf("wrong AD: got %v, want ErrOpen", err)
	}
	if err.Error() != "crypto: open: message authentication failed" {
		t.Fatalf("message: %q", err)
	}
	if _, err := k.Open(ctx, 2, sealed, crypto.AD("mcp", "3", "header")); !errors.Is(err, crypto.ErrOpen) {
		t.Fatalf("other owner: got %v, want ErrOpen", err)
	}
}

func TestADUnambiguous(t *testing.T) {
	if bytes.Equal(crypto.AD("a", "bc"), crypto.AD("ab", "c")) {
		t.Fatal(`AD("a","bc") == AD("ab","c")`)
	}
	if bytes.Equal(crypto.AD("a", ""), crypto.AD("a")) {
		t.Fatal(`AD("a","") == AD("a")`)
	}
	if !bytes.Equal(crypto.AD("x", "1"), crypto.AD("x", "1")) {
		t.Fatal("AD not deterministic")
	}
}

func TestWrongMasterKey(t *testing.T) {
	ctx := context.Background()
	ks := newFakeStore()
	k := mustKeyring(t, masterKey(1), ks)
	if _, err := k.Seal(ctx, 0, []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	_, err := crypto.NewKeyring(ctx, masterKey(2), ks)
	if !errors.Is(err, crypto.ErrMasterKeyMismatch) {
		t.Fatalf("got %v, want ErrMasterKeyMismatch", err)
	}
	for _, want := range []string{"does not match", "ATRIUM_MASTER_KEY", "master.key"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	if _, err := crypto.NewKeyring(ctx, masterKey(1)[:16], ks); err == nil {
		t.Fatal("short master key accepted")
	}
}

func TestDataKeysPerOwnerAndPersistent(t *testing.T) {
	ctx := context.Background()
	ks := newFakeStore()
	k1 := mustKeyring(t, masterKey(9), ks)
	ad := crypto.AD("secret")
	s0, _ := k1.Seal(ctx, 0, []byte("instance"), ad)
	s1, _ := k1.Seal(ctx, 1, []byte("alice"), ad)
	s2, _ := k1.Seal(ctx, 2, []byte("bob"), ad)

	if len(ks.keys) != 3 {
		t.Fatalf("stored %d wrapped keys, want 3", len(ks.keys))
	}
	if bytes.Equal(ks.keys[1], ks.keys[2]) {
		t.Fatal("owners share a wrapped key")
	}
	if _, err := k1.Open(ctx, 2, s1, ad); err == nil {
		t.Fatal("owner 2 opened owner 1's data")
	}

	k2 := mustKeyring(t, masterKey(9), ks) // a restart: empty cache, same store
	for owner, c := range map[int64]struct {
		sealed []byte
		want   string
	}{0: {s0, "instance"}, 1: {s1, "alice"}, 2: {s2, "bob"}} {
		got, err := k2.Open(ctx, owner, c.sealed, ad)
		if err != nil || string(got) != c.want {
			t.Fatalf("owner %d after restart: %q, %v", owner, got, err)
		}
	}

	// A wrapped key moved to another owner's row must not unwrap.
	ks.keys[3] = ks.keys[1]
	if _, err := k2.Seal(ctx, 3, []byte("x"), ad); err == nil {
		t.Fatal("owner 1's wrapped key unwrapped as owner 3")
	}
}

func TestConcurrentFirstUse(t *testing.T) {
	ctx := context.Background()
	ks := newFakeStore()
	// Several keyrings on one store stand for several processes; each also races itself.
	rings := []*crypto.Keyring{mustKeyring(t, masterKey(3), ks), mustKeyring(t, masterKey(3), ks)}
	ad := crypto.AD("race")
	// Hold every first lookup until all 8 have missed, so all 8 generate a key and
	// race to store it: 7 must lose, re-read and adopt the winner's.
	var allMissed sync.WaitGroup
	allMissed.Add(8)
	ks.onMiss = func() { allMissed.Done(); allMissed.Wait() }
	sealed := make([][]byte, 8)
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			s, err := rings[i%2].Seal(ctx, 42, []byte{byte(i)}, ad)
			if err != nil {
				errc <- err
				return
			}
			sealed[i] = s
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	ks.onMiss = nil
	if ks.puts != 8 {
		t.Fatalf("%d PutWrappedKey calls, want 8 racing ones", ks.puts)
	}
	fresh := mustKeyring(t, masterKey(3), ks)
	for i, s := range sealed {
		for _, k := range append(rings, fresh) {
			got, err := k.Open(ctx, 42, s, ad)
			if err != nil || !bytes.Equal(got, []byte{byte(i)}) {
				t.Fatalf("seal %d: got %v, %v", i, got, err)
			}
		}
	}
	if len(ks.keys) != 1 {
		t.Fatalf("%d wrapped keys stored", len(ks.keys))
	}
}

func TestHint(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"short", "••••"},
		{"elevenchars", "••••"},
		{"sk-abcdefgh1234", "••••1234"},
		{"ключключключ", "••••ключ"},
	} {
		if got := crypto.Hint(c.in); got != c.want {
			t.Errorf("Hint(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestLoadMasterKeyCreateAndReload(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	key, created, err := crypto.LoadMasterKey(dir, "")
	if err != nil || !created || len(key) != crypto.KeySize {
		t.Fatalf("create: len %d, created %v, %v", len(key), created, err)
	}
	path := filepath.Join(dir, crypto.MasterKeyFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %04o, want 0600", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("data dir has %d entries, want only the key file", len(entries))
	}
	again, created, err := crypto.LoadMasterKey(dir, "")
	if err != nil || created || !bytes.Equal(again, key) {
		t.Fatalf("reload: same %v, created %v, %v", bytes.Equal(again, key), created, err)
	}
}

func TestLoadMasterKeyFromEnv(t *testing.T) {
	want := make([]byte, crypto.KeySize)
	for i := range want {
		want[i] = byte(i*7 + 250) // includes bytes that differ between std and URL base64
	}
	dir := t.TempDir()
	for name, env := range map[string]string{
		"hex":          hex.EncodeToString(want),
		"hex upper":    strings.ToUpper(hex.EncodeToString(want)),
		"std base64":   base64.StdEncoding.EncodeToString(want),
		"raw std":      base64.RawStdEncoding.EncodeToString(want),
		"url base64":   base64.URLEncoding.EncodeToString(want),
		"raw url":      base64.RawURLEncoding.EncodeToString(want),
		"with newline": hex.EncodeToString(want) + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			got, created, err := crypto.LoadMasterKey(dir, env)
			if err != nil || created || !bytes.Equal(got, want) {
				t.Fatalf("got %x, created %v, %v", got, created, err)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, crypto.MasterKeyFile)); err == nil {
		t.Fatal("a key file was created although the key came from the environment")
	}
}

func TestLoadMasterKeyBadEnv(t *testing.T) {
	for name, env := range map[string]string{
		"short hex":      "deadbeefcafebabe0123456789abcdef",
		"long hex":       strings.Repeat("ab", 33),
		"not hex":        strings.Repeat("zq", 32),
		"16-byte base64": base64.StdEncoding.EncodeToString([]byte("sixteen byte key")),
		"passphrase":     "correct horse battery staple",
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := crypto.LoadMasterKey(t.TempDir(), env)
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			if strings.Contains(msg, env) || strings.Contains(msg, "\n") {
				t.Fatalf("error echoes the value or is not one line: %q", msg)
			}
			if !strings.Contains(msg, "ATRIUM_MASTER_KEY") {
				t.Fatalf("error does not name the variable: %q", msg)
			}
		})
	}
}

func TestLoadMasterKeyBadFile(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permissions")
	}
	good := hex.EncodeToString(masterKey(5)) + "\n"
	for name, c := range map[string]struct {
		content string
		mode    os.FileMode
		want    string
	}{
		"group readable": {good, 0o640, "chmod 600"},
		"world readable": {good, 0o604, "chmod 600"},
		"too short":      {"abcd\n", 0o600, "malformed"},
		"not hex":        {strings.Repeat("g", 64), 0o600, "malformed"},
		"empty":          {"", 0o600, "malformed"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, crypto.MasterKeyFile)
			if err := os.WriteFile(path, []byte(c.content), c.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, c.mode); err != nil { // umask may have cleared bits
				t.Fatal(err)
			}
			_, _, err := crypto.LoadMasterKey(dir, "")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
			if strings.Contains(err.Error(), strings.TrimSpace(good)) {
				t.Fatal("error echoes the key")
			}
			b, _ := os.ReadFile(path)
			if string(b) != c.content {
				t.Fatal("the bad key file was modified")
			}
		})
	}
}

func TestDerive(t *testing.T) {
	ctx := context.Background()
	ks := newFakeStore()
	k := mustKeyring(t, masterKey(4), ks)
	a1, err := k.Derive(ctx, 1, "memory/index")
	if err != nil || len(a1) != crypto.KeySize {
		t.Fatalf("Derive = %x, %v", a1, err)
	}
	a2, _ := k.Derive(ctx, 1, "memory/vector")
	b1, _ := k.Derive(ctx, 2, "memory/index")
	if bytes.Equal(a1, a2) || bytes.Equal(a1, b1) {
		t.Fatal("derived keys of different purposes or owners are equal")
	}
	// Stable across a restart: the same stored data key gives the same keys.
	again, _ := mustKeyring(t, masterKey(4), ks).Derive(ctx, 1, "memory/index")
	if !bytes.Equal(a1, again) {
		t.Fatal("derived key changed after a restart")
	}
	if _, err := k.Derive(ctx, 1, ""); err == nil {
		t.Fatal("empty purpose accepted")
	}
}

// A database whose key file went missing must not get a new, wrong key: start-up is
// refused and nothing is written (issue 9, item 14).
func TestLoadMasterKeyMissingBesideDatabase(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, crypto.DatabaseFile), []byte("SQLite format 3\x00"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := crypto.LoadMasterKey(dir, "")
	if err == nil || !strings.Contains(err.Error(), "restore master.key from your backup") {
		t.Fatalf("err = %v, want a refusal that says to restore the key", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != crypto.DatabaseFile {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("data dir holds %v after the refusal, want only %s", names, crypto.DatabaseFile)
	}
	// The key given in the environment still works: the file is not consulted then.
	if _, _, err := crypto.LoadMasterKey(dir, strings.Repeat("ab", crypto.KeySize)); err != nil {
		t.Fatalf("with ATRIUM_MASTER_KEY: %v", err)
	}
}

// ATRIUM_MASTER_KEY_FILE: a Docker secret holds the key as hex or base64 (a master.key
// file too); a bad one is refused without showing its content; nothing is written.
func TestLoadMasterKeyFile(t *testing.T) {
	want := make([]byte, crypto.KeySize)
	for i := range want {
		want[i] = byte(i*11 + 3)
	}
	dir := t.TempDir()
	for name, content := range map[string]string{
		"hex with newline": hex.EncodeToString(want) + "\n",
		"base64":           base64.StdEncoding.EncodeToString(want),
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		if err := os.WriteFile(path, []byte(content), 0o444); err != nil { // Docker mounts secrets 0444
			t.Fatal(err)
		}
		got, err := crypto.LoadMasterKeyFile(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: got %x, %v", name, got, err)
		}
	}
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("not-a-key-but-secret-text"), 0o600)
	if _, err := crypto.LoadMasterKeyFile(bad); err == nil || strings.Contains(err.Error(), "secret-text") ||
		!strings.Contains(err.Error(), "ATRIUM_MASTER_KEY_FILE") {
		t.Errorf("bad key file: %v", err)
	}
	if _, err := crypto.LoadMasterKeyFile(filepath.Join(dir, "missing")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing key file: %v", err)
	}

	// WriteMasterKeyFile (restore) writes 0600 and never replaces a key.
	data := t.TempDir()
	if err := crypto.WriteMasterKeyFile(data, want); err != nil {
		t.Fatal(err)
	}
	got, created, err := crypto.LoadMasterKey(data, "")
	if err != nil || created || !bytes.Equal(got, want) {
		t.Fatalf("reading the written key: %x %v %v", got, created, err)
	}
	if err := crypto.WriteMasterKeyFile(data, make([]byte, crypto.KeySize)); err == nil {
		t.Error("WriteMasterKeyFile replaced an existing key")
	}
	if got, _, _ := crypto.LoadMasterKey(data, ""); !bytes.Equal(got, want) {
		t.Error("the existing key changed")
	}
}
