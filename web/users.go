package web

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"atrium/internal/auth"
	"atrium/internal/errs"
	"atrium/internal/store"
	"atrium/views"
)

func (s *Server) usersView(ctx context.Context, c echo.Context, form views.AuthForm, role, notice, errMsg string) (views.Users, error) {
	list, err := s.Store.ListUsers(ctx)
	if err != nil {
		return views.Users{}, err
	}
	me, _ := currentUser(c)
	out := views.Users{Form: form, Role: role, Notice: notice, Error: errMsg}
	for _, u := range list {
		out.Users = append(out.Users, views.AdminUser{ID: u.ID, Username: u.Username, Role: u.Role,
			Disabled: u.Disabled, CreatedAt: u.CreatedAt, IsSelf: u.ID == me.ID})
	}
	return out, nil
}

func (s *Server) showUsers(c echo.Context) error {
	v, err := s.usersView(c.Request().Context(), c, views.AuthForm{}, store.RoleUser, c.QueryParam("notice"), "")
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.UsersPage(s.page(c, "Users"), v))
}

// usersFail re-renders the users page with a user-facing error (validation, conflict).
func (s *Server) usersFail(c echo.Context, err error, form views.AuthForm, role string) error {
	if errs.Code(err) == errs.Internal {
		return err
	}
	v, verr := s.usersView(c.Request().Context(), c, form, role, "", errs.Message(err))
	if verr != nil {
		return verr
	}
	return render(c, statusOf(errs.Code(err)), views.UsersPage(s.page(c, "Users"), v))
}

func usersDone(c echo.Context, notice string) error {
	return c.Redirect(http.StatusSeeOther, "/settings/users?notice="+url.QueryEscape(notice))
}

func validRole(r string) error {
	if r != store.RoleAdmin && r != store.RoleUser {
		return errs.E(errs.Invalid, "Role must be admin or user.")
	}
	return nil
}

func (s *Server) createUser(c echo.Context) error {
	name := strings.TrimSpace(c.FormValue("username"))
	role := c.FormValue("role")
	form := views.AuthForm{Username: name}
	pw := c.FormValue("password")
	for _, err := range []error{auth.ValidateUsername(name), auth.ValidatePassword(pw), validRole(role)} {
		if err != nil {
			return s.usersFail(c, err, form, role)
		}
	}
	hash, err := auth.HashPassword(pw)
	if err != nil {
		return err
	}
	u := &store.User{Username: name, PasswordHash: hash, Role: role}
	if err := s.Store.CreateUser(c.Request().Context(), u); err != nil {
		if errs.Is(err, errs.Conflict) {
			err = errs.E(errs.Conflict, "A user named %q already exists.", name)
		}
		return s.usersFail(c, err, form, role)
	}
	return usersDone(c, "User "+name+" created.")
}

// targetUser loads :uid; admins may not lock themselves out through these forms.
func (s *Server) targetUser(c echo.Context) (store.User, error) {
	id, err := strconv.ParseInt(c.Param("uid"), 10, 64)
	if err != nil {
		return store.User{}, echo.ErrNotFound
	}
	u, err := s.Store.UserByID(c.Request().Context(), id)
	if errs.Is(err, errs.NotFound) {
		return u, echo.ErrNotFound
	}
	return u, err
}

func (s *Server) setDisabled(c echo.Context, disabled bool) error {
	u, err := s.targetUser(c)
	if err != nil {
		return err
	}
	if me, _ := currentUser(c); me.ID == u.ID && disabled {
		return s.usersFail(c, errs.E(errs.Conflict, "You cannot disable your own account."), views.AuthForm{}, store.RoleUser)
	}
	if err := s.Store.SetUserDisabled(c.Request().Context(), u.ID, disabled); err != nil {
		return s.usersFail(c, err, views.AuthForm{}, store.RoleUser)
	}
	verb := "enabled"
	if disabled {
		verb = "disabled"
		s.endUserSockets(u.ID) // their logins are gone, and with them their sockets
	}
	return usersDone(c, "User "+u.Username+" "+verb+".")
}

func (s *Server) disableUser(c echo.Context) error { return s.setDisabled(c, true) }
func (s *Server) enableUser(c echo.Context) error  { return s.setDisabled(c, false) }

func (s *Server) resetUserPassword(c echo.Context) error {
	u, err := s.targetUser(c)
	if err != nil {
		return err
	}
	pw := c.FormValue("password")
	if err := auth.ValidatePassword(pw); err != nil {
		return s.usersFail(c, err, views.AuthForm{}, store.RoleUser)
	}
	hash, err := auth.HashPassword(pw)
	if err != nil {
		return err
	}
	if err := s.Store.SetUserPassword(c.Request().Context(), u.ID, hash); err != nil {
		return err
	}
	s.endUserSockets(u.ID)
	return usersDone(c, "Password of "+u.Username+" reset; their open logins were ended.")
}

func (s *Server) setUserRole(c echo.Context) error {
	u, err := s.targetUser(c)
	if err != nil {
		return err
	}
	role := c.FormValue("role")
	if err := validRole(role); err != nil {
		return s.usersFail(c, err, views.AuthForm{}, store.RoleUser)
	}
	if me, _ := currentUser(c); me.ID == u.ID && role != store.RoleAdmin {
		return s.usersFail(c, errs.E(errs.Conflict, "You cannot remove your own admin role."), views.AuthForm{}, store.RoleUser)
	}
	if err := s.Store.SetUserRole(c.Request().Context(), u.ID, role); err != nil {
		return s.usersFail(c, err, views.AuthForm{}, store.RoleUser)
	}
	if role != store.RoleAdmin {
		s.endAdminSockets(u.ID)
	}
	return usersDone(c, "User "+u.Username+" is now "+role+".")
}

// deleteUser deletes a user and everything of theirs (store.DeleteUser: one
// transaction, their data key included, the WAL checkpointed) once the admin typed
// the username: a per-user word, so a confirmation meant for one row cannot hit
// another. Their replies are stopped, their key forgotten here too, and their
// sockets closed. The server log keeps who deleted which user id (not the name).
func (s *Server) deleteUser(c echo.Context) error {
	ctx := c.Request().Context()
	u, err := s.targetUser(c)
	if err != nil {
		return err
	}
	me, _ := currentUser(c)
	refuse := func(status int, msg string) error {
		v, err := s.usersView(ctx, c, views.AuthForm{}, store.RoleUser, "", "")
		if err != nil {
			return err
		}
		for i := range v.Users {
			if v.Users[i].ID == u.ID {
				v.Users[i].DeleteError = msg
			}
		}
		return render(c, status, views.UsersPage(s.page(c, "Users"), v))
	}
	if me.ID == u.ID {
		return s.usersFail(c, errs.E(errs.Conflict, "You cannot delete your own account."), views.AuthForm{}, store.RoleUser)
	}
	if !strings.EqualFold(strings.TrimSpace(c.FormValue("confirm")), u.Username) {
		return refuse(http.StatusBadRequest, "Type the username “"+u.Username+"” to confirm; nothing was deleted.")
	}
	sessions, err := s.Store.UserSessionIDs(ctx, u.ID)
	if err != nil {
		return err
	}
	for _, id := range sessions {
		s.Agent.Stop(id)
	}
	if err := s.Store.DeleteUser(ctx, u.ID); err != nil {
		if errs.Code(err) == errs.Conflict {
			return refuse(http.StatusConflict, "You cannot delete the last enabled admin.")
		}
		return err
	}
	s.Keys.Forget(u.ID)
	s.endUserSockets(u.ID)
	for _, id := range sessions {
		s.Agent.Stop(id) // a reply that started meanwhile can save nothing now
	}
	s.Log.Info("web: user deleted", "user_id", u.ID, "by", me.Username)
	return usersDone(c, "User "+u.Username+" deleted, with their chats, memories, runs and data key.")
}
