// Package errs is Atrium's one error type. Every layer returns *Error (or wraps one)
// for failures a user or client should see; the web layer maps Code to an HTTP status
// in exactly one place. Anything else is an internal error whose text is never shown.
package errs

import (
	"errors"
	"fmt"
)

// Codes. Keep the list short; each maps to one HTTP status in web/errors.go.
const (
	Invalid      = "invalid"      // bad input from the client: 400
	Unauthorized = "unauthorized" // not logged in or bad credentials: 401
	Forbidden    = "forbidden"    // logged in but not allowed: 403
	NotFound     = "not_found"    // missing, or someone else's: 404
	Conflict     = "conflict"     // already exists / state does not allow it: 409
	TooLarge     = "too_large"    // over a size limit: 413
	RateLimited  = "rate_limited" // slow down: 429
	Busy         = "busy"         // the session is already answering: 409
	Unavailable  = "unavailable"  // a dependency (model, MCP server) failed: 502
	Storage      = "storage"      // the server cannot save (disk full, database read-only or gone): 503
	Internal     = "internal"     // a bug or an I/O failure: 500
)

// Error carries a code, a message safe to show to the user, and the underlying cause
// (which is logged, never shown).
type Error struct {
	Code    string
	Message string
	Err     error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// E returns an *Error with a formatted user-facing message.
func E(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an *Error that keeps err as its cause.
func Wrap(code string, err error, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Err: err}
}

// Code returns the code of the first *Error in err's chain, or Internal.
func Code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}

// Message returns the user-facing message of the first *Error in err's chain, or a
// generic text for internal errors so that no detail leaks.
func Message(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "Something went wrong on the server. The details are in the server log."
}

// Is reports whether err carries the given code.
func Is(err error, code string) bool { return err != nil && Code(err) == code }
