package crypto

import (
	"context"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"golang.org/x/crypto/chacha20poly1305"

	"atrium/internal/errs"
)

// KeyStore is the persistence the Keyring needs; the store package implements it.
type KeyStore interface {
	// Meta returns a value from the instance metadata; errs.NotFound when absent.
	Meta(ctx context.Context, key string) ([]byte, error)
	// SetMeta creates or replaces a metadata value.
	SetMeta(ctx context.Context, key string, value []byte) error
	// WrappedKey returns the wrapped data key of owner; errs.NotFound when absent.
	WrappedKey(ctx context.Context, owner int64) ([]byte, error)
	// PutWrappedKey stores the wrapped data key of owner; errs.Conflict if one exists.
	PutWrappedKey(ctx context.Context, owner int64, wrapped []byte) error
}

// InstanceOwner is the owner id of secrets that belong to the instance itself rather
// than to a user, such as provider API keys.
const InstanceOwner int64 = 0

// MetaMasterKeyCheck is the metadata key of the value that proves which master key
// a database was created with.
const MetaMasterKeyCheck = "master_key_check"

// version is the first byte of everything Seal produces, so the format can change.
const version byte = 1

const (
	nonceSize = chacha20poly1305.NonceSizeX
	overhead  = 1 + nonceSize + chacha20poly1305.Overhead
)

var checkPlaintext = []byte("atrium master key check v1")

// ErrMasterKeyMismatch is returned by NewKeyring when the master key cannot open the
// check value stored in the database.
var ErrMasterKeyMismatch = errors.New("crypto: the master key does not match the one this data directory was created with; " +
	"give the original key where this start read it from (ATRIUM_MASTER_KEY, the file ATRIUM_MASTER_KEY_FILE names, or data/master.key) — secrets sealed with it cannot be read otherwise")

// ErrOpen is returned by Open for a wrong key, wrong associated data or altered bytes.
var ErrOpen = errors.New("crypto: open: message authentication failed")

// Keyring seals and opens data with per-owner data keys that are wrapped by the
// master key and stored in a KeyStore. It is safe for concurrent use.
type Keyring struct {
	master cipher.AEAD
	ks     KeyStore

	mu   sync.RWMutex
	keys map[int64]cipher.AEAD // unwrapped data keys, by owner
	prks map[int64][]byte      // HKDF pseudo-random keys of the data keys, for Derive
}

// NewKeyring checks master against the check value in ks and returns a Keyring. On a
// database without a check value (a fresh one) it writes one. If the check value does
// not open with master it returns an error wrapping ErrMasterKeyMismatch; it never
// re-keys on its own.
func NewKeyring(ctx context.Context, master []byte, ks KeyStore) (*Keyring, error) {
	if len(master) != KeySize {
		return nil, fmt.Errorf("crypto: master key must be %d bytes, got %d", KeySize, len(master))
	}
	aead, err := chacha20poly1305.NewX(master)
	if err != nil {
		return nil, fmt.Errorf("crypto: master key: %w", err)
	}
	k := &Keyring{master: aead, ks: ks, keys: make(map[int64]cipher.AEAD), prks: make(map[int64][]byte)}
	checkAD := AD("atrium", MetaMasterKeyCheck)

	stored, err := ks.Meta(ctx, MetaMasterKeyCheck)
	if errs.Is(err, errs.NotFound) {
		sealed, serr := seal(aead, checkPlaintext, checkAD)
		if serr != nil {
			return nil, serr
		}
		if err := ks.SetMeta(ctx, MetaMasterKeyCheck, sealed); err != nil {
			return nil, fmt.Errorf("crypto: store master key check: %w", err)
		}
		// Read it back: if another process initialised the database at the same
		// moment with a different key, one of the two fails here instead of later.
		stored, err = ks.Meta(ctx, MetaMasterKeyCheck)
	}
	if err != nil {
		return nil, fmt.Errorf("crypto: read master key check: %w", err)
	}
	pt, err := open(aead, stored, checkAD)
	if err != nil || string(pt) != string(checkPlaintext) {
		return nil, ErrMasterKeyMismatch
	}
	return k, nil
}

// Prepare loads owner's data key, creating it if it does not exist yet. Creating it is a
// database write of its own, so a caller about to Seal inside a database transaction
// calls Prepare first (the write would otherwise wait on the transaction's lock).
func (k *Keyring) Prepare(ctx context.Context, owner int64) error {
	_, err := k.dataKey(ctx, owner)
	return err
}

// Seal encrypts plaintext for owner, binding it to ad (build ad with AD). The owner's
// data key is created on first use. The result is version || nonce || ciphertext.
func (k *Keyring) Seal(ctx context.Context, owner int64, plaintext, ad []byte) ([]byte, error) {
	aead, err := k.dataKey(ctx, owner)
	if err != nil {
		return nil, err
	}
	return seal(aead, plaintext, ad)
}

// Open decrypts what Seal produced for the same owner and ad. A wrong owner, wrong ad
// or altered bytes return ErrOpen (or a "crypto: open:" error for a malformed value).
func (k *Keyring) Open(ctx context.Context, owner int64, sealed, ad []byte) ([]byte, error) {
	aead, err := k.dataKey(ctx, owner)
	if err != nil {
		return nil, err
	}
	return open(aead, sealed, ad)
}

// Forget drops owner's unwrapped data key from memory, after the store destroyed the
// wrapped one (a deleted user): from then on nothing sealed for owner opens, and no
// new key is made for them (the store refuses a key for a user that does not exist).
// The bytes are left to the garbage collector rather than cleared, as a Derive
// running at the same moment may still be reading them.
func (k *Keyring) Forget(owner int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.keys, owner)
	delete(k.prks, owner)
}

// deriveSalt separates Derive's keys from any other use of the data key.
var deriveSalt = []byte("atrium derive v1")

// Derive returns a 32-byte key for purpose (e.g. "memory/index") derived from
// owner's data key with HKDF-SHA256, creating the data key on first use. Keys
// for different purposes or owners are independent; the data key itself never
// leaves the Keyring, and destroying it destroys every derived key too.
func (k *Keyring) Derive(ctx context.Context, owner int64, purpose string) ([]byte, error) {
	if purpose == "" {
		return nil, errors.New("crypto: derive: empty purpose")
	}
	if _, err := k.dataKey(ctx, owner); err != nil {
		return nil, err
	}
	k.mu.RLock()
	prk := k.prks[owner]
	k.mu.RUnlock()
	key, err := hkdf.Expand(sha256.New, prk, purpose, KeySize)
	if err != nil {
		return nil, fmt.Errorf("crypto: derive: %w", err)
	}
	return key, nil
}

// dataKey returns owner's data key, loading or creating it on first use. Concurrent
// first uses (in this process or another) converge on the key that reached the store
// first: a loser of PutWrappedKey re-reads the winner's key.
func (k *Keyring) dataKey(ctx context.Context, owner int64) (cipher.AEAD, error) {
	k.mu.RLock()
	aead, ok := k.keys[owner]
	k.mu.RUnlock()
	if ok {
		return aead, nil
	}

	raw, err := k.loadOrCreate(ctx, owner)
	if err != nil {
		return nil, err
	}
	aead, err = chacha20poly1305.NewX(raw)
	if err != nil {
		clear(raw)
		return nil, fmt.Errorf("crypto: data key of owner %d: %w", owner, err)
	}
	prk, err := hkdf.Extract(sha256.New, raw, deriveSalt)
	clear(raw)
	if err != nil {
		return nil, fmt.Errorf("crypto: data key of owner %d: %w", owner, err)
	}

	k.mu.Lock()
	defer k.mu.Unlock()
	if cached, ok := k.keys[owner]; ok {
		return cached, nil // the same stored key, unwrapped by a concurrent caller
	}
	k.keys[owner] = aead
	k.prks[owner] = prk
	return aead, nil
}

func (k *Keyring) loadOrCreate(ctx context.Context, owner int64) ([]byte, error) {
	wrapped, err := k.ks.WrappedKey(ctx, owner)
	if err == nil {
		return k.unwrap(owner, wrapped)
	}
	if !errs.Is(err, errs.NotFound) {
		return nil, fmt.Errorf("crypto: read data key of owner %d: %w", owner, err)
	}

	raw, err := randomBytes(KeySize)
	if err != nil {
		return nil, err
	}
	wrapped, err = seal(k.master, raw, wrapAD(owner))
	if err != nil {
		return nil, err
	}
	err = k.ks.PutWrappedKey(ctx, owner, wrapped)
	if err == nil {
		return raw, nil
	}
	clear(raw)
	if !errs.Is(err, errs.Conflict) {
		return nil, fmt.Errorf("crypto: store data key of owner %d: %w", owner, err)
	}
	wrapped, err = k.ks.WrappedKey(ctx, owner)
	if err != nil {
		return nil, fmt.Errorf("crypto: read data key of owner %d: %w", owner, err)
	}
	return k.unwrap(owner, wrapped)
}

func (k *Keyring) unwrap(owner int64, wrapped []byte) ([]byte, error) {
	raw, err := open(k.master, wrapped, wrapAD(owner))
	if err != nil {
		return nil, fmt.Errorf("crypto: unwrap data key of owner %d: %w", owner, err)
	}
	if len(raw) != KeySize {
		return nil, fmt.Errorf("crypto: unwrap data key of owner %d: wrong length %d", owner, len(raw))
	}
	return raw, nil
}

// wrapAD names the owner, so a wrapped key moved to another owner's row does not open.
func wrapAD(owner int64) []byte {
	return AD("atrium", "data_key", strconv.FormatInt(owner, 10))
}

func seal(aead cipher.AEAD, plaintext, ad []byte) ([]byte, error) {
	out := make([]byte, 1+nonceSize, overhead+len(plaintext))
	out[0] = version
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, fmt.Errorf("crypto: seal: nonce: %w", err)
	}
	return aead.Seal(out, out[1:1+nonceSize], plaintext, ad), nil
}

func open(aead cipher.AEAD, sealed, ad []byte) ([]byte, error) {
	if len(sealed) < overhead {
		return nil, errors.New("crypto: open: sealed value too short")
	}
	if sealed[0] != version {
		return nil, fmt.Errorf("crypto: open: unknown format version %d", sealed[0])
	}
	pt, err := aead.Open(nil, sealed[1:1+nonceSize], sealed[1+nonceSize:], ad)
	if err != nil {
		return nil, ErrOpen
	}
	return pt, nil
}

func randomBytes(n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("crypto: random: %w", err)
	}
	return b, nil
}

// AD builds associated data from parts without ambiguity: each part is preceded by
// its length as 4 big-endian bytes, so AD("a", "bc") differs from AD("ab", "c").
// Example: AD("provider", "12", "api_key").
func AD(parts ...string) []byte {
	n := 0
	for _, p := range parts {
		n += 4 + len(p)
	}
	b := make([]byte, 0, n)
	for _, p := range parts {
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	return b
}

// Hint returns what may be shown back of a secret: "" for an empty one, "••••" and
// the last 4 characters for one of 12 characters or more, else "••••". It never
// returns the whole value.
func Hint(secret string) string {
	if secret == "" {
		return ""
	}
	r := []rune(secret)
	if len(r) >= 12 {
		return "••••" + string(r[len(r)-4:])
	}
	return "••••"
}
