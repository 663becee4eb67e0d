package trace

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// Redacted replaces every secret the Redactor finds.
const Redacted = "[REDACTED]"

// minSecretLen is the shortest configured secret that AddSecret accepts: shorter
// values would blank out ordinary words.
const minSecretLen = 6

var (
	// bearerRE matches an RFC 6750 bearer credential ("Bearer abc.def").
	bearerRE = regexp.MustCompile(`(?i)\bbearer\s+[A-Za-z0-9\-._~+/]+=*`)
	// keyRE matches vendor API keys shaped like sk-..., sk-ant-..., sk-proj-....
	keyRE = regexp.MustCompile(`\bsk-[A-Za-z0-9_\-]{16,}`)
	// headerRE matches a credential header or setting written out as text
	// ("x-api-key: abc", "api_key=abc").
	headerRE = regexp.MustCompile(`(?i)\b(x-api-key|api[_-]?key|proxy-authorization|authorization)(\s*[:=]\s*)((?:bearer|basic)\s+)?[^\s,;&"'}]+`)
)

// sensitiveKeys are JSON object keys whose values are always replaced, after
// lower-casing and turning '-' into '_'.
var sensitiveKeys = map[string]bool{
	"authorization":       true,
	"proxy_authorization": true,
	"api_key":             true,
	"apikey":              true,
	"x_api_key":           true,
	"x_goog_api_key":      true,
	"token":               true,
	"access_token":        true,
	"refresh_token":       true,
	"id_token":            true,
	"password":            true,
	"passwd":              true,
	"secret":              true,
	"client_secret":       true,
	"private_key":         true,
	"cookie":              true,
	"set_cookie":          true,
}

func sensitiveKey(k string) bool {
	return sensitiveKeys[strings.ReplaceAll(strings.ToLower(k), "-", "_")]
}

// Redactor removes credentials from what the recorder stores. It is safe for
// concurrent use; secrets can be added while runs are being recorded.
//
// What it replaces with "[REDACTED]":
//   - every configured secret (AddSecret), wherever it appears in a string;
//   - "Bearer <token>" credentials, sk-…-shaped API keys (sk-, sk-ant-, sk-proj-)
//     and "x-api-key: <v>" / "api_key=<v>" / "Authorization: <v>" written as text;
//   - in JSON (Redactor.JSON), the value of any key named authorization,
//     proxy-authorization, api_key, apikey, x-api-key, token, access_token,
//     refresh_token, password, secret, client_secret, cookie (and a few more; case
//     and '-'/'_' do not matter) when that value is a string, number, boolean or an
//     array of those (an array keeps its length, each element replaced). An
//     object under such a key is searched, not replaced, so that a tool's JSON
//     Schema with a property named "token" stays a schema.
//
// Text without any of these passes through byte for byte.
type Redactor struct {
	mu      sync.RWMutex
	secrets []string // longest first, so a secret containing another is replaced whole
}

// NewRedactor returns a Redactor with no configured secrets.
func NewRedactor() *Redactor { return &Redactor{} }

// AddSecret makes s (an API key, an MCP token, a password) be replaced wherever it
// appears. Leading and trailing spaces are ignored; values shorter than 6
// characters are ignored, since replacing them would blank ordinary text.
func (r *Redactor) AddSecret(s string) {
	s = strings.TrimSpace(s)
	if len(s) < minSecretLen {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, have := range r.secrets {
		if have == s {
			return
		}
	}
	r.secrets = append(r.secrets, s)
	sort.SliceStable(r.secrets, func(i, j int) bool { return len(r.secrets[i]) > len(r.secrets[j]) })
}

// String returns s with configured secrets, bearer credentials and key-shaped
// tokens replaced by "[REDACTED]". A string with none of them is returned unchanged.
func (r *Redactor) String(s string) string {
	if s == "" {
		return s
	}
	if r != nil {
		r.mu.RLock()
		for _, sec := range r.secrets {
			if strings.Contains(s, sec) {
				s = strings.ReplaceAll(s, sec, Redacted)
			}
		}
		r.mu.RUnlock()
	}
	return redactPatterns(s)
}

// redactPatterns replaces what the regular expressions find, skipping the long runs
// of base64 that attached images are sent as: a run of at least minBase64Run
// characters from A–Z a–z 0–9 + / that starts a string, a quoted value or a data:
// URL's payload and ends one (or its = padding). None of the patterns can match
// inside such a run or reach into it (each needs a character base64 lacks, or a
// space or '=' right before its token), and scanning a megabyte of image with them
// took half a second of the turn.
func redactPatterns(s string) string {
	if len(s) < 2*minBase64Run {
		return patterns(s)
	}
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); {
		if !isBase64(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && isBase64(s[j]) {
			j++
		}
		starts := i == 0 || s[i-1] == '"' || strings.HasSuffix(s[:i], ";base64,")
		ends := j == len(s) || s[j] == '"' || s[j] == '='
		if j-i >= minBase64Run && starts && ends {
			if b.Len() == 0 {
				b.Grow(len(s))
			}
			b.WriteString(patterns(s[last:i]))
			b.WriteString(s[i:j])
			last = j
		}
		i = j
	}
	if last == 0 {
		return patterns(s)
	}
	b.WriteString(patterns(s[last:]))
	return b.String()
}

// minBase64Run is the shortest run of base64 that redactPatterns skips.
const minBase64Run = 1024

func isBase64(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/'
}

// patterns applies the regular expressions to s.
func patterns(s string) string {
	// The regular expressions are slow on long texts (a request body); look for
	// their literal parts first.
	lower := strings.ToLower(s)
	if strings.Contains(lower, "key") || strings.Contains(lower, "authorization") {
		s = headerRE.ReplaceAllString(s, "${1}${2}${3}"+Redacted)
	}
	if strings.Contains(lower, "bearer") {
		s = bearerRE.ReplaceAllStringFunc(s, bearerRepl)
	}
	if strings.Contains(s, "sk-") {
		s = keyRE.ReplaceAllString(s, Redacted)
	}
	return s
}

func bearerRepl(m string) string {
	tok := strings.TrimLeft(m[len("bearer"):], " \t\r\n")
	word := strings.TrimRight(tok, ".") // a sentence may end right after it
	if !credentialLike(word) {
		return m // "the bearer of bad news", "a Bearer token."
	}
	return m[:len(m)-len(tok)] + Redacted + tok[len(word):]
}

// JSON marshals v and redacts the result: string values pass through String, the
// values of sensitive keys become "[REDACTED]" (see Redactor). Numbers keep their
// exact text. v may be a json.RawMessage. A nil v gives nil.
func (r *Redactor) JSON(v any) (json.RawMessage, error) {
	if v == nil {
		return nil, nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("trace: redact: %w", err)
	}
	return r.redactRaw(raw)
}

// redactRaw redacts an already-encoded JSON document.
func (r *Redactor) redactRaw(raw []byte) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("trace: redact: %w", err)
	}
	doc = r.walk(doc)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("trace: redact: %w", err)
	}
	return json.RawMessage(bytes.TrimRight(buf.Bytes(), "\n")), nil
}

func (r *Redactor) walk(v any) any {
	switch x := v.(type) {
	case string:
		return r.String(x)
	case []any:
		for i := range x {
			x[i] = r.walk(x[i])
		}
		return x
	case map[string]any:
		for k, val := range x {
			if sensitiveKey(k) && isScalarish(val) {
				if arr, ok := val.([]any); ok { // keep the shape: http.Header values are lists
					for i := range arr {
						arr[i] = Redacted
					}
					continue
				}
				x[k] = Redacted
				continue
			}
			val = r.walk(val)
			if rk := r.String(k); rk != k {
				delete(x, k)
				x[rk] = val
				continue
			}
			x[k] = val
		}
		return x
	}
	return v
}

// credentialLike reports whether a word after "Bearer" looks like a token rather
// than English: it holds a digit or one of -._~+/=, or is at least 20 characters.
func credentialLike(tok string) bool {
	return len(tok) >= 20 || strings.ContainsAny(tok, "0123456789-._~+/=")
}

// isScalarish reports whether v is a credential-like value: a non-null scalar or
// an array holding no objects.
func isScalarish(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case map[string]any:
		return false
	case []any:
		for _, e := range x {
			if _, ok := e.(map[string]any); ok {
				return false
			}
		}
		return true
	}
	return true
}
