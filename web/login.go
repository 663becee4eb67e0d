package web

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"atrium/internal/auth"
	"atrium/internal/errs"
	"atrium/views"
)

func (s *Server) showSetup(c echo.Context) error {
	if n, err := s.Store.CountUsers(c.Request().Context()); err != nil {
		return err
	} else if n > 0 {
		return c.Redirect(http.StatusSeeOther, "/login")
	}
	return render(c, http.StatusOK, views.SetupPage(s.page(c, "Set up Atrium"), views.AuthForm{}))
}

// submitSetup creates the first admin. It works only while no user exists; the store
// makes that check and the insert one transaction, so two racing setups cannot both win.
func (s *Server) submitSetup(c echo.Context) error {
	ctx := c.Request().Context()
	name := strings.TrimSpace(c.FormValue("username"))
	pw := c.FormValue("password")
	fail := func(err error) error {
		return render(c, statusOf(errs.Code(err)), views.SetupPage(s.page(c, "Set up Atrium"),
			views.AuthForm{Username: name, Error: errs.Message(err)}))
	}
	if err := auth.ValidateUsername(name); err != nil {
		return fail(err)
	}
	if err := auth.ValidatePassword(pw); err != nil {
		return fail(err)
	}
	if pw != c.FormValue("password2") {
		return fail(errs.E(errs.Invalid, "The two passwords differ."))
	}
	hash, err := auth.HashPassword(pw)
	if err != nil {
		return err
	}
	u, err := s.Store.CreateFirstAdmin(ctx, name, hash)
	if errs.Is(err, errs.Conflict) {
		return c.Redirect(http.StatusSeeOther, "/login")
	}
	if err != nil {
		return err
	}
	s.setupDone.Store(true)
	s.Log.Info("web: admin account created", "user", u.Username)
	token, err := s.logins.Start(ctx, u)
	if err != nil {
		return err
	}
	s.setLoginCookie(c, token.Value, token.ExpiresAt)
	s.rotateCSRF(c)
	return c.Redirect(http.StatusSeeOther, "/")
}

func (s *Server) showLogin(c echo.Context) error {
	if _, ok := currentUser(c); ok {
		return c.Redirect(http.StatusSeeOther, "/")
	}
	return render(c, http.StatusOK, views.LoginPage(s.page(c, "Log in"), views.AuthForm{}))
}

// submitLogin logs in; auth.Logins rate-limits failures and gives every one the same
// message, so usernames cannot be probed.
func (s *Server) submitLogin(c echo.Context) error {
	name := strings.TrimSpace(c.FormValue("username"))
	ip := c.RealIP()
	token, u, err := s.logins.LogIn(c.Request().Context(), name, c.FormValue("password"), ip)
	if code := errs.Code(err); code == errs.Unauthorized || code == errs.RateLimited {
		if code == errs.Unauthorized {
			s.Log.Info("web: login failed", "ip", ip)
		} else {
			s.Log.Warn("web: login refused, too many failures", "ip", ip)
		}
		return render(c, statusOf(code), views.LoginPage(s.page(c, "Log in"), views.AuthForm{Username: name, Error: errs.Message(err)}))
	}
	if err != nil {
		return err
	}
	s.Log.Info("web: logged in", "user", u.Username, "ip", ip)
	s.setLoginCookie(c, token.Value, token.ExpiresAt)
	s.rotateCSRF(c) // tokens from before the login (as anyone may have seen) end here
	return c.Redirect(http.StatusSeeOther, "/")
}

func (s *Server) logout(c echo.Context) error {
	if token, ok := c.Get(loginKey).(string); ok {
		if err := s.logins.LogOut(c.Request().Context(), token); err != nil {
			return err
		}
		s.endLoginSockets(token) // this browser's; the user's other logins keep theirs
	}
	s.clearLoginCookie(c)
	s.rotateCSRF(c)
	return redirect(c, "/login")
}
