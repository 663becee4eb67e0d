package web

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"atrium/internal/errs"
	"atrium/internal/store"
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

// loadLogin resolves the login cookie to a user, if any. Expired logins and disabled
// users count as logged out.
func (s *Server) loadLogin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		ck, err := c.Cookie(loginCookie)
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
		}
		return next(c)
	}
}

func currentUser(c echo.Context) (store.User, bool) {
	u, ok := c.Get(userKey).(store.User)
	return u, ok
}

func (s *Server) setLoginCookie(c echo.Context, token string, expires time.Time) {
	c.SetCookie(&http.Cookie{Name: loginCookie, Value: token, Path: "/", Expires: expires,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: s.secure(c)})
}

func (s *Server) clearLoginCookie(c echo.Context) {
	c.SetCookie(&http.Cookie{Name: loginCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: s.secure(c)})
}

// csrfBinding returns this browser's CSRF cookie value, creating it when missing.
func (s *Server) csrfBinding(c echo.Context) string {
	if v, ok := c.Get(csrfCookie).(string); ok {
		return v
	}
	if ck, err := c.Cookie(csrfCookie); err == nil && len(ck.Value) >= 32 {
		c.Set(csrfCookie, ck.Value)
		return ck.Value
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	v := base64.RawURLEncoding.EncodeToString(b)
	c.SetCookie(&http.Cookie{Name: csrfCookie, Value: v, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: s.secure(c), MaxAge: 365 * 24 * 3600})
	c.Set(csrfCookie, v)
	return v
}

func (s *Server) csrfToken(c echo.Context) string { return s.csrf.Token(s.csrfBinding(c)) }

// checkCSRF rejects state-changing requests without a valid token (form field _csrf or
// header X-CSRF-Token) bound to the browser's CSRF cookie: 403.
func (s *Server) checkCSRF(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		switch c.Request().Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			return next(c)
		}
		ck, err := c.Cookie(csrfCookie)
		token := c.Request().Header.Get("X-CSRF-Token")
		if token == "" {
			token = c.FormValue("_csrf")
		}
		if err != nil || !s.csrf.Valid(ck.Value, token) {
			return errs.E(errs.Forbidden, "The form expired or came from another site. Reload the page and try again.")
		}
		return next(c)
	}
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
