package web

import (
	"net/http"
	"strings"
	"unicode"
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

const maxTitle = 120

// cleanTitle trims a title to one line of at most maxTitle characters, without control
// characters (NUL, ESC, the rest of C0 and C1) or bidi controls, which could garble
// the chat list or make a title read differently from what it is (U+202E).
func cleanTitle(t string) string {
	t = strings.Map(func(r rune) rune {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			return ' '
		case unicode.IsControl(r), isBidiControl(r), r == utf8.RuneError:
			return -1
		}
		return r
	}, t)
	t = strings.Join(strings.Fields(t), " ")
	if utf8.RuneCountInString(t) > maxTitle {
		t = string([]rune(t)[:maxTitle-1]) + "…"
	}
	return t
}

// isBidiControl reports the explicit bidi formatting characters: embeddings and
// overrides (U+202A–U+202E), isolates (U+2066–U+2069) and the marks LRM, RLM and ALM.
func isBidiControl(r rune) bool {
	return (r >= 0x202A && r <= 0x202E) || (r >= 0x2066 && r <= 0x2069) || r == 0x200E || r == 0x200F || r == 0x061C
}

func (s *Server) renameSession(c echo.Context) error {
	ss, err := s.ownedSession(c)
	if err != nil {
		return err
	}
	title := cleanTitle(c.FormValue("title"))
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
