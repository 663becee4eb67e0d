package web

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/a-h/templ"
	"github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"

	"atrium/internal/errs"
	"atrium/internal/store"
	"atrium/views"
)

const (
	wsWriteWait  = 10 * time.Second
	wsPongWait   = 60 * time.Second
	wsPingPeriod = 25 * time.Second
)

// clientFrame is what htmx-ext-ws sends: the form's fields as JSON (plus HEADERS, ignored).
type clientFrame struct {
	Type   string     `json:"type"`
	Text   string     `json:"text"`
	Attach attachList `json:"attach"` // MCP resources: "<server>\n<uri>", one or several
	Files  attachList `json:"files"`  // uploaded files (uploadFile): their ids, one or several
	// Memory chips: undo names a memory its chat saved, accept/reject a suggestion.
	Memory     string `json:"memory"`
	Suggestion string `json:"suggestion"`
	// ID names a stored message of the chat: the one to edit (with Text), the reply to
	// regenerate or retry, or the version to show.
	ID string `json:"id"`
	// Nonce names a composer send: the answer (FrameSendResult) carries it back, and
	// the composer keeps its text until that answer says the message was accepted.
	Nonce string `json:"nonce"`
}

// maxNonceLen bounds the send id that is echoed back to the browser.
const maxNonceLen = 64

// validNonce reports whether a send id is short and plain (letters, digits, - and _).
func validNonce(n string) bool {
	if len(n) > maxNonceLen {
		return false
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// checkOrigin refuses cross-site websocket handshakes (the login cookie would otherwise
// ride along): the Origin must be this host, or the configured public base URL.
func (s *Server) checkOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true // not a browser
	}
	u, err := url.Parse(origin)
	if err != nil {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	if s.Config.BaseURL != "" {
		b, err := url.Parse(s.Config.BaseURL)
		return err == nil && strings.EqualFold(b.Host, u.Host) && b.Scheme == u.Scheme
	}
	return false
}

// chatSocket streams a session to one browser tab and takes its sends and stops.
// Ownership is checked before the upgrade, so a foreign session is a plain 404.
func (s *Server) chatSocket(c echo.Context) error {
	ss, err := s.ownedSession(c)
	if err != nil {
		return err
	}
	up := websocket.Upgrader{CheckOrigin: s.checkOrigin, ReadBufferSize: 4096, WriteBufferSize: 8192}
	conn, err := up.Upgrade(c.Response(), c.Request(), nil)
	if err != nil {
		return nil // the upgrader already answered
	}
	defer conn.Close()
	// A frame may be a few times larger than its text once JSON-escaped; beyond that
	// gorilla closes the connection (1009) and the browser reconnects.
	conn.SetReadLimit(int64(8*s.Config.MaxMessageBytes + 64*1024))

	cl := newClient()
	ctx := c.Request().Context()
	// Registered first, so that ending the login from here on closes this socket.
	token, _ := c.Get(loginKey).(string)
	u, _ := currentUser(c)
	defer s.openSocket(token, u, cl, false, true)()
	s.Hub.subscribe(ss.ID, cl, func(snap Snapshot) []byte {
		// Read again: this renders again whenever the branch moves, with its task.
		cur, err := s.Store.SessionForOwner(ctx, ss.ID, ss.OwnerID)
		if err != nil {
			return nil
		}
		chat, err := s.chatViewAt(ctx, cur, snap, atParam(c))
		if err != nil {
			s.Log.Error("web: websocket snapshot", "session", ss.ID, "err", err)
			return nil
		}
		// The task and the meter too: after the branch moved (see Hub.resync) they are
		// that branch's.
		frames := []templ.Component{views.FrameMessages(chat), views.FrameRunState(chat.RunState), views.FrameTaskPanel(chat.Task),
			views.ConsentRequests(s.consents.forSession(ss.ID), "morph")}
		if chat.Meter != nil {
			frames = append(frames, views.FrameContextMeter(*chat.Meter))
		}
		return renderFrame(frames...)
	})
	defer s.Hub.unsubscribe(ss.ID, cl)
	if s.MCP != nil {
		// The same client also follows the MCP indicator (a second hub room).
		s.Hub.subscribe(mcpRoomChat, cl, func(Snapshot) []byte { return s.mcpChatSnapshot() })
		defer s.Hub.unsubscribe(mcpRoomChat, cl)
	}

	go s.writeLoop(conn, cl)
	s.readLoop(c, conn, cl, ss, token)
	cl.close()
	return nil
}

// writeLoop drains the client's frames into the socket and keeps it alive with pings.
func (s *Server) writeLoop(conn *websocket.Conn, cl *client) {
	ping := time.NewTicker(wsPingPeriod)
	defer ping.Stop()
	defer conn.Close() // unblocks the read loop when writing fails
	for {
		select {
		case frame := <-cl.send:
			_ = conn.SetWriteDeadline(time.Now().Add(wsWriteWait))
			if err := conn.WriteMessage(websocket.TextMessage, frame); err != nil {
				return
			}
		case <-ping.C:
			_ = conn.SetWriteDeadline(time.Now().Add(wsWriteWait))
			if err := conn.WriteMessage(websocket.PingMessage, nil); err != nil {
				return
			}
		case <-cl.closed:
			// Deliver what was queued before the close (e.g. the final frame at shutdown).
			for len(cl.send) > 0 {
				_ = conn.SetWriteDeadline(time.Now().Add(wsWriteWait))
				if conn.WriteMessage(websocket.TextMessage, <-cl.send) != nil {
					return
				}
			}
			_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, ""), time.Now().Add(time.Second))
			return
		}
	}
}

// readLoop handles frames from the browser until it goes away. Bad frames get a notice
// to this client only; the connection stays open. Each request re-checks the login
// (token): one that ended closes the socket and does nothing.
func (s *Server) readLoop(c echo.Context, conn *websocket.Conn, cl *client, ss store.Session, token string) {
	_ = conn.SetReadDeadline(time.Now().Add(wsPongWait))
	conn.SetPongHandler(func(string) error { return conn.SetReadDeadline(time.Now().Add(wsPongWait)) })
	notify := func(msg string) {
		select {
		case cl.send <- renderFrame(views.FrameNotice(msg)):
		default:
		}
	}
	for {
		kind, data, err := conn.ReadMessage()
		if err != nil {
			return
		}
		_ = conn.SetReadDeadline(time.Now().Add(wsPongWait))
		if kind != websocket.TextMessage {
			notify("Only text frames are accepted.")
			continue
		}
		if !utf8.Valid(data) {
			notify("The message is not valid UTF-8 text; nothing was saved.")
			continue
		}
		var f clientFrame
		if err := json.Unmarshal(data, &f); err != nil {
			notify("The message could not be read (malformed frame); nothing was saved.")
			continue
		}
		switch f.Type {
		case "send", "stop", "undo", "accept", "reject", "edit", "regenerate", "version":
		default:
			notify("Unknown request type; nothing was saved.")
			continue
		}
		if !validNonce(f.Nonce) {
			notify("The message could not be read (the send id must be at most 64 letters, digits, - or _); nothing was saved.")
			continue
		}
		// Once the login ended, frames are dropped until the writer has sent the notice
		// and the close frame and closed the connection (which ends this loop).
		select {
		case <-cl.closed:
			continue
		default:
		}
		u, err := s.liveLogin(c.Request().Context(), token, false)
		if errs.Is(err, errs.Unauthorized) {
			s.sockets.end(cl)
			continue
		}
		if err != nil {
			s.Log.Error("web: websocket login check", "session", ss.ID, "err", err)
			if f.Type == "send" {
				answerSend(cl, f.Nonce, err)
			} else {
				notify(errs.Message(err))
			}
			continue
		}
		switch f.Type {
		case "send":
			answerSend(cl, f.Nonce, s.handleSend(c, u, ss.ID, f.Text, f.Attach, f.Files))
		case "stop":
			s.Agent.Stop(ss.ID)
		case "undo", "accept", "reject":
			s.memoryFrame(c.Request().Context(), ss, f, notify)
		case "edit", "regenerate", "version":
			if err := s.branchFrame(c.Request().Context(), u, ss.ID, f); err != nil {
				notify(errs.Message(err))
			}
		}
	}
}

// branchFrame moves the branch on screen for u (the login's user as just re-checked):
// an edit of a user message, a regenerate or retry of a reply, or a flip to another
// version. The message must be of this chat (else "Not found"); the agent refuses it
// while the chat answers. Every tab of the chat follows (EventBranch).
func (s *Server) branchFrame(ctx context.Context, u store.User, sessionID string, f clientFrame) error {
	ss, err := s.Store.SessionForOwner(ctx, sessionID, u.ID)
	if err != nil {
		return err
	}
	id, err := strconv.ParseInt(f.ID, 10, 64)
	if err != nil || id <= 0 {
		return errs.E(errs.NotFound, "Message not found.")
	}
	switch f.Type {
	case "edit":
		// An edit is typed text: it has the composer's limit.
		if max := s.Config.MaxMessageBytes; max > 0 && len(f.Text) > max {
			return errs.E(errs.TooLarge, "Message is too long: %d bytes, the limit is %d.", len(f.Text), max)
		}
		err = s.Agent.Edit(ctx, ss, id, f.Text)
	case "regenerate":
		err = s.Agent.Regenerate(ctx, ss, id)
	default:
		err = s.Agent.SelectVersion(ctx, ss, id)
	}
	if errs.Code(err) == errs.Internal {
		s.Log.Error("web: "+f.Type, "session", ss.ID, "err", err)
	}
	return err
}

// answerSend tells the sending tab whether its message was accepted (err == nil) or
// why not, in one frame: the refusal's reason goes to #notice, and the result lets the
// composer clear itself only after an accepted send. Sends without a nonce (not from
// the composer) get the notice only. It waits for room in the client's queue (a lost
// answer would leave the composer waiting), but not past the write timeout.
func answerSend(cl *client, nonce string, err error) {
	var comps []templ.Component
	if err != nil {
		comps = append(comps, views.FrameNotice(errs.Message(err)))
	}
	if nonce != "" {
		comps = append(comps, views.FrameSendResult(nonce, err == nil))
	}
	if len(comps) == 0 {
		return
	}
	select {
	case cl.send <- renderFrame(comps...):
	case <-cl.closed:
	case <-time.After(wsWriteWait):
	}
}

// handleSend starts a turn for u, the login's user as just re-checked. The session is
// re-read so a model change or a deletion since the socket opened is seen. Attached
// MCP resources are read and put before the text; uploaded files (ids) are checked and
// bound to the message as it is committed. An error says why nothing was sent.
func (s *Server) handleSend(c echo.Context, u store.User, sessionID, text string, attach, files []string) error {
	ctx := c.Request().Context()
	ss, err := s.Store.SessionForOwner(ctx, sessionID, u.ID)
	if err != nil {
		return err
	}
	full, err := s.withAttachments(ctx, text, attach)
	if err != nil {
		return err
	}
	files, err = s.checkSendFiles(ctx, ss, files)
	if err != nil {
		return err
	}
	if err := s.Agent.SendFiles(ctx, ss, full, files); err != nil {
		if errs.Code(err) == errs.Internal {
			s.Log.Error("web: send", "session", ss.ID, "err", err)
		}
		return err
	}
	if ss.Title == "" {
		// The first line is the title until the model writes one (agent.Config.GenerateTitles).
		title := store.CleanTitle(firstLine(text, 60))
		if strings.TrimSpace(text) == "" {
			title = store.CleanTitle(firstLine(full, 60))
		}
		if title == "" && len(files) > 0 {
			title = "Attached files" // a message of files alone
		}
		if ok, err := s.Store.SetFirstLineTitle(ctx, ss.ID, ss.OwnerID, title); err == nil && ok {
			ss.Title = title
			s.Hub.broadcastTo(ss.ID, renderFrame(views.FrameSessionTitle(sessionItem(ss, ss.ID))))
		}
	}
	return nil
}

// firstLine returns the first line of text, cut to n characters.
func firstLine(text string, n int) string {
	line, _, _ := strings.Cut(strings.TrimSpace(text), "\n")
	if r := []rune(line); len(r) > n {
		return string(r[:n]) + "…"
	}
	return line
}
