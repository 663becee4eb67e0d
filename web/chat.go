package web

import (
	"context"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"atrium/internal/errs"
	"atrium/internal/models"
	"atrium/internal/store"
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
	chat, err := s.chatView(ctx, ss, s.Hub.Snapshot(ss.ID))
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
	msgs, hasOlder, err := s.Store.LatestMessages(ctx, ss.ID, messagesPerPage)
	if err != nil {
		return views.Chat{}, err
	}
	chat := views.Chat{Session: sessionItem(ss, ss.ID), Live: snap.Live, RunState: "idle",
		MaxMessageBytes: s.Config.MaxMessageBytes}
	if snap.Live != nil {
		chat.RunState = "streaming"
	}
	for _, m := range msgs {
		if snap.Live != nil && m.Seq > snap.AfterSeq {
			continue
		}
		if m.Role == "user" || m.Role == "assistant" {
			chat.Messages = append(chat.Messages, messageView(m))
		}
	}
	if hasOlder && len(msgs) > 0 {
		chat.OlderCursor = msgs[0].Seq
	}
	chat.Models, chat.Notice, err = s.modelOptions(ctx, ss.Model)
	return chat, err
}

// modelOptions lists the model choices with the session's one selected. The first
// option, "Default", follows the instance default.
func (s *Server) modelOptions(ctx context.Context, selected string) ([]views.ModelOption, string, error) {
	choices, err := s.Models.Choices(ctx)
	if err != nil {
		return nil, "", err
	}
	def, err := s.Models.Default(ctx)
	if err != nil {
		return nil, "", err
	}
	defLabel := "Default"
	for _, ch := range choices {
		if ch.Value == def {
			defLabel = "Default (" + ch.Label + ")"
		}
	}
	opts := []views.ModelOption{{Value: "", Label: defLabel, Selected: selected == ""}}
	for _, ch := range choices {
		opts = append(opts, views.ModelOption{Value: ch.Value, Label: ch.Label, Selected: ch.Value == selected})
	}
	notice := ""
	if len(choices) == 0 {
		notice = "No model is configured yet. An admin can add one in Settings → Providers."
	} else if def == "" && selected == "" {
		notice = "No default model is set: pick a model for this chat, or an admin can set a default in Settings → Providers."
	}
	return opts, notice, nil
}

func hasChoice(choices []models.Choice, v string) bool {
	for _, ch := range choices {
		if ch.Value == v {
			return true
		}
	}
	return false
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
	msgs, hasOlder, err := s.Store.MessagesBefore(c.Request().Context(), ss.ID, before, messagesPerPage)
	if err != nil {
		return err
	}
	items := make([]views.Message, 0, len(msgs))
	for _, m := range msgs {
		if m.Role == "user" || m.Role == "assistant" {
			items = append(items, messageView(m))
		}
	}
	var cursor int64
	if hasOlder && len(msgs) > 0 {
		cursor = msgs[0].Seq
	}
	return render(c, http.StatusOK, views.OlderMessages(ss.ID, items, cursor))
}
