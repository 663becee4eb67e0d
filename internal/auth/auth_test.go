package auth_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"atrium/internal/auth"
	"atrium/internal/errs"
)

func TestHashVerify(t *testing.T) {
	h, err := auth.HashPassword("correct horse")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("hash %q is not in the expected PHC form", h)
	}
	if strings.Contains(h, "correct horse") {
		t.Fatal("hash contains the password")
	}
	ok, err := auth.VerifyPassword(h, "correct horse")
	if err != nil || !ok {
		t.Fatalf("right password: %v, %v", ok, err)
	}
	for _, wrong := range []string{"correct horsE", "correct horse ", "", "correct hors"} {
		ok, err := auth.VerifyPassword(h, wrong)
		if err != nil || ok {
			t.Fatalf("wrong password %q: %v, %v", wrong, ok, err)
		}
	}
	h2, _ := auth.HashPassword("correct horse")
	if h2 == h {
		t.Fatal("two hashes of the same password are equal: salt not random")
	}
	if ok, _ := auth.VerifyPassword(h2, "correct horse"); !ok {
		t.Fatal("second hash does not verify")
	}
	if auth.NeedsRehash(h) {
		t.Fatal("a fresh hash needs rehash")
	}
}

func TestVerifyOtherParameters(t *testing.T) {
	// A hash made with other (cheaper) parameters still verifies, and asks for a rehash.
	// Generated with: argon2.IDKey("pw123456", "saltsaltsaltsalt", 1, 64, 1, 32).
	h := "$argon2id$v=19$m=64,t=1,p=1$c2FsdHNhbHRzYWx0c2FsdA$MZ5bt+guZ7TiK4WgZOkdHdkVSXQX4AzoC3Irf5RjQYc"
	ok, err := auth.VerifyPassword(h, "pw123456")
	if err != nil || !ok {
		t.Fatalf("got %v, %v", ok, err)
	}
	if !auth.NeedsRehash(h) {
		t.Fatal("NeedsRehash false for old parameters")
	}
}

func TestVerifyMalformed(t *testing.T) {
	good, _ := auth.HashPassword("password1")
	parts := strings.Split(good, "$")
	salt, sum := parts[4], parts[5]
	for name, h := range map[string]string{
		"empty":          "",
		"bcrypt":         "$2a$10$abcdefghijklmnopqrstuu5zH0sXo0k6Vb5o0Y9Vb4b0e0e0e0e0e",
		"argon2i":        "$argon2i$v=19$m=19456,t=2,p=1$" + salt + "$" + sum,
		"version":        "$argon2id$v=16$m=19456,t=2,p=1$" + salt + "$" + sum,
		"missing field":  "$argon2id$v=19$m=19456,t=2,p=1$" + salt,
		"params garbage": "$argon2id$v=19$m=19456,t=2,p=1x$" + salt + "$" + sum,
		"params order":   "$argon2id$v=19$t=2,m=19456,p=1$" + salt + "$" + sum,
		"huge memory":    "$argon2id$v=19$m=4194304,t=2,p=1$" + salt + "$" + sum,
		"zero time":      "$argon2id$v=19$m=19456,t=0,p=1$" + salt + "$" + sum,
		"zero threads":   "$argon2id$v=19$m=19456,t=2,p=0$" + salt + "$" + sum,
		"bad salt":       "$argon2id$v=19$m=19456,t=2,p=1$!!!$" + sum,
		"short hash":     "$argon2id$v=19$m=19456,t=2,p=1$" + salt + "$AAAA",
		"padded base64":  "$argon2id$v=19$m=19456,t=2,p=1$" + salt + "$" + sum + "=",
	} {
		t.Run(name, func(t *testing.T) {
			ok, err := auth.VerifyPassword(h, "password1")
			if ok || !errors.Is(err, auth.ErrMalformedHash) {
				t.Fatalf("got %v, %v; want false, ErrMalformedHash", ok, err)
			}
		})
	}
}

func TestValidatePassword(t *testing.T) {
	for _, c := range []struct {
		pw string
		ok bool
	}{
		{"", false},
		{"1234567", false},
		{"12345678", true},
		{"пароль12", true}, // 8 characters, 14 bytes
		{"ключ", false},    // 8 bytes, 4 characters
		{strings.Repeat("a", 256), true},
		{strings.Repeat("a", 257), false},
		{strings.Repeat("é", 129), false}, // 129 characters, 258 bytes
	} {
		err := auth.ValidatePassword(c.pw)
		if (err == nil) != c.ok {
			t.Errorf("ValidatePassword(%d bytes) = %v, want ok=%v", len(c.pw), err, c.ok)
		}
		if err != nil && (!errs.Is(err, errs.Invalid) || errs.Message(err) == "") {
			t.Errorf("error %v is not an errs.Invalid with a message", err)
		}
	}
}

func TestValidateUsername(t *testing.T) {
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"", false},
		{"a", true},
		{"alice.smith_1-2@example.org", true},
		{strings.Repeat("x", 64), true},
		{strings.Repeat("x", 65), false},
		{"with space", false},
		{"semi;colon", false},
		{"<script>", false},
		{"аlice", false}, // Cyrillic а
		{"tab\t", false},
	} {
		err := auth.ValidateUsername(c.name)
		if (err == nil) != c.ok {
			t.Errorf("ValidateUsername(%q) = %v, want ok=%v", c.name, err, c.ok)
		}
		if err != nil && !errs.Is(err, errs.Invalid) {
			t.Errorf("error %v is not errs.Invalid", err)
		}
	}
}

func TestToken(t *testing.T) {
	tok, hash, err := auth.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(raw) != 32 {
		t.Fatalf("token %q: %d bytes, %v", tok, len(raw), err)
	}
	if !bytes.Equal(hash, auth.HashToken(tok)) || !bytes.Equal(auth.HashToken(tok), auth.HashToken(tok)) {
		t.Fatal("token hash not stable")
	}
	if len(hash) != 32 {
		t.Fatalf("hash is %d bytes", len(hash))
	}
	tok2, hash2, _ := auth.NewToken()
	if tok2 == tok || bytes.Equal(hash2, hash) {
		t.Fatal("two tokens are equal")
	}
	// Pinned so a change of hash function (which would log everyone out) is noticed.
	if got := fmt.Sprintf("%x", auth.HashToken("abc")); got != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Fatalf("HashToken(abc) = %s", got)
	}
}

func TestCSRF(t *testing.T) {
	c := auth.NewCSRF([]byte("0123456789abcdef0123456789abcdef"))
	tok := c.Token("browser-1")
	if tok == "" || tok != c.Token("browser-1") {
		t.Fatal("token empty or not deterministic")
	}
	other := auth.NewCSRF([]byte("another key......................"))
	for _, tc := range []struct {
		name           string
		c              *auth.CSRF
		binding, token string
		want           bool
	}{
		{"valid", c, "browser-1", tok, true},
		{"other binding", c, "browser-2", tok, false},
		{"other key", other, "browser-1", tok, false},
		{"empty token", c, "browser-1", "", false},
		{"empty binding", c, "", c.Token(""), false},
		{"both empty", c, "", "", false},
		{"tampered", c, "browser-1", flip(tok[0]) + tok[1:], false},
		{"truncated", c, "browser-1", tok[:20], false},
		{"not base64", c, "browser-1", "!!!" + tok[3:], false},
		{"padded", c, "browser-1", tok + "=", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.Valid(tc.binding, tc.token); got != tc.want {
				t.Fatalf("Valid = %v, want %v", got, tc.want)
			}
		})
	}
}

func flip(b byte) string {
	if b == 'A' {
		return "B"
	}
	return "A"
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func TestLimiter(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	l := auth.NewLimiter(2, time.Second, 5*time.Second, time.Minute, clk.now)
	allow := func(key string, want bool, wantRetry time.Duration) {
		t.Helper()
		ok, retry := l.Allow(key)
		if ok != want || retry != wantRetry {
			t.Fatalf("Allow(%q) = %v, %v; want %v, %v", key, ok, retry, want, wantRetry)
		}
	}

	allow("alice", true, 0)
	l.Fail("alice")
	l.Fail("alice") // the free failures cost nothing
	allow("alice", true, 0)
	// Then 1s, 2s, 4s, and 5s (the maximum) from then on.
	for _, d := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second} {
		l.Fail("alice")
		allow("alice", false, d)
		allow("bob", true, 0) // other keys are not affected
		clk.add(d - time.Millisecond)
		allow("alice", false, time.Millisecond)
		clk.add(time.Millisecond)
		allow("alice", true, 0)
	}

	// A minute after the last failure the key starts over.
	clk.add(time.Minute)
	l.Fail("alice")
	allow("alice", true, 0)

	for range 3 {
		l.Fail("carol")
	}
	allow("carol", false, time.Second)
	l.Reset("carol")
	allow("carol", true, 0)
	l.Fail("carol")
	allow("carol", true, 0)
	l.Reset("nobody") // no-op
}

func TestLimiterBounded(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	l := auth.NewLimiter(0, time.Hour, time.Hour, time.Hour, clk.now)
	l.Fail("first")
	for i := range auth.MaxLimiterKeys {
		clk.add(time.Millisecond)
		l.Fail(fmt.Sprintf("ip-%d", i))
	}
	// "first" was the oldest when the cap was reached, so it was dropped.
	if ok, _ := l.Allow("first"); !ok {
		t.Fatal("oldest key was not dropped at the cap")
	}
	if ok, _ := l.Allow(fmt.Sprintf("ip-%d", auth.MaxLimiterKeys-1)); ok {
		t.Fatal("newest key was dropped")
	}
}

func TestLimiterConcurrent(t *testing.T) {
	l := auth.NewLimiter(5, time.Millisecond, time.Second, time.Minute, nil)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			key := fmt.Sprintf("k%d", i%4)
			for range 100 {
				l.Allow(key)
				l.Fail(key)
				if i%8 == 0 {
					l.Reset(key)
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkHashPassword(b *testing.B) {
	for b.Loop() {
		if _, err := auth.HashPassword("correct horse battery staple"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyPassword(b *testing.B) {
	h, _ := auth.HashPassword("correct horse battery staple")
	for b.Loop() {
		if ok, _ := auth.VerifyPassword(h, "correct horse battery staple"); !ok {
			b.Fatal("no match")
		}
	}
}
