package web

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"atrium/internal/contextwin"
	"atrium/internal/errs"
	"atrium/internal/store"
	"atrium/internal/tools"
	"atrium/internal/trace"
	"atrium/views"
)

const messagesPerPage = 50

// showChat renders a session: the latest page of messages plus the reply in flight.
func (s *Server) showChat(c echo.Context) error {
	ss, err := s.ownedSession(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	chat, err := s.chatViewAt(ctx, ss, s.Hub.Snapshot(ss.ID), atParam(c))
	if err != nil {
		return err
	}
	if chat.Sessions, err = s.sessionList(c, "", ss.ID); err != nil {
		return err
	}
	return render(c, http.StatusOK, views.ChatPage(s.page(c, chat.Session.Title), chat))
}

// chatView builds the message area of a session. Messages that belong to the live reply
// (committed a moment before the hub heard of it) are left out; the live view shows them.
func (s *Server) chatView(ctx context.Context, ss store.Session, snap Snapshot) (views.Chat, error) {
	msgs, hasOlder, err := s.Store.LatestTurns(ctx, ss.ID, messagesPerPage)
	if err != nil {
		return views.Chat{}, err
	}
	chat := views.Chat{Session: sessionItem(ss, ss.ID), Live: snap.Live, RunState: "idle",
		MaxMessageBytes: s.Config.MaxMessageBytes}
	if snap.Live != nil {
		chat.RunState = "streaming"
	}
	if chat.Messages, err = s.pageViews(ctx, ss.ID, msgs, liveHider(snap)); err != nil {
		return views.Chat{}, err
	}
	if err := s.fillMemoryChips(ctx, ss.OwnerID, ss.ID, chat.Messages); err != nil {
		return views.Chat{}, err
	}
	if err := s.linkRuns(ctx, ss.OwnerID, chat.Messages); err != nil {
		return views.Chat{}, err
	}
	chat.Task = taskView(ss.ID, ss.State, "")
	chat.SystemPrompt, chat.MaxSystemPrompt = ss.SystemPrompt, store.MaxSystemPrompt
	chat.Meter = s.lastMeter(ctx, ss)
	chat.MCP = s.mcpIndicator()
	if hasOlder && len(msgs) > 0 {
		chat.OlderCursor = msgs[0].Seq
	}
	chat.Models, chat.Notice, err = s.modelOptions(ctx, ss.Model)
	return chat, err
}

// modelOptions lists the model choices with the session's one selected. The first
// option, "Default", follows the instance default.
func (s *Server) modelOptions(ctx context.Context, selected string) ([]views.ModelOption, string, error) {
	choices, err := s.Providers.Choices(ctx)
	if err != nil {
		return nil, "", err
	}
	def, err := s.Providers.Default(ctx)
	if err != nil {
		return nil, "", err
	}
	defLabel, defVision := "Default", false
	for _, ch := range choices {
		if ch.Value == def {
			defLabel, defVision = "Default ("+ch.Label+")", ch.Vision
		}
	}
	opts := []views.ModelOption{{Value: "", Label: defLabel, Selected: selected == "", Vision: defVision}}
	for _, ch := range choices {
		opts = append(opts, views.ModelOption{Value: ch.Value, Label: ch.Label, Selected: ch.Value == selected, Vision: ch.Vision})
	}
	notice := ""
	if len(choices) == 0 {
		notice = "No model is configured yet. An admin can add one in Settings → Providers."
	} else if def == "" && selected == "" {
		notice = "No default model is set: pick a model for this chat, or an admin can set a default in Settings → Providers."
	}
	return opts, notice, nil
}

// olderMessages serves the page of messages before ?before=SEQ.
func (s *Server) olderMessages(c echo.Context) error {
	ss, err := s.ownedSession(c)
	if err != nil {
		return err
	}
	before, err := strconv.ParseInt(c.QueryParam("before"), 10, 64)
	if err != nil || before <= 0 {
		return errs.E(errs.Invalid, "Bad 'before' parameter.")
	}
	msgs, hasOlder, err := s.Store.TurnsBefore(c.Request().Context(), ss.ID, before, messagesPerPage)
	if err != nil {
		return err
	}
	items, err := s.pageViews(c.Request().Context(), ss.ID, msgs, nil)
	if err != nil {
		return err
	}
	if err := s.fillMemoryChips(c.Request().Context(), ss.OwnerID, ss.ID, items); err != nil {
		return err
	}
	if err := s.linkRuns(c.Request().Context(), ss.OwnerID, items); err != nil {
		return err
	}
	var cursor int64
	if hasOlder && len(msgs) > 0 {
		cursor = msgs[0].Seq
	}
	return render(c, http.StatusOK, views.OlderMessages(ss.ID, items, cursor))
}

// messageViews maps a page of messages to views: user and assistant messages, with tool
// results folded into the cards of the step that called them. hide leaves out
// assistant messages (those that belong to the reply still streaming).
func messageViews(msgs []store.Message, hide func(store.Message) bool) []views.Message {
	results := map[string]*store.Message{}
	for i := range msgs {
		if msgs[i].Role == store.RoleTool && msgs[i].CallKey != "" {
			results[msgs[i].CallKey] = &msgs[i]
		}
	}
	out := make([]views.Message, 0, len(msgs))
	for _, m := range msgs {
		if m.Role != store.RoleUser && m.Role != store.RoleAssistant {
			continue
		}
		if hide != nil && m.Role == store.RoleAssistant && hide(m) {
			continue
		}
		out = append(out, messageView(m, results))
	}
	// A reply ends its turn where the next message shown is the user's, or none: it
	// offers Regenerate (or Retry).
	for i := range out {
		out[i].TurnEnd = out[i].Role == store.RoleAssistant && (i+1 == len(out) || out[i+1].Role == store.RoleUser)
	}
	return out
}

// pageViews maps a page of the branch on screen to views (see messageViews) with the
// version pagers of the messages that have other versions.
func (s *Server) pageViews(ctx context.Context, sessionID string, msgs []store.Message, hide func(store.Message) bool) ([]views.Message, error) {
	if err := s.withFiles(ctx, sessionID, msgs); err != nil {
		return nil, err
	}
	out := messageViews(msgs, hide)
	versions, err := s.Store.MessageVersions(ctx, sessionID, msgs)
	if err != nil || len(versions) == 0 {
		return out, err
	}
	for i := range out {
		if v, ok := versions[out[i].ID]; ok {
			out[i].Versions = &views.Versions{Index: v.Index, Count: v.Count, Prev: v.Prev, Next: v.Next}
		}
	}
	return out, nil
}

// lastMeter is the context meter of the session's latest recorded step, or nil.
func (s *Server) lastMeter(ctx context.Context, ss store.Session) *views.ContextMeter {
	if s.Recorder == nil {
		return nil
	}
	raw, err := s.Recorder.LatestSpanData(ctx, ss.OwnerID, ss.ID, trace.KindContext)
	if err != nil || raw == nil {
		return nil
	}
	var data struct{ Zones []contextwin.Zone }
	if json.Unmarshal(raw, &data) != nil || len(data.Zones) == 0 {
		return nil
	}
	return meterView(data.Zones)
}

// saveTask sets the session's task state from the side panel. Validation failures come
// back as the panel with the error (200, so htmx swaps it) and change nothing.
func (s *Server) saveTask(c echo.Context) error {
	ss, err := s.ownedSession(c)
	if err != nil {
		return err
	}
	state := tools.TaskState{
		Goal:      strings.TrimSpace(c.FormValue("goal")),
		Stage:     strings.TrimSpace(c.FormValue("stage")),
		UpdatedAt: s.Now().UTC(),
	}
	// A refused task answers 422 with the form and the reason (app.js swaps a 422 in
	// place), and is logged: it is the user's input, not a server failure.
	fail := func(msg string) error {
		s.Log.Info("web: task refused", "session", ss.ID, "reason", msg)
		v := taskView(ss.ID, nil, msg)
		v.Goal, v.Stage, v.Params = state.Goal, state.Stage, c.FormValue("params")
		return render(c, http.StatusUnprocessableEntity, views.TaskPanelBox(v))
	}
	if p := strings.TrimSpace(c.FormValue("params")); p != "" {
		if err := json.Unmarshal([]byte(p), &state.Params); err != nil || state.Params == nil {
			return fail("Params must be a JSON object, e.g. {\"city\": \"Paris\"}.")
		}
	}
	raw := state.JSON()
	if err := tools.ValidateTaskState(raw); err != nil {
		return fail(taskProblem(err))
	}
	if err := s.Store.SetSessionState(c.Request().Context(), ss.ID, ss.OwnerID, raw); err != nil {
		return err
	}
	panel := taskView(ss.ID, raw, "")
	s.Hub.broadcastTo(ss.ID, renderFrame(views.FrameTaskPanel(panel)))
	return render(c, http.StatusOK, views.TaskPanelBox(panel))
}

// taskProblem is the reason a task state was refused, for the user: the validator's
// detail (e.g. "goal: at most 1000 characters"), never the generic server error.
func taskProblem(err error) string {
	var te *tools.Error
	if errors.As(err, &te) && te.Detail != "" {
		return "The task was not saved: " + te.Detail
	}
	return errs.Message(err)
}
