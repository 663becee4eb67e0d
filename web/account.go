package web

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"atrium/internal/auth"
	"atrium/internal/errs"
	"atrium/internal/store"
	"atrium/views"
)

// The user's own settings: theme, custom instructions, password.

func (s *Server) showAccount(c echo.Context) error {
	return s.renderAccount(c, http.StatusOK, c.QueryParam("notice"), "", nil)
}

// renderAccount shows the account page; typed, when not nil, refills the instructions
// form after a refused save.
func (s *Server) renderAccount(c echo.Context, status int, notice, errMsg string, typed *store.Instructions) error {
	u, _ := currentUser(c)
	in := store.Instructions{}
	if typed != nil {
		in = *typed
	} else {
		var err error
		if in, err = s.Store.UserInstructions(c.Request().Context(), u.ID); err != nil {
			return err
		}
	}
	a := views.Account{Theme: u.Theme, AboutMe: in.AboutMe, AnswerStyle: in.AnswerStyle,
		MaxAboutMe: store.MaxAboutMe, MaxAnswerStyle: store.MaxAnswerStyle, Notice: notice, Error: errMsg}
	return render(c, status, views.AccountPage(s.page(c, "Account"), a))
}

// accountFail shows a refused change on the page, with the reason.
func (s *Server) accountFail(c echo.Context, err error, typed *store.Instructions) error {
	if errs.Code(err) == errs.Internal {
		return err
	}
	return s.renderAccount(c, statusOf(errs.Code(err)), "", errs.Message(err), typed)
}

func accountDone(c echo.Context, notice string) error {
	return c.Redirect(http.StatusSeeOther, "/settings/account?notice="+url.QueryEscape(notice))
}

func (s *Server) setTheme(c echo.Context) error {
	u, _ := currentUser(c)
	if err := s.Store.SetUserTheme(c.Request().Context(), u.ID, c.FormValue("theme")); err != nil {
		return s.accountFail(c, err, nil)
	}
	return accountDone(c, "Theme saved.")
}

func (s *Server) setInstructions(c echo.Context) error {
	u, _ := currentUser(c)
	in := store.Instructions{AboutMe: cleanInstructions(c.FormValue("about_me")),
		AnswerStyle: cleanInstructions(c.FormValue("answer_style"))}
	if err := s.Store.SetUserInstructions(c.Request().Context(), u.ID, in); err != nil {
		return s.accountFail(c, err, &in)
	}
	return accountDone(c, "Custom instructions saved. They apply from the next reply on.")
}

// changePassword checks the current password through the login limiter (so it cannot
// be guessed here faster than at the login form), sets the new one, ends every other
// login of the user with their sockets, and keeps this browser logged in.
func (s *Server) changePassword(c echo.Context) error {
	ctx := c.Request().Context()
	u, _ := currentUser(c)
	pw := c.FormValue("password")
	if pw != c.FormValue("confirm") {
		return s.accountFail(c, errs.E(errs.Invalid, "The two new passwords differ."), nil)
	}
	if err := auth.ValidatePassword(pw); err != nil {
		return s.accountFail(c, err, nil)
	}
	if _, _, err := s.logins.LogIn(ctx, u.Username, c.FormValue("current"), c.RealIP()); err != nil {
		if errs.Code(err) == errs.Unauthorized {
			err = errs.E(errs.Unauthorized, "The current password is wrong.")
		}
		return s.accountFail(c, err, nil)
	}
	hash, err := auth.HashPassword(pw)
	if err != nil {
		return err
	}
	if err := s.Store.SetUserPassword(ctx, u.ID, hash); err != nil { // ends every login
		return err
	}
	s.endUserSockets(u.ID)
	token, err := s.logins.Start(ctx, u)
	if err != nil {
		return err
	}
	s.setLoginCookie(c, token.Value, token.ExpiresAt)
	s.rotateCSRF(c)
	s.Log.Info("web: password changed", "user", u.Username)
	return accountDone(c, "Password changed. Your other logins were ended.")
}

// setChatInstructions sets a chat's own instructions (from its side panel) and answers
// with the form again; a refusal (too long) is a 422 with the reason and the text kept.
func (s *Server) setChatInstructions(c echo.Context) error {
	sess, err := s.ownedSession(c)
	if err != nil {
		return err
	}
	prompt := cleanInstructions(c.FormValue("system_prompt"))
	err = s.Store.SetSessionSystemPrompt(c.Request().Context(), sess.ID, sess.OwnerID, prompt)
	if code := errs.Code(err); code == errs.Invalid {
		return render(c, http.StatusUnprocessableEntity, views.ChatInstructionsBox(sess.ID, prompt, store.MaxSystemPrompt, "", errs.Message(err)))
	} else if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.ChatInstructionsBox(sess.ID, prompt, store.MaxSystemPrompt, "Saved.", ""))
}

// cleanInstructions normalises line ends and drops control characters other than
// newlines and tabs: the text goes into every model request.
func cleanInstructions(s string) string {
	s = strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n")
	return strings.TrimSpace(strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f {
			return -1
		}
		return r
	}, s))
}
