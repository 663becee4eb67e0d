package web

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"atrium/internal/errs"
	"atrium/internal/memory"
	"atrium/views"
)

// memorySearchHits is how many hits the page's search shows: more than a turn
// injects (≤ 5), since the user is looking for something, not ranking it.
const memorySearchHits = 20

var memoryKinds = []string{memory.KindPreference, memory.KindFact, memory.KindInstruction, memory.KindOther}

// memoryItem maps a memory to its view; a chat source links to its message.
func memoryItem(m memory.Memory) views.MemoryItem {
	it := views.MemoryItem{ID: m.ID, Kind: m.Kind, Text: m.Text, Source: m.Source.Kind,
		CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt, LastUsedAt: m.LastUsedAt, UseCount: m.UseCount}
	if m.Source.Kind == memory.SourceChat && m.Source.SessionID != "" {
		it.ChatURL = "/s/" + url.PathEscape(m.Source.SessionID)
		if m.Source.MessageSeq != nil {
			it.ChatURL += "#msg-" + strconv.FormatInt(*m.Source.MessageSeq, 10)
		}
	}
	return it
}

// memoriesView loads the page model: the whole list, or the search hits for q.
func (s *Server) memoriesView(ctx context.Context, owner int64, q string) (views.Memories, error) {
	v := views.Memories{Query: strings.TrimSpace(q), Kinds: memoryKinds, Add: views.MemoryForm{Kind: memory.KindFact}}
	all, err := s.Memory.List(ctx, owner)
	if err != nil {
		return v, err
	}
	v.Total = len(all)
	st, err := s.Memory.Settings(ctx, owner)
	if err != nil {
		return v, err
	}
	v.Settings = views.MemorySettings{Enabled: st.Enabled, Extract: st.Extract, Ask: st.Ask}
	sugs, err := s.Memory.Suggestions(ctx, owner, "")
	if err != nil {
		return v, err
	}
	for _, sg := range sugs {
		v.Suggestions = append(v.Suggestions, suggestionView(sg))
	}
	v.InstanceOff = st.InstanceOff
	if v.Audit, err = s.memoryAudit(ctx, owner); err != nil {
		return v, err
	}
	if v.Query == "" {
		for _, m := range all {
			v.Items = append(v.Items, memoryItem(m))
		}
		return v, nil
	}
	res, err := s.Memory.Search(ctx, owner, v.Query, memorySearchHits)
	if err != nil {
		return v, err
	}
	v.LexicalOnly = res.LexicalOnly
	v.Reindexing = errors.Is(res.VectorErr, memory.ErrReindexing)
	if res.VectorErr != nil && !v.Reindexing {
		s.Log.Warn("web: memory search without vectors", "err", res.VectorErr)
	}
	for _, h := range res.Hits {
		v.Items = append(v.Items, memoryItem(h.Memory))
	}
	return v, nil
}

func (s *Server) showMemories(c echo.Context) error {
	u, _ := currentUser(c)
	v, err := s.memoriesView(c.Request().Context(), u.ID, c.QueryParam("q"))
	if err != nil {
		return err
	}
	v.Notice = c.QueryParam("notice")
	return render(c, http.StatusOK, views.MemoriesPage(s.page(c, "Memories"), v))
}

// setMemorySettings saves the user's memory switches.
func (s *Server) setMemorySettings(c echo.Context) error {
	u, _ := currentUser(c)
	st := memory.Settings{Enabled: c.FormValue("enabled") == "on", Extract: c.FormValue("extract") == "on",
		Ask: c.FormValue("ask") == "on"}
	if err := s.Memory.SetSettings(c.Request().Context(), u.ID, st); err != nil {
		return err
	}
	return memoriesDone(c, "Memory settings saved.")
}

// memoriesDone redirects to the list with a notice; never with memory text, which
// would end up in the browser history and access logs.
func memoriesDone(c echo.Context, notice string) error {
	return c.Redirect(http.StatusSeeOther, "/memories?notice="+url.QueryEscape(notice))
}

// memoryFormError re-renders the page with a user-facing error on one of its forms
// (set by fill); internal errors go to the error handler.
func (s *Server) memoryFormError(c echo.Context, err error, fill func(*views.Memories, string)) error {
	if errs.Code(err) == errs.Internal {
		return err
	}
	u, _ := currentUser(c)
	v, verr := s.memoriesView(c.Request().Context(), u.ID, "")
	if verr != nil {
		return verr
	}
	fill(&v, errs.Message(err))
	return render(c, statusOf(errs.Code(err)), views.MemoriesPage(s.page(c, "Memories"), v))
}

func (s *Server) createMemory(c echo.Context) error {
	u, _ := currentUser(c)
	kind, text := c.FormValue("kind"), c.FormValue("text")
	if _, err := s.Memory.Save(c.Request().Context(), u.ID, kind, text, memory.Source{Kind: memory.SourceManual}, 1); err != nil {
		return s.memoryFormError(c, err, func(v *views.Memories, msg string) {
			v.Add = views.MemoryForm{Kind: kind, Text: text, Error: msg}
		})
	}
	return memoriesDone(c, "Memory saved.")
}

// ownedMemory is the user's memory named by the :id parameter. Another user's id
// answers the same 404 as a missing one, before anything else is checked, so the
// answer never depends on whose id it is.
func (s *Server) ownedMemory(c echo.Context, id string) (memory.Memory, error) {
	u, _ := currentUser(c)
	m, err := s.Memory.Get(c.Request().Context(), u.ID, id)
	if errs.Is(err, errs.NotFound) {
		return m, echo.ErrNotFound
	}
	return m, err
}

func (s *Server) updateMemory(c echo.Context) error {
	m, err := s.ownedMemory(c, c.Param("id"))
	if err != nil {
		return err
	}
	text := c.FormValue("text")
	if _, err := s.Memory.Update(c.Request().Context(), m.OwnerID, m.ID, text); err != nil {
		if errs.Is(err, errs.NotFound) { // forgotten meanwhile, e.g. in another tab
			return echo.ErrNotFound
		}
		return s.memoryFormError(c, err, func(v *views.Memories, msg string) {
			v.Edit = views.MemoryForm{ID: m.ID, Kind: m.Kind, Text: text, Error: msg}
		})
	}
	return memoriesDone(c, "Memory updated.")
}

func (s *Server) deleteMemory(c echo.Context) error {
	m, err := s.ownedMemory(c, c.Param("id"))
	if err != nil {
		return err
	}
	if err := s.Memory.Forget(c.Request().Context(), m.OwnerID, m.ID); err != nil {
		if errs.Is(err, errs.NotFound) {
			return echo.ErrNotFound
		}
		return err
	}
	return memoriesDone(c, "Memory forgotten.")
}

// deleteMemories forgets the selected memories. Every id is checked first, so a
// foreign or missing id answers 404 and forgets nothing.
func (s *Server) deleteMemories(c echo.Context) error {
	form, err := c.FormParams()
	if err != nil {
		return errs.E(errs.Invalid, "Bad form.")
	}
	ids := form["id"]
	if len(ids) == 0 {
		return s.memoryFormError(c, errs.E(errs.Invalid, "Select the memories to forget first."), func(v *views.Memories, msg string) {
			v.Error = msg
		})
	}
	var owned []memory.Memory
	for _, id := range ids {
		m, err := s.ownedMemory(c, id)
		if err != nil {
			return err
		}
		owned = append(owned, m)
	}
	n := 0
	for _, m := range owned {
		err := s.Memory.Forget(c.Request().Context(), m.OwnerID, m.ID)
		if errs.Is(err, errs.NotFound) { // the same id twice, or forgotten meanwhile
			continue
		}
		if err != nil {
			return err
		}
		n++
	}
	return memoriesDone(c, "Forgot "+strconv.Itoa(n)+" "+pluralWord(n, "memory", "memories")+".")
}

func (s *Server) forgetAllMemories(c echo.Context) error {
	if !strings.EqualFold(strings.Join(strings.Fields(c.FormValue("confirm")), " "), views.ForgetAllWord) {
		return s.memoryFormError(c, errs.E(errs.Invalid, "Type “%s” to confirm; nothing was forgotten.", views.ForgetAllWord),
			func(v *views.Memories, msg string) { v.ForgetError = msg })
	}
	u, _ := currentUser(c)
	n, err := s.Memory.ForgetAll(c.Request().Context(), u.ID)
	if err != nil {
		return err
	}
	return memoriesDone(c, "Forgot all "+strconv.Itoa(n)+" "+pluralWord(n, "memory", "memories")+".")
}

func pluralWord(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
