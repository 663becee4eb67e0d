package web

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"atrium/internal/errs"
	"atrium/internal/store"
	"atrium/internal/trace"
)

const (
	loginCookie = "atrium_login"
	csrfCookie  = "atrium_csrf"
	userKey     = "user"
	loginKey    = "login"
)

func (s *Server) recoverPanics(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				if r == http.ErrAbortHandler {
					panic(r)
				}
				err = fmt.Errorf("web: panic: %v", r)
			}
		}()
		return next(c)
	}
}

// securityHeaders sets a strict CSP (no inline script, so injected markup cannot run)
// and the usual hardening headers.
func (s *Server) securityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: https:; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("X-Frame-Options", "DENY")
		return next(c)
	}
}

// secure reports whether cookies should carry the Secure flag: served over TLS, behind
// a TLS-terminating proxy, or configured with an https base URL.
func (s *Server) secure(c echo.Context) bool {
	r := c.Request()
	return r.TLS != nil || s.secureBase || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// Request body limits (per route, by limitBody) and how long a client may take to send
// one. A form is a few fields; only the imports carry files.
const (
	authBodyLimit   = 8 << 10  // /login, /setup: a username and two passwords
	formBodyLimit   = 64 << 10 // any other form
	mcpImportLimit  = 1 << 20  // a pasted mcpServers JSON
	formBodyTimeout = 10 * time.Second
	importTimeout   = 2 * time.Minute
)

// bodyLimit is the largest request body accepted on route (echo's route pattern).
func bodyLimit(route string) int64 {
	switch route {
	case "/login", "/setup":
		return authBodyLimit
	case "/memories/import": // a file and a paste, each up to maxImportBytes
		return 2*maxImportBytes + formBodyLimit
	case "/sessions/import": // a file or a paste of chatsExport
		return 2*maxChatsImportBytes + formBodyLimit
	case "/settings/mcp/import":
		return mcpImportLimit
	case "/s/:id/files": // one attached file
		return uploadBodyLimit
	case "/settings/runs/import": // one run export file
		return trace.MaxRunImportBytes + formBodyLimit
	}
	return formBodyLimit
}

func tooLargeError(limit int64) error {
	return errs.E(errs.TooLarge, "This request is too large: at most %s here.", byteSize(limit))
}

func byteSize(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// limitBody caps each request body at its route's limit before anything reads it (the
// CSRF check parses the form): a declared length over it is refused at once, an
// undeclared one stops being read there.
func (s *Server) limitBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		limit := bodyLimit(c.Path())
		if r.ContentLength > limit {
			c.Response().Header().Set("Connection", "close") // the body is not read
			return tooLargeError(limit)
		}
		r.Body = http.MaxBytesReader(c.Response(), r.Body, limit)
		return next(c)
	}
}

// loadLogin resolves the login cookie to a user, if any. Expired logins and disabled
// users count as logged out.
func (s *Server) loadLogin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		ck, err := c.Cookie(s.cookieName(c, loginCookie))
		if err != nil || ck.Value == "" {
			return next(c)
		}
		user, renewed, err := s.logins.Current(c.Request().Context(), ck.Value)
		switch {
		case errs.Is(err, errs.Unauthorized):
			s.clearLoginCookie(c)
		case err != nil:
			return err
		default:
			if !renewed.IsZero() {
				s.setLoginCookie(c, ck.Value, renewed)
			}
			c.Set(userKey, user)
			c.Set(loginKey, ck.Value)
			// A logged-in page is one user's data: no browser or proxy cache keeps it
			// (the back button after logout, a shared computer).
			if !strings.HasPrefix(c.Request().URL.Path, "/assets/") {
				c.Response().Header().Set("Cache-Control", "no-store")
			}
		}
		return next(c)
	}
}

func currentUser(c echo.Context) (store.User, bool) {
	u, ok := c.Get(userKey).(store.User)
	return u, ok
}

// cookieName is name, with the __Host- prefix over HTTPS: the browser then accepts the
// cookie only if it is Secure, for path / and without a Domain, so a sibling subdomain
// or a plain-http response cannot plant or overwrite it.
func (s *Server) cookieName(c echo.Context, name string) string {
	if s.secure(c) {
		return "__Host-" + name
	}
	return name
}

func (s *Server) setLoginCookie(c echo.Context, token string, expires time.Time) {
	c.SetCookie(&http.Cookie{Name: s.cookieName(c, loginCookie), Value: token, Path: "/", Expires: expires,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: s.secure(c)})
}

func (s *Server) clearLoginCookie(c echo.Context) {
	c.SetCookie(&http.Cookie{Name: s.cookieName(c, loginCookie), Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: s.secure(c)})
}

// csrfBinding returns this browser's CSRF cookie value, creating it when missing.
func (s *Server) csrfBinding(c echo.Context) string {
	if v, ok := c.Get(csrfCookie).(string); ok {
		return v
	}
	if ck, err := c.Cookie(s.cookieName(c, csrfCookie)); err == nil && len(ck.Value) >= 32 {
		c.Set(csrfCookie, ck.Value)
		return ck.Value
	}
	return s.rotateCSRF(c)
}

// rotateCSRF gives the browser a new CSRF cookie, so that tokens issued before (a login
// or a logout) stop working. It lives as long as the browser session; a browser that
// restarts with its login still valid gets a new one with its next page.
func (s *Server) rotateCSRF(c echo.Context) string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	v := base64.RawURLEncoding.EncodeToString(b)
	c.SetCookie(&http.Cookie{Name: s.cookieName(c, csrfCookie), Value: v, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: s.secure(c)})
	c.Set(csrfCookie, v)
	return v
}

// csrfFor is what a token signs: the browser's CSRF cookie and the login it carries, so
// a token (and cookie) taken from one browser or one login is refused with another.
func csrfFor(binding, login string) string { return binding + "\x00" + login }

func (s *Server) csrfToken(c echo.Context) string {
	login, _ := c.Get(loginKey).(string)
	return s.csrf.Token(csrfFor(s.csrfBinding(c), login))
}

// checkCSRF rejects state-changing requests without a valid token, taken from the
// header X-CSRF-Token or the form body's _csrf field (never the query string, which
// ends up in logs and Referer headers): 403. Anonymous requests may not send multipart
// bodies (nothing anonymous uploads files), so they never cost temporary files.
func (s *Server) checkCSRF(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			return next(c)
		}
		login, loggedIn := c.Get(loginKey).(string)
		if err := s.parseBody(c, loggedIn); err != nil {
			return err
		}
		token := r.Header.Get("X-CSRF-Token")
		if token == "" {
			token = r.PostFormValue("_csrf")
		}
		ck, err := c.Cookie(s.cookieName(c, csrfCookie))
		if err != nil || !s.csrf.Valid(csrfFor(ck.Value, login), token) {
			return errs.E(errs.Forbidden, "The form expired or came from another site. Reload the page and try again.")
		}
		return next(c)
	}
}

// parseBody reads the form body within the route's limit (limitBody): a body over it
// is 413 with the limit in the message, not a misleading "form expired".
func (s *Server) parseBody(c echo.Context, loggedIn bool) error {
	r := c.Request()
	// A deadline for the body, so a sender trickling bytes cannot hold a connection. It
	// is lifted once the body is read: net/http cancels the request's context when a
	// read deadline passes, and the handler may take longer than this (an import). On
	// a failure it stays, so that net/http does not wait for the rest of the body.
	rc := http.NewResponseController(c.Response())
	timeout := formBodyTimeout
	if bodyLimit(c.Path()) > formBodyLimit {
		timeout = importTimeout
	}
	if err := rc.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		s.Log.Warn("web: no body deadline", "err", err)
	}
	var err error
	if ct := r.Header.Get("Content-Type"); strings.HasPrefix(strings.ToLower(ct), "multipart/") {
		if !loggedIn {
			return errs.E(errs.Forbidden, "Log in first: only a logged-in user can upload files.")
		}
		// The body is at most the route's limit, so with that much memory no part spills
		// into a temporary file.
		err = r.ParseMultipartForm(bodyLimit(c.Path()))
	} else {
		err = r.ParseForm()
	}
	var tooLarge *http.MaxBytesError
	var netErr net.Error
	switch {
	case errors.As(err, &tooLarge):
		return tooLargeError(tooLarge.Limit)
	case errors.As(err, &netErr) && netErr.Timeout():
		c.Response().Header().Set("Connection", "close")
		return errs.Wrap(errs.Invalid, err, "The request body came too slowly.")
	case err != nil:
		return errs.Wrap(errs.Invalid, err, "The form could not be read.")
	}
	_ = rc.SetReadDeadline(time.Time{})
	return nil
}

// requireSetup sends every page to /setup until the first admin exists.
func (s *Server) requireSetup(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.setupDone.Load() {
			return next(c)
		}
		p := c.Request().URL.Path
		if p == "/setup" || p == "/healthz" || p == "/readyz" || strings.HasPrefix(p, "/assets/") {
			return next(c)
		}
		n, err := s.Store.CountUsers(c.Request().Context())
		if err != nil {
			return err
		}
		if n > 0 {
			s.setupDone.Store(true)
			return next(c)
		}
		return redirect(c, "/setup")
	}
}

func (s *Server) requireUser(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if _, ok := currentUser(c); !ok {
			if c.Request().Method == http.MethodGet && !isHTMX(c) && c.Request().Header.Get("Upgrade") == "" {
				return c.Redirect(http.StatusSeeOther, "/login")
			}
			return errs.E(errs.Unauthorized, "You are not logged in.")
		}
		return next(c)
	}
}

func (s *Server) requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if u, _ := currentUser(c); u.Role != store.RoleAdmin {
			return errs.E(errs.Forbidden, "Only admins can do this.")
		}
		return next(c)
	}
}

// ownedSession loads the :id session for the current user; a foreign id is a 404
// exactly like a missing one.
func (s *Server) ownedSession(c echo.Context) (store.Session, error) {
	u, _ := currentUser(c)
	sess, err := s.Store.SessionForOwner(c.Request().Context(), c.Param("id"), u.ID)
	if errs.Is(err, errs.NotFound) {
		return sess, echo.ErrNotFound
	}
	return sess, err
}
