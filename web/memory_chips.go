package web

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"atrium/internal/errs"
	"atrium/internal/memory"
	"atrium/internal/store"
	"atrium/views"
)

// This file is memory in the chat: the chips of a reply for what its "remember …"
// saved (with Undo) and for what extraction suggests under "ask before saving"
// (Accept / Reject), over HTTP (the chips' buttons, the Memories page) and over the
// chat's websocket. Every action is owner-checked first: another user's memory,
// suggestion or chat answers 404 (a "Not found" notice on the websocket).

// savedViews are the chips of a message's saved memories, as just saved.
func savedViews(m store.Message) []views.SavedMemory {
	var out []views.SavedMemory
	for _, id := range m.Saved {
		out = append(out, views.SavedMemory{ID: id, SessionID: m.SessionID, State: views.SavedShown})
	}
	return out
}

// suggestionView maps a suggestion to its chip.
func suggestionView(sg memory.Suggestion) views.MemorySuggestion {
	v := views.MemorySuggestion{ID: sg.ID, Op: sg.Op, Kind: sg.Kind, Text: sg.Text, CreatedAt: sg.CreatedAt, ExpiresAt: sg.ExpiresAt}
	if sg.Source.SessionID != "" {
		v.ChatURL = "/s/" + sg.Source.SessionID
		if sg.ReplySeq != nil {
			v.ChatURL += "#msg-" + strconv.FormatInt(*sg.ReplySeq, 10)
		}
	}
	return v
}

// fillMemoryChips brings a page of messages' memory chips up to date from stored
// data: whether each saved memory is still as saved (Undo offered), edited or gone,
// and the session's pending suggestions on the replies they were made after.
func (s *Server) fillMemoryChips(ctx context.Context, owner int64, sessionID string, msgs []views.Message) error {
	if s.Memory == nil {
		return nil
	}
	for i := range msgs {
		for j := range msgs[i].Saved {
			sm := &msgs[i].Saved[j]
			m, err := s.Memory.Get(ctx, owner, sm.ID)
			switch {
			case errs.Is(err, errs.NotFound):
				sm.State = views.SavedGone
			case err != nil:
				return err
			case m.UpdatedAt.After(m.CreatedAt):
				sm.State = views.SavedEdited
			}
		}
	}
	sugs, err := s.Memory.Suggestions(ctx, owner, sessionID)
	if err != nil || len(sugs) == 0 {
		return err
	}
	byReply := map[int64][]views.MemorySuggestion{}
	for _, sg := range sugs {
		if sg.ReplySeq != nil {
			byReply[*sg.ReplySeq] = append(byReply[*sg.ReplySeq], suggestionView(sg))
		}
	}
	for i := range msgs {
		if msgs[i].Role == store.RoleAssistant {
			msgs[i].Suggestions = byReply[msgs[i].Seq]
		}
	}
	return nil
}

// undoSave answers the Undo of a saved-memory chip: POST /s/:id/memories/:mid/undo.
func (s *Server) undoSave(c echo.Context) error {
	ss, err := s.ownedSession(c)
	if err != nil {
		return err
	}
	sm, err := s.undo(c.Request().Context(), ss, c.Param("mid"))
	if err != nil {
		return err
	}
	if !isHTMX(c) {
		return c.Redirect(http.StatusSeeOther, "/s/"+ss.ID)
	}
	return render(c, http.StatusOK, views.SavedChip(sm))
}

// undo removes the memory that an explicit save in session ss created (ss is the
// user's). Only an id that a message of ss records as saved can be undone: any other
// (another user's memory, one this chat did not save) is a 404. A memory edited or
// forgotten since is left as it is, and the chip says so. Every tab of the chat gets
// the new chip.
func (s *Server) undo(ctx context.Context, ss store.Session, id string) (views.SavedMemory, error) {
	ok, err := s.Store.SessionSavedMemory(ctx, ss.ID, id)
	if err != nil {
		return views.SavedMemory{}, err
	}
	if !ok || s.Memory == nil {
		return views.SavedMemory{}, echo.ErrNotFound
	}
	outcome, err := s.Memory.UndoSave(ctx, ss.OwnerID, id)
	if err != nil {
		return views.SavedMemory{}, err
	}
	sm := views.SavedMemory{ID: id, SessionID: ss.ID, State: views.SavedGone}
	switch outcome {
	case memory.UndoDone:
		sm.State = views.SavedUndone
	case memory.UndoEdited:
		sm.State = views.SavedEdited
	}
	s.Hub.broadcastTo(ss.ID, renderFrame(views.FrameSavedChip(sm)))
	return sm, nil
}

func (s *Server) acceptSuggestion(c echo.Context) error { return s.answerSuggestion(c, true) }
func (s *Server) rejectSuggestion(c echo.Context) error { return s.answerSuggestion(c, false) }

// answerSuggestion: POST /memories/suggestions/:sid/accept or /reject, from a chip
// (htmx: the chip is replaced by the outcome) or the Memories page (a redirect).
func (s *Server) answerSuggestion(c echo.Context, accept bool) error {
	u, _ := currentUser(c)
	id := c.Param("sid")
	outcome, err := s.handleSuggestion(c.Request().Context(), u.ID, id, accept)
	if err != nil {
		return err
	}
	if !isHTMX(c) {
		return memoriesDone(c, outcome)
	}
	return render(c, http.StatusOK, views.SuggestionDone(id, outcome))
}

// handleSuggestion accepts or rejects owner's suggestion id and returns what the user
// is told. A refused text (a secret, injection) is not an error here: the suggestion
// is gone and the outcome says why nothing was saved.
func (s *Server) handleSuggestion(ctx context.Context, owner int64, id string, accept bool) (string, error) {
	if s.Memory == nil {
		return "", echo.ErrNotFound
	}
	sg, err := s.Memory.Suggestion(ctx, owner, id)
	if errs.Is(err, errs.NotFound) {
		return "", echo.ErrNotFound
	}
	if err != nil {
		return "", err
	}
	outcome := "Not saved."
	if accept {
		var how string
		_, how, err = s.Memory.AcceptSuggestion(ctx, owner, id)
		switch {
		case errs.Code(err) == errs.Invalid:
			outcome, err = "Not saved: "+errs.Message(err), nil
		case how == memory.Added:
			outcome = "Saved to memory."
		case how == memory.Updated:
			outcome = "Memory updated."
		case how == memory.Merged:
			outcome = "Already in memory; nothing added."
		}
	} else {
		err = s.Memory.RejectSuggestion(ctx, owner, id)
	}
	if errs.Is(err, errs.NotFound) { // handled meanwhile, e.g. in another tab
		return "", echo.ErrNotFound
	}
	if err != nil {
		return "", err
	}
	if sg.Source.SessionID != "" {
		s.Hub.broadcastTo(sg.Source.SessionID, renderFrame(views.FrameSuggestionDone(id, outcome)))
	}
	return outcome, nil
}

// memoryFrame handles a websocket frame of type undo, accept or reject for session ss
// (the socket's, already owner-checked). A failure goes to this client as a notice.
func (s *Server) memoryFrame(ctx context.Context, ss store.Session, f clientFrame, notify func(string)) {
	var err error
	switch f.Type {
	case "undo":
		_, err = s.undo(ctx, ss, f.Memory)
	case "accept", "reject":
		var outcome string
		outcome, err = s.handleSuggestion(ctx, ss.OwnerID, f.Suggestion, f.Type == "accept")
		if err == nil {
			notify(outcome)
		}
	}
	switch {
	case errors.Is(err, echo.ErrNotFound):
		notify("Not found; nothing was changed.")
	case err != nil:
		if errs.Code(err) == errs.Internal {
			s.Log.Error("web: memory frame", "session", ss.ID, "type", f.Type, "err", err)
		}
		notify(errs.Message(err))
	}
}
