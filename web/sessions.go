package web

import (
	"net/http"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"atrium/internal/errs"
	"atrium/internal/providers"
	"atrium/internal/store"
	"atrium/views"
)

const sessionsPerPage = 30

// sessionList loads one page of the user's sessions, most recent first.
func (s *Server) sessionList(c echo.Context, cursor, activeID string) (views.SessionList, error) {
	u, _ := currentUser(c)
	var after *store.SessionCursor
	if cursor != "" {
		cur, err := store.ParseSessionCursor(cursor)
		if err != nil {
			return views.SessionList{}, errs.E(errs.Invalid, "Bad page cursor.")
		}
		after = &cur
	}
	list, next, err := s.Store.ListSessions(c.Request().Context(), u.ID, after, sessionsPerPage)
	if err != nil {
		return views.SessionList{}, err
	}
	out := views.SessionList{Items: make([]views.SessionItem, 0, len(list))}
	for _, ss := range list {
		out.Items = append(out.Items, sessionItem(ss, activeID))
	}
	if next != nil {
		out.NextCursor = next.String()
	}
	return out, nil
}

func sessionItem(ss store.Session, activeID string) views.SessionItem {
	title := ss.Title
	if title == "" {
		title = "New chat"
	}
	return views.SessionItem{ID: ss.ID, Title: title, UpdatedAt: ss.UpdatedAt, Active: ss.ID == activeID, Temporary: ss.Temporary}
}

func (s *Server) showHome(c echo.Context) error {
	list, err := s.sessionList(c, "", "")
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.HomePage(s.page(c, "Atrium"), list))
}

// listSessions serves the next page of the sidebar.
func (s *Server) listSessions(c echo.Context) error {
	list, err := s.sessionList(c, c.QueryParam("cursor"), c.QueryParam("active"))
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.SessionListItems(list))
}

func (s *Server) createSession(c echo.Context) error {
	u, _ := currentUser(c)
	// A temporary chat neither reads nor writes long-term memory.
	ss := &store.Session{ID: s.NewID(), OwnerID: u.ID, Temporary: c.FormValue("temporary") == "1"}
	if err := s.Store.CreateSession(c.Request().Context(), ss); err != nil {
		return err
	}
	return redirect(c, "/s/"+ss.ID)
}

func (s *Server) renameSession(c echo.Context) error {
	ss, err := s.ownedSession(c)
	if err != nil {
		return err
	}
	title := store.CleanTitle(c.FormValue("title"))
	if title == "" || !utf8.ValidString(title) {
		return errs.E(errs.Invalid, "A title needs some text.")
	}
	if err := s.Store.RenameSession(c.Request().Context(), ss.ID, ss.OwnerID, title); err != nil {
		return err
	}
	ss.Title = title
	frame := renderFrame(views.FrameSessionTitle(sessionItem(ss, ss.ID)))
	s.Hub.broadcastTo(ss.ID, frame)
	return c.HTMLBlob(http.StatusOK, frame)
}

func (s *Server) deleteSession(c echo.Context) error {
	ss, err := s.ownedSession(c)
	if err != nil {
		return err
	}
	s.Agent.Stop(ss.ID)
	if err := s.Store.DeleteSession(c.Request().Context(), ss.ID, ss.OwnerID); err != nil {
		return err
	}
	return redirect(c, "/")
}

func (s *Server) setSessionModel(c echo.Context) error {
	ss, err := s.ownedSession(c)
	if err != nil {
		return err
	}
	model := c.FormValue("model")
	if model != "" {
		choices, err := s.Providers.Choices(c.Request().Context())
		if err != nil {
			return err
		}
		if !providers.HasChoice(choices, model) {
			return errs.E(errs.Invalid, "Unknown model.")
		}
	}
	if err := s.Store.SetSessionModel(c.Request().Context(), ss.ID, ss.OwnerID, model); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) stopSession(c echo.Context) error {
	ss, err := s.ownedSession(c)
	if err != nil {
		return err
	}
	s.Agent.Stop(ss.ID)
	return c.NoContent(http.StatusNoContent)
}
