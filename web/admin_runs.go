package web

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"atrium/internal/errs"
	"atrium/internal/store"
	"atrium/internal/trace"
	"atrium/views"
)

// Settings → Runs: every user's runs for admins. The list is metadata; a run's
// content (its chat's title, error text and spans) is the admin's own or
// needs a Reveal, which is written to the audit log and shown to the run's
// owner, and lasts revealTTL.

// adminRunsPage is how many runs one page of the list shows.
const adminRunsPage = 50

// revealTTL is how long a reveal opens a run to the admin who made it: long
// enough to read and export it, short enough that coming back later writes a
// new line in the owner's log.
const revealTTL = time.Hour

// runFilter reads the list's filter from the query; a malformed field is
// errs.Invalid naming it.
func runFilter(q url.Values) (views.AdminRunFilter, store.RunFilter, error) {
	form := views.AdminRunFilter{User: q.Get("user"), Chat: strings.TrimSpace(q.Get("chat")), From: q.Get("from"), To: q.Get("to"),
		Status: q.Get("status"), Model: strings.TrimSpace(q.Get("model")), Tool: strings.TrimSpace(q.Get("tool")),
		MinSeconds: strings.TrimSpace(q.Get("min_s")), Failed: q.Get("failed") != ""}
	f := store.RunFilter{SessionID: form.Chat, Status: form.Status, Model: form.Model, Tool: form.Tool, FailedOnly: form.Failed}
	if form.User != "" {
		id, err := strconv.ParseInt(form.User, 10, 64)
		if err != nil || id <= 0 {
			return form, f, errs.E(errs.Invalid, "Choose a user from the list.")
		}
		f.OwnerID = id
	}
	day := func(name, v string) (time.Time, error) {
		if v == "" {
			return time.Time{}, nil
		}
		t, err := time.Parse("2006-01-02", v)
		if err != nil {
			return t, errs.E(errs.Invalid, "%s must be a date like 2026-01-31.", name)
		}
		return t, nil
	}
	var err error
	if f.From, err = day("From", form.From); err != nil {
		return form, f, err
	}
	if f.To, err = day("To", form.To); err != nil {
		return form, f, err
	}
	if !f.To.IsZero() {
		f.To = f.To.AddDate(0, 0, 1) // the To day is included
	}
	switch form.Status {
	case "", trace.StatusRunning, trace.StatusComplete, trace.StatusStopped, trace.StatusError:
	default:
		return form, f, errs.E(errs.Invalid, "Choose a status from the list.")
	}
	if form.MinSeconds != "" {
		sec, err := strconv.ParseFloat(form.MinSeconds, 64)
		if err != nil || sec < 0 || sec > 1e7 {
			return form, f, errs.E(errs.Invalid, "“At least” must be a number of seconds.")
		}
		f.MinDuration = time.Duration(sec * float64(time.Second))
	}
	return form, f, nil
}

// adminRunRow is r for the list: its content fields only when visible.
func adminRunRow(r store.RunInfo, owner, title string, mine, visible, imported, pinned bool) views.AdminRunRow {
	row := views.AdminRunRow{ID: r.ID, Owner: owner, Model: r.Model, Status: r.Status, SessionID: r.SessionID,
		Mine: mine, Visible: visible, Imported: imported, Pinned: pinned, Failed: r.Status == trace.StatusError || r.Error != "",
		StartedAt: r.StartedAt, Running: r.EndedAt.IsZero(), InputTokens: r.InputTokens, OutputTokens: r.OutputTokens, Steps: r.Steps}
	if !row.Running {
		row.Duration = r.EndedAt.Sub(r.StartedAt)
	}
	if visible {
		row.ChatTitle, row.Error = title, r.Error
	}
	return row
}

func (s *Server) adminRunsView(c echo.Context) (views.AdminRuns, int, error) {
	ctx := c.Request().Context()
	me, _ := currentUser(c)
	var v views.AdminRuns
	users, err := s.Store.ListUsers(ctx)
	if err != nil {
		return v, 0, err
	}
	for _, u := range users {
		v.Users = append(v.Users, views.AdminRunUser{ID: u.ID, Username: u.Username})
	}
	q := c.QueryParams()
	form, f, err := runFilter(q)
	v.Filter = form
	var after *store.RunCursor
	if err == nil && q.Get("after") != "" {
		cur, cerr := store.ParseRunCursor(q.Get("after"))
		after, err = &cur, cerr
	}
	if err != nil {
		v.Error = errs.Message(err)
		return v, http.StatusBadRequest, nil
	}
	list, next, err := s.Store.AllRuns(ctx, f, after, adminRunsPage)
	if err != nil {
		return v, 0, err
	}
	var others []string
	for _, r := range list {
		if r.OwnerID != me.ID {
			others = append(others, r.ID)
		}
	}
	revealed, err := s.Store.RevealedRuns(ctx, me.ID, others, s.Now().Add(-revealTTL))
	if err != nil {
		return v, 0, err
	}
	for _, r := range list {
		mine := r.OwnerID == me.ID
		v.Rows = append(v.Rows, adminRunRow(r.RunInfo, r.Owner, r.ChatTitle, mine, mine || revealed[r.ID], r.Imported, r.Pinned))
	}
	if next != nil {
		q.Set("after", next.String())
		v.Next = "/settings/runs?" + q.Encode()
	}
	return v, http.StatusOK, nil
}

func (s *Server) showAdminRuns(c echo.Context) error {
	v, status, err := s.adminRunsView(c)
	if err != nil {
		return err
	}
	v.Notice = c.QueryParam("notice")
	c.Response().Header().Set("Cache-Control", "no-store")
	return render(c, status, views.AdminRunsPage(s.page(c, "Runs of all users"), v))
}

// runVisible reports whether the current user may see run ri's content: it is
// theirs, or they are an admin who revealed it within revealTTL.
func (s *Server) runVisible(ctx context.Context, me store.User, ri store.RunInfo) (bool, error) {
	if ri.OwnerID == me.ID {
		return true, nil
	}
	if me.Role != store.RoleAdmin {
		return false, nil
	}
	return s.Store.RunRevealed(ctx, me.ID, ri.ID, s.Now().Add(-revealTTL))
}

// revealRun writes the reveal to the audit log, about the run's owner, then
// opens the run. The entry comes first, so content is never shown without one.
// The admin's own run needs none.
func (s *Server) revealRun(c echo.Context) error {
	ctx := c.Request().Context()
	me, _ := currentUser(c)
	ri, err := s.Store.RunByID(ctx, c.Param("rid"))
	if err != nil {
		return err
	}
	if ri.OwnerID != me.ID {
		if err := s.Store.AddAudit(ctx, &store.AuditEntry{ActorID: me.ID, SubjectID: ri.OwnerID,
			Action: store.AuditRevealRun, Detail: ri.ID}); err != nil {
			return err
		}
	}
	return c.Redirect(http.StatusSeeOther, "/settings/runs/"+url.PathEscape(ri.ID))
}

// showAdminRun shows one run of any user: its metadata, and its spans when
// runVisible. V1's run viewer replaces the plain span list when it lands.
func (s *Server) showAdminRun(c echo.Context) error {
	ctx := c.Request().Context()
	me, _ := currentUser(c)
	ri, err := s.Store.RunByID(ctx, c.Param("rid"))
	if err != nil {
		return err
	}
	visible, err := s.runVisible(ctx, me, ri)
	if err != nil {
		return err
	}
	owner, err := s.Store.UserByID(ctx, ri.OwnerID)
	if err != nil {
		return err
	}
	imported, err := s.Store.RunImported(ctx, ri.ID)
	if err != nil {
		return err
	}
	var v views.AdminRunPage
	title := ""
	if visible {
		if ri.SessionID != "" {
			sess, err := s.Store.SessionForOwner(ctx, ri.SessionID, ri.OwnerID)
			if err != nil && !errs.Is(err, errs.NotFound) {
				return err
			}
			title = sess.Title
		}
		if s.Recorder == nil {
			return errs.E(errs.NotFound, "runs are not recorded here")
		}
		_, spans, err := s.Recorder.Run(ctx, ri.OwnerID, ri.ID)
		if err != nil {
			return err
		}
		v.Spans = runSpanItems(ri, spans)
	}
	v.Run = adminRunRow(ri, owner.Username, title, ri.OwnerID == me.ID, visible, imported, false)
	c.Response().Header().Set("Cache-Control", "no-store")
	return render(c, http.StatusOK, views.AdminRunPageView(s.page(c, "Run"), v))
}

// runSpanItems is the plain list of spans: offsets from the run's start,
// nesting depth, data pretty-printed.
func runSpanItems(ri store.RunInfo, spans []store.SpanInfo) []views.RunSpanItem {
	depth := make(map[int64]int, len(spans))
	out := make([]views.RunSpanItem, 0, len(spans))
	for _, sp := range spans {
		d := 0
		if sp.ParentID != 0 {
			d = depth[sp.ParentID] + 1
		}
		depth[sp.ID] = d
		it := views.RunSpanItem{Seq: sp.Seq, Depth: d, Kind: sp.Kind, Name: sp.Name, Status: sp.Status, Error: sp.Error,
			Offset: sp.StartedAt.Sub(ri.StartedAt), Open: sp.EndedAt.IsZero(), TokensIn: sp.TokensIn, TokensOut: sp.TokensOut}
		if !it.Open {
			it.Duration = sp.EndedAt.Sub(sp.StartedAt)
		}
		if len(sp.Data) > 0 {
			var buf bytes.Buffer
			if json.Indent(&buf, sp.Data, "", "  ") == nil {
				it.Data = buf.String()
			} else {
				it.Data = string(sp.Data)
			}
		}
		out = append(out, it)
	}
	return out
}

// exportRun sends a run as an export file: the owner's own run, or any run an
// admin revealed. Anyone else gets the 404 of a missing run.
func (s *Server) exportRun(c echo.Context) error {
	ctx := c.Request().Context()
	me, _ := currentUser(c)
	ri, err := s.Store.RunByID(ctx, c.Param("rid"))
	if err != nil {
		return err
	}
	if ok, err := s.runVisible(ctx, me, ri); err != nil {
		return err
	} else if !ok || s.Recorder == nil {
		return echo.ErrNotFound
	}
	data, err := s.Recorder.ExportRun(ctx, ri.OwnerID, ri.ID)
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderContentDisposition, `attachment; filename="atrium-run-`+safeFileName(ri.ID)+`.json"`)
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.Blob(http.StatusOK, "application/json", data)
}

// safeFileName keeps letters, digits, '-' and '_' (run ids are UUIDs).
func safeFileName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || ('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') {
			return r
		}
		return -1
	}, s)
}

// importRun stores an uploaded export as a run of the importing admin, marked
// imported, without a chat. A refused file re-renders the list with the reason
// and stores nothing.
func (s *Server) importRun(c echo.Context) error {
	me, _ := currentUser(c)
	fail := func(err error) error {
		if c := errs.Code(err); c != errs.Invalid && c != errs.TooLarge {
			return err
		}
		v, _, verr := s.adminRunsView(c)
		if verr != nil {
			return verr
		}
		v.Error = errs.Message(err) + " Nothing was imported."
		status := http.StatusBadRequest
		if errs.Is(err, errs.TooLarge) {
			status = http.StatusRequestEntityTooLarge
		}
		return render(c, status, views.AdminRunsPage(s.page(c, "Runs of all users"), v))
	}
	data, ok, err := uploadedFile(c, "file", trace.MaxRunImportBytes)
	if err != nil {
		return err
	}
	if !ok {
		return fail(errs.E(errs.Invalid, "Choose a run export file first."))
	}
	if s.Recorder == nil {
		return errs.E(errs.NotFound, "runs are not recorded here")
	}
	ri, err := s.Recorder.ImportRun(c.Request().Context(), me.ID, s.NewID(), data)
	if err != nil {
		return fail(err)
	}
	return c.Redirect(http.StatusSeeOther, "/settings/runs/"+url.PathEscape(ri.ID))
}
