package web

import (
	"context"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"atrium/internal/errs"
	"atrium/internal/store"
	"atrium/views"
)

// hideFromNonAdmins answers 404 to anyone but an admin: the admin Memories pages
// reach into other users' memories, so to a user they do not exist, as another
// user's memory does not.
func (s *Server) hideFromNonAdmins(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if u, _ := currentUser(c); u.Role != store.RoleAdmin {
			return echo.ErrNotFound
		}
		return next(c)
	}
}

// adminMemoriesView is every user with the metadata of their memories; no text
// is opened.
func (s *Server) adminMemoriesView(ctx context.Context) (views.AdminMemories, error) {
	users, err := s.Store.ListUsers(ctx)
	if err != nil {
		return views.AdminMemories{}, err
	}
	stats, err := s.Store.MemoryStatsByOwner(ctx)
	if err != nil {
		return views.AdminMemories{}, err
	}
	var v views.AdminMemories
	if v.Instance, err = s.memoryInstanceView(ctx, nil); err != nil {
		return v, err
	}
	for _, u := range users {
		au := views.AdminMemoryUser{ID: u.ID, Username: u.Username}
		if st := stats[u.ID]; st != nil {
			au.Count, au.Bytes, au.Oldest, au.Newest, au.LastUsed = st.Count, st.SealedBytes, st.Oldest, st.Newest, st.LastUsed
			for _, k := range memoryKinds {
				if n := st.Kinds[k]; n > 0 {
					au.Kinds = append(au.Kinds, views.MemoryKindCount{Kind: k, Count: n})
				}
			}
			var other []string // kinds this build does not list, still counted
			for k := range st.Kinds {
				if !isMemoryKind(k) {
					other = append(other, k)
				}
			}
			sort.Strings(other)
			for _, k := range other {
				au.Kinds = append(au.Kinds, views.MemoryKindCount{Kind: k, Count: st.Kinds[k]})
			}
		}
		v.Users = append(v.Users, au)
	}
	return v, nil
}

func isMemoryKind(k string) bool {
	for _, m := range memoryKinds {
		if m == k {
			return true
		}
	}
	return false
}

// renderAdminMemories renders the page after fill has adjusted the user uid's
// entry (a reveal, a form error).
func (s *Server) renderAdminMemories(c echo.Context, status int, uid int64, fill func(*views.AdminMemoryUser)) error {
	v, err := s.adminMemoriesView(c.Request().Context())
	if err != nil {
		return err
	}
	for i := range v.Users {
		if v.Users[i].ID == uid && fill != nil {
			fill(&v.Users[i])
		}
	}
	return render(c, status, views.AdminMemoriesPage(s.page(c, "Memories of all users"), v))
}

func (s *Server) showAdminMemories(c echo.Context) error {
	v, err := s.adminMemoriesView(c.Request().Context())
	if err != nil {
		return err
	}
	v.Notice = c.QueryParam("notice")
	return render(c, http.StatusOK, views.AdminMemoriesPage(s.page(c, "Memories of all users"), v))
}

func adminMemoriesDone(c echo.Context, notice string) error {
	return c.Redirect(http.StatusSeeOther, "/settings/memories?notice="+url.QueryEscape(notice))
}

// audit writes what the current admin did to subject's memories.
func (s *Server) audit(c echo.Context, subject int64, action, detail string) error {
	me, _ := currentUser(c)
	return s.Store.AddAudit(c.Request().Context(), &store.AuditEntry{ActorID: me.ID, SubjectID: subject, Action: action, Detail: detail})
}

// revealMemories shows the user's texts in this response only: not in a cookie
// or URL, so a reload or a shared link shows metadata again. The audit entry is
// written first, so texts are never shown without one.
func (s *Server) revealMemories(c echo.Context) error {
	u, err := s.targetUser(c)
	if err != nil {
		return err
	}
	ms, err := s.Memory.List(c.Request().Context(), u.ID)
	if err != nil {
		return err
	}
	if err := s.audit(c, u.ID, store.AuditReveal, strconv.Itoa(len(ms))); err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return s.renderAdminMemories(c, http.StatusOK, u.ID, func(au *views.AdminMemoryUser) {
		au.Revealed = true
		for _, m := range ms {
			au.Items = append(au.Items, memoryItem(m))
		}
	})
}

// adminDeleteMemories forgets the selected memories of the user. Every id is
// checked first, so an id that is not this user's answers 404 and forgets nothing.
func (s *Server) adminDeleteMemories(c echo.Context) error {
	u, err := s.targetUser(c)
	if err != nil {
		return err
	}
	form, err := c.FormParams()
	if err != nil {
		return errs.E(errs.Invalid, "Bad form.")
	}
	ids := form["id"]
	if len(ids) == 0 {
		v, err := s.adminMemoriesView(c.Request().Context())
		if err != nil {
			return err
		}
		v.Error = "Select the memories to delete first."
		return render(c, http.StatusBadRequest, views.AdminMemoriesPage(s.page(c, "Memories of all users"), v))
	}
	ctx := c.Request().Context()
	for _, id := range ids {
		if _, err := s.Memory.Get(ctx, u.ID, id); errs.Is(err, errs.NotFound) {
			return echo.ErrNotFound
		} else if err != nil {
			return err
		}
	}
	var done []string
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		err := s.Memory.Forget(ctx, u.ID, id)
		if errs.Is(err, errs.NotFound) { // forgotten meanwhile
			continue
		}
		if err != nil {
			return s.auditPartial(c, u.ID, done, err)
		}
		done = append(done, id)
	}
	if err := s.audit(c, u.ID, store.AuditDelete, strings.Join(done, " ")); err != nil {
		return err
	}
	n := len(done)
	return adminMemoriesDone(c, "Deleted "+strconv.Itoa(n)+" of "+u.Username+"’s "+pluralWord(n, "memory", "memories")+".")
}

// auditPartial records the deletes that happened before a failure, then
// returns the failure: the log must not miss a delete.
func (s *Server) auditPartial(c echo.Context, subject int64, done []string, err error) error {
	if len(done) > 0 {
		if aerr := s.audit(c, subject, store.AuditDelete, strings.Join(done, " ")); aerr != nil {
			s.Log.Error("web: audit of a partial delete", "err", aerr)
		}
	}
	return err
}

// adminForgetAll deletes all of the user's memories after the admin typed the
// username: a per-user word, so a confirmation meant for one row cannot hit another.
func (s *Server) adminForgetAll(c echo.Context) error {
	u, err := s.targetUser(c)
	if err != nil {
		return err
	}
	if !strings.EqualFold(strings.TrimSpace(c.FormValue("confirm")), u.Username) {
		return s.renderAdminMemories(c, http.StatusBadRequest, u.ID, func(au *views.AdminMemoryUser) {
			au.ForgetError = "Type the username “" + u.Username + "” to confirm; nothing was deleted."
		})
	}
	n, err := s.Memory.ForgetAll(c.Request().Context(), u.ID)
	if err != nil {
		return err
	}
	if err := s.audit(c, u.ID, store.AuditDeleteAll, strconv.Itoa(n)); err != nil {
		return err
	}
	return adminMemoriesDone(c, "Deleted all "+strconv.Itoa(n)+" of "+u.Username+"’s "+pluralWord(n, "memory", "memories")+".")
}

// memoryAudit is what admins did to owner's memories, for the owner's page.
func (s *Server) memoryAudit(ctx context.Context, owner int64) ([]views.MemoryAuditItem, error) {
	entries, err := s.Store.AuditAbout(ctx, owner, memoryAuditShown)
	if err != nil {
		return nil, err
	}
	out := make([]views.MemoryAuditItem, 0, len(entries))
	for _, e := range entries {
		it := views.MemoryAuditItem{At: e.At, Admin: e.ActorName, Action: e.Action}
		switch e.Action {
		case store.AuditDelete:
			it.Count = len(strings.Fields(e.Detail))
		case store.AuditRevealRun:
			it.Run = e.Detail
		default:
			it.Count, _ = strconv.Atoi(e.Detail)
		}
		out = append(out, it)
	}
	return out, nil
}

// memoryAuditShown is how many audit entries the user's page lists: enough to
// notice a pattern, without turning the page into a log viewer.
const memoryAuditShown = 50
