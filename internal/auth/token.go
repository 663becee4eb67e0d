package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
)

// NewToken returns a random session token (32 bytes, unpadded base64url) for the
// client, and its hash for the database: only the hash is stored, so a leaked
// database does not hold usable sessions.
func NewToken() (token string, hash []byte, err error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", nil, fmt.Errorf("auth: new token: %w", err)
	}
	token = base64.RawURLEncoding.EncodeToString(b)
	return token, HashToken(token), nil
}

// HashToken returns the SHA-256 of a token, the form in which it is stored and looked up.
func HashToken(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// CSRF makes and checks signed double-submit tokens. A token is bound to a random
// per-browser value (the binding, kept in a cookie by the web layer), so a token
// from one browser is useless in another. Safe for concurrent use.
type CSRF struct {
	key []byte
}

// NewCSRF returns a CSRF that signs with key (use 32 random bytes). It copies key.
func NewCSRF(key []byte) *CSRF {
	return &CSRF{key: append([]byte(nil), key...)}
}

// Token returns base64url(HMAC-SHA256(key, binding)), unpadded.
func (c *CSRF) Token(binding string) string {
	return base64.RawURLEncoding.EncodeToString(c.mac(binding))
}

// Valid reports whether token is the token for binding, in constant time. It is false
// when either is empty.
func (c *CSRF) Valid(binding, token string) bool {
	if binding == "" || token == "" {
		return false
	}
	got, err := base64.RawURLEncoding.Strict().DecodeString(token)
	if err != nil {
		return false
	}
	return hmac.Equal(got, c.mac(binding))
}

func (c *CSRF) mac(binding string) []byte {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte(binding))
	return m.Sum(nil)
}
