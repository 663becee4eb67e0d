package llm

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// ErrorKind classifies a provider failure by what the user can do about it.
type ErrorKind int

// Error kinds.
const (
	KindConfig     ErrorKind = iota + 1 // the Config is unusable
	KindAuth                            // 401/403: the key is wrong or lacks access
	KindRateLimit                       // 429: slow down
	KindServer                          // 5xx or an error event from the provider
	KindBadRequest                      // 400/404/422 (unknown model, bad request)
	KindTimeout                         // no first chunk within StartTimeout, or no chunk for IdleTimeout
	KindBroken                          // the stream broke or ended without a proper end mid-way
	KindNetwork                         // connection refused, DNS, TLS ...
)

func (k ErrorKind) String() string {
	switch k {
	case KindConfig:
		return "config"
	case KindAuth:
		return "auth"
	case KindRateLimit:
		return "rate_limit"
	case KindServer:
		return "server"
	case KindBadRequest:
		return "bad_request"
	case KindTimeout:
		return "timeout"
	case KindBroken:
		return "broken"
	case KindNetwork:
		return "network"
	}
	return fmt.Sprintf("ErrorKind(%d)", int(k))
}

// Error is a provider failure. Message is one line for the user saying what
// went wrong and what to fix; it may quote the provider's own short error text
// but never contains the API key. Status is the HTTP status when there was one.
type Error struct {
	Kind    ErrorKind
	Status  int
	Message string
	cause   error // for logs; never shown
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the low-level cause (a network error, io.ErrUnexpectedEOF ...),
// if any. Timeouts have none, so errors.Is(err, context.Canceled) stays false.
func (e *Error) Unwrap() error { return e.cause }

// AsError returns the *Error in err's chain.
func AsError(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}

func configError(msg string) *Error { return &Error{Kind: KindConfig, Message: msg} }

// requestError is a Request that cannot be sent as it is (a bug in the caller).
func requestError(msg string) *Error { return &Error{Kind: KindBadRequest, Message: msg} }

// statusError classifies an HTTP error status; detail is the provider's own
// message, already sanitised (may be empty).
func statusError(status int, detail string) *Error {
	code := fmt.Sprintf("HTTP %d", status)
	if detail != "" {
		code += ": " + detail
	}
	e := &Error{Status: status}
	switch {
	case status == 401 || status == 403:
		e.Kind = KindAuth
		e.Message = fmt.Sprintf("The model provider rejected the API key (%s). Check the key in Settings → Providers.", code)
	case status == 429:
		e.Kind = KindRateLimit
		e.Message = fmt.Sprintf("The provider is rate limiting requests (%s). Wait a moment and try again.", code)
	case status >= 500:
		e.Kind = KindServer
		e.Message = fmt.Sprintf("The provider had a server error (%s). Try again later.", code)
	case status == 404:
		e.Kind = KindBadRequest
		e.Message = fmt.Sprintf("The provider did not find the model or endpoint (%s). Check the model name and base URL in Settings → Providers.", code)
	default:
		e.Kind = KindBadRequest
		e.Message = fmt.Sprintf("The provider rejected the request (%s). Check the model name in Settings → Providers.", code)
	}
	return e
}

// streamEventError classifies an error event sent inside a 200 stream.
func streamEventError(errType, detail string) *Error {
	suffix := ""
	if detail != "" {
		suffix = ": " + detail
	}
	t := strings.ToLower(errType)
	switch {
	case strings.Contains(t, "rate_limit"):
		return &Error{Kind: KindRateLimit, Message: "The provider is rate limiting requests" + suffix + ". Wait a moment and try again."}
	case strings.Contains(t, "auth") || strings.Contains(t, "permission"):
		return &Error{Kind: KindAuth, Message: "The model provider rejected the API key" + suffix + ". Check the key in Settings → Providers."}
	case strings.Contains(t, "invalid_request") || strings.Contains(t, "not_found"):
		return &Error{Kind: KindBadRequest, Message: "The provider rejected the request" + suffix + ". Check the model name in Settings → Providers."}
	case strings.Contains(t, "overloaded"):
		return &Error{Kind: KindServer, Message: "The provider is overloaded" + suffix + ". Try again later."}
	}
	return &Error{Kind: KindServer, Message: "The provider reported an error mid-reply" + suffix + ". Try again."}
}

func timeoutError(d time.Duration, started bool) *Error {
	if started {
		return &Error{Kind: KindTimeout, Message: fmt.Sprintf("The model stopped sending for %s mid-reply.", d)}
	}
	return &Error{Kind: KindTimeout, Message: fmt.Sprintf("The model did not start answering within %s.", d)}
}

func brokenError(cause error) *Error {
	return &Error{Kind: KindBroken, Message: "The connection to the provider broke mid-reply.", cause: cause}
}

func networkError(base string, cause error) *Error {
	return &Error{
		Kind:    KindNetwork,
		Message: fmt.Sprintf("Could not reach the provider at %s: %s. Check the base URL in Settings → Providers.", displayURL(base), networkReason(cause)),
		cause:   cause,
	}
}

// networkReason says in a few words why a connection failed.
func networkReason(err error) string {
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var recordErr tls.RecordHeaderError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "host unreachable"
	case errors.As(err, &dnsErr):
		return "host " + dnsErr.Name + " not found"
	case errors.As(err, &certErr), errors.As(err, &unknownAuth), errors.As(err, &hostErr):
		return "its TLS certificate is not trusted"
	case errors.As(err, &recordErr):
		return "it does not speak TLS (try http:// instead of https://)"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "the connection timed out"
	}
	// The innermost message: url.Error would repeat the URL.
	for {
		next := errors.Unwrap(err)
		if next == nil {
			break
		}
		err = next
	}
	return capText(err.Error(), 120)
}

// providerDetail extracts the provider's own error message from an error body:
// {"error":{"message":...}} (OpenAI, Anthropic), {"error":"..."} (Ollama),
// {"message":...} / {"detail":...}, or short plain text. It is one line, at most
// ~200 characters, with the key and anything that looks like a secret removed.
func providerDetail(body []byte, key string) string {
	var msg string
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  any             `json:"detail"`
	}
	if json.Unmarshal(body, &v) == nil {
		var inner struct {
			Message string `json:"message"`
		}
		var s string
		switch {
		case json.Unmarshal(v.Error, &inner) == nil && inner.Message != "":
			msg = inner.Message
		case json.Unmarshal(v.Error, &s) == nil && s != "":
			msg = s
		case v.Message != "":
			msg = v.Message
		default:
			if d, ok := v.Detail.(string); ok {
				msg = d
			}
		}
	} else if utf8.Valid(body) && !strings.Contains(string(body), "<") {
		msg = string(body) // plain text, not an HTML error page
	}
	return sanitize(msg, key)
}

// errorType reads the error type or code from an error event body.
func errorType(body []byte) string {
	var v struct {
		Error struct {
			Type string `json:"type"`
			Code any    `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	if v.Error.Type != "" {
		return v.Error.Type
	}
	if c, ok := v.Error.Code.(string); ok {
		return c
	}
	return ""
}

var secretLike = regexp.MustCompile(`(?i)(bearer\s+\S+|\b(sk|pk|rk)-[a-z0-9_*\-]{6,}|x-api-key\S*\s*\S+)`)

// sanitize makes s one line of at most ~200 characters without key or
// secret-looking tokens.
func sanitize(s, key string) string {
	if key != "" {
		s = strings.ReplaceAll(s, key, "[redacted]")
	}
	s = secretLike.ReplaceAllString(s, "[redacted]")
	s = strings.Join(strings.Fields(s), " ")
	s = strings.TrimRight(s, ".")
	return capText(s, 200)
}

func capText(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}
