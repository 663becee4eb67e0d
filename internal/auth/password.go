// Package auth is logging in: password hashing and rules, login tokens, CSRF tokens,
// a login rate limiter, and Logins, which combines them with the store. The web layer
// keeps only HTTP: cookies, redirects, CSRF checks and rendering.
package auth

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"unicode/utf8"

	"golang.org/x/crypto/argon2"

	"atrium/internal/errs"
)

// Argon2id parameters for new hashes: the OWASP minimum (19 MiB, 2 passes, 1 lane).
// They are written into every hash, so raising them later keeps old hashes valid.
const (
	argonMemory  = 19 * 1024 // KiB
	argonTime    = 2
	argonThreads = 1
	saltLen      = 16
	hashLen      = 32
)

// Limits on what VerifyPassword accepts from a stored hash, so a corrupt or hostile
// row cannot make a login allocate gigabytes or spin for minutes.
const (
	maxMemory  = 1 << 20 // KiB (1 GiB)
	maxTime    = 16
	maxThreads = 16
)

// Password length limits, enforced by ValidatePassword.
const (
	MinPasswordChars = 8
	MaxPasswordBytes = 256
)

// ErrMalformedHash is returned by VerifyPassword for a hash it cannot parse.
var ErrMalformedHash = errors.New("auth: malformed password hash")

var b64 = base64.RawStdEncoding // PHC strings use unpadded standard base64

// HashPassword returns an argon2id hash of pw in PHC form:
// $argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>.
func HashPassword(pw string) (string, error) {
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("auth: hash password: %w", err)
	}
	sum := idKey([]byte(pw), salt, argonTime, argonMemory, argonThreads, hashLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s",
		argon2.Version, argonMemory, argonTime, argonThreads, b64.EncodeToString(salt), b64.EncodeToString(sum)), nil
}

// VerifyPassword reports whether pw matches encoded, a hash from HashPassword (with
// any parameters). The comparison is constant-time. A hash it cannot parse, or
// whose parameters are out of bounds, returns false and an error wrapping
// ErrMalformedHash.
func VerifyPassword(encoded, pw string) (bool, error) {
	p, err := parseHash(encoded)
	if err != nil {
		return false, err
	}
	sum := idKey([]byte(pw), p.salt, p.time, p.memory, p.threads, uint32(len(p.hash)))
	return subtle.ConstantTimeCompare(sum, p.hash) == 1, nil
}

// NeedsRehash reports whether encoded was made with parameters other than the
// current ones, so the caller can store a fresh hash after a successful login.
func NeedsRehash(encoded string) bool {
	p, err := parseHash(encoded)
	return err != nil || p.memory != argonMemory || p.time != argonTime ||
		p.threads != argonThreads || len(p.hash) != hashLen
}

type params struct {
	memory, time uint32
	threads      uint8
	salt, hash   []byte
}

func parseHash(encoded string) (params, error) {
	var p params
	bad := func(why string) (params, error) { return params{}, fmt.Errorf("%w: %s", ErrMalformedHash, why) }

	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[0] != "" {
		return bad("wrong number of fields")
	}
	if parts[1] != "argon2id" {
		return bad("not argon2id")
	}
	if parts[2] != fmt.Sprintf("v=%d", argon2.Version) {
		return bad("unsupported version")
	}
	var threads uint32
	n, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.memory, &p.time, &threads)
	if err != nil || n != 3 || parts[3] != fmt.Sprintf("m=%d,t=%d,p=%d", p.memory, p.time, threads) {
		return bad("bad parameters")
	}
	if threads < 1 || threads > maxThreads || p.time < 1 || p.time > maxTime ||
		p.memory < 8*threads || p.memory > maxMemory {
		return bad("parameters out of range")
	}
	p.threads = uint8(threads)
	if p.salt, err = b64.DecodeString(parts[4]); err != nil || len(p.salt) < 8 {
		return bad("bad salt")
	}
	if p.hash, err = b64.DecodeString(parts[5]); err != nil || len(p.hash) < 16 || len(p.hash) > 64 {
		return bad("bad hash")
	}
	return p, nil
}

// ValidatePassword checks a new password: at least MinPasswordChars characters and
// at most MaxPasswordBytes bytes. It returns an errs.Invalid with a user message.
func ValidatePassword(pw string) error {
	if utf8.RuneCountInString(pw) < MinPasswordChars {
		return errs.E(errs.Invalid, "The password must be at least %d characters long.", MinPasswordChars)
	}
	if len(pw) > MaxPasswordBytes {
		return errs.E(errs.Invalid, "The password is too long: at most %d bytes.", MaxPasswordBytes)
	}
	return nil
}

// MaxUsernameChars is the longest username ValidateUsername accepts.
const MaxUsernameChars = 64

// ValidateUsername checks a username: 1 to 64 ASCII letters, digits and ". _ - @".
// ASCII only, so that two users cannot have names that look the same. It returns an
// errs.Invalid with a user message.
func ValidateUsername(name string) error {
	if name == "" {
		return errs.E(errs.Invalid, "The username must not be empty.")
	}
	if len(name) > MaxUsernameChars {
		return errs.E(errs.Invalid, "The username is too long: at most %d characters.", MaxUsernameChars)
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			r == '.' || r == '_' || r == '-' || r == '@'
		if !ok {
			return errs.E(errs.Invalid, "The username may contain only letters, digits and . _ - @")
		}
	}
	return nil
}

// hashSlots bounds concurrent argon2 runs: each takes ~20 MB and tens of milliseconds,
// so a burst of logins must queue rather than exhaust memory.
var hashSlots = make(chan struct{}, max(2, runtime.NumCPU()))

func idKey(pw, salt []byte, time, memory uint32, threads uint8, keyLen uint32) []byte {
	hashSlots <- struct{}{}
	defer func() { <-hashSlots }()
	return argon2.IDKey(pw, salt, time, memory, threads, keyLen)
}
