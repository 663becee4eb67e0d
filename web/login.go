package web

import (
	"net/http"
	"strings"
	"sync"

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
	if err := s.startLogin(ctx, c, u); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/")
}

func (s *Server) showLogin(c echo.Context) error {
	if _, ok := currentUser(c); ok {
		return c.Redirect(http.StatusSeeOther, "/")
	}
	return render(c, http.StatusOK, views.LoginPage(s.page(c, "Log in"), views.AuthForm{}))
}

// submitLogin checks the password. Failures are rate-limited per client address and per
// username, and every failure gives the same message so usernames cannot be probed.
func (s *Server) submitLogin(c echo.Context) error {
	ctx := c.Request().Context()
	name := strings.TrimSpace(c.FormValue("username"))
	ipKey, userKey := "ip:"+c.RealIP(), "user:"+strings.ToLower(name)
	fail := func(status int, msg string) error {
		return render(c, status, views.LoginPage(s.page(c, "Log in"), views.AuthForm{Username: name, Error: msg}))
	}
	if ok, _ := s.ipLimit.Allow(ipKey); !ok {
		return fail(http.StatusTooManyRequests, "Too many failed logins. Wait a few minutes and try again.")
	}
	if ok, _ := s.userLimit.Allow(userKey); !ok {
		return fail(http.StatusTooManyRequests, "Too many failed logins. Wait a few minutes and try again.")
	}
	u, err := s.Store.UserByUsername(ctx, name)
	if err != nil && !errs.Is(err, errs.NotFound) {
		return err
	}
	ok := false
	if err == nil {
		ok, _ = auth.VerifyPassword(u.PasswordHash, c.FormValue("password"))
	} else {
		// Spend the same time as a real check so a missing user is not detectable.
		_, _ = auth.VerifyPassword(dummyHash(), c.FormValue("password"))
	}
	if !ok || u.Disabled {
		s.ipLimit.Fail(ipKey)
		s.userLimit.Fail(userKey)
		s.Log.Info("web: login failed", "ip", c.RealIP())
		return fail(http.StatusUnauthorized, "Wrong username or password, or the account is disabled.")
	}
	s.userLimit.Reset(userKey)
	if err := s.startLogin(ctx, c, u); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/")
}

// dummyHash is verified against when the username does not exist. Made on first use,
// not at start-up, where it would cost tens of milliseconds.
var dummyHash = sync.OnceValue(func() string {
	h, _ := auth.HashPassword("not a real password, only for timing")
	return h
})

func (s *Server) logout(c echo.Context) error {
	if hash, ok := c.Get(loginKey).([]byte); ok {
		if err := s.Store.DeleteLogin(c.Request().Context(), hash); err != nil {
			return err
		}
	}
	s.clearLoginCookie(c)
	return redirect(c, "/login")
}
