package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"

	"atrium/internal/contextwin"
	"atrium/internal/errs"
	"atrium/internal/mcp"
	"atrium/views"
)

// This file is MCP in the chat: the live state over websockets, the resource panel
// and attachments, and prompts as slash commands.

const (
	mcpCallTimeout = 20 * time.Second // listing resources, reading one, getting a prompt
	maxAttachments = 8
)

// mcpSocket streams server state changes to a settings page (admins only).
func (s *Server) mcpSocket(c echo.Context) error {
	up := websocket.Upgrader{CheckOrigin: s.checkOrigin, ReadBufferSize: 1024, WriteBufferSize: 8192}
	conn, err := up.Upgrade(c.Response(), c.Request(), nil)
	if err != nil {
		return nil // the upgrader already answered
	}
	defer conn.Close()
	conn.SetReadLimit(4096)
	cl := newClient()
	// A demotion or an ended login closes it (it must not go on receiving the cards).
	token, _ := c.Get(loginKey).(string)
	u, _ := currentUser(c)
	defer s.openSocket(token, u, cl, true, false)()
	s.Hub.subscribe(mcpRoomSettings, cl, func(Snapshot) []byte { return s.mcpSettingsSnapshot() })
	defer s.Hub.unsubscribe(mcpRoomSettings, cl)
	go s.writeLoop(conn, cl)
	// The browser sends nothing; read only to see it go and to answer pings.
	_ = conn.SetReadDeadline(time.Now().Add(wsPongWait))
	conn.SetPongHandler(func(string) error { return conn.SetReadDeadline(time.Now().Add(wsPongWait)) })
	for {
		if _, _, err := conn.ReadMessage(); err != nil {
			break
		}
	}
	cl.close()
	return nil
}

// mcpSettingsSnapshot is the first frame of a settings socket: every known server's
// card and the indicator, so a reconnect catches up on what it missed. It reads only
// the web layer's own copy of the states (it runs under the hub room's lock).
func (s *Server) mcpSettingsSnapshot() []byte {
	s.mcp.mu.Lock()
	cards := make([]views.MCPStatus, 0, len(s.mcp.statuses))
	for name, st := range s.mcp.statuses {
		cards = append(cards, statusView(st, s.mcp.meta[name]))
	}
	ind := s.mcpIndicatorLocked()
	s.mcp.mu.Unlock()
	sort.Slice(cards, func(i, j int) bool { return cards[i].Name < cards[j].Name })
	var frame []byte
	for _, st := range cards {
		frame = append(frame, renderFrame(views.FrameMCPServer(st))...)
	}
	return append(frame, renderFrame(views.FrameMCPIndicator(ind))...)
}

// mcpChatSnapshot is the indicator frame a chat socket gets when it (re)connects.
func (s *Server) mcpChatSnapshot() []byte {
	s.mcp.mu.Lock()
	ind := s.mcpIndicatorLocked()
	s.mcp.mu.Unlock()
	return renderFrame(views.FrameMCPIndicator(ind))
}

// readyServers lists the servers that are ready, by name.
func (s *Server) readyServers() []string {
	var names []string
	for _, st := range s.MCP.Statuses() {
		if st.State == mcp.StateReady {
			names = append(names, st.Name)
		}
	}
	sort.Strings(names)
	return names
}

// resourcePanel lists the resources of every ready server (queried in parallel, each
// with a time limit, so one slow server does not hold up the others).
func (s *Server) resourcePanel(c echo.Context) error {
	if _, err := s.ownedSession(c); err != nil {
		return err
	}
	if s.MCP == nil {
		return render(c, http.StatusOK, views.ResourcePanel(nil))
	}
	names := s.readyServers()
	groups := make([]views.MCPResourceGroup, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(c.Request().Context(), mcpCallTimeout)
			defer cancel()
			g := views.MCPResourceGroup{Server: name}
			list, err := s.MCP.Resources(ctx, name)
			if err != nil {
				g.Error = "Could not list the resources: " + mcpErrText(err)
			}
			for _, r := range list {
				g.Resources = append(g.Resources, views.MCPResource{URI: r.URI, Name: r.Name,
					Description: r.Description, MimeType: r.MimeType})
			}
			groups[i] = g
		}()
	}
	wg.Wait()
	return render(c, http.StatusOK, views.ResourcePanel(groups))
}

// mcpErrText is a user-facing text for an MCP error: the message of a coded error,
// else the error itself (MCP errors carry no secrets: the supervisor redacts them).
func mcpErrText(err error) string {
	if errs.Code(err) != errs.Internal {
		return errs.Message(err)
	}
	return err.Error()
}

// promptMenu lists the prompts of every ready server as slash commands.
func (s *Server) promptMenu(c echo.Context) error {
	ss, err := s.ownedSession(c)
	if err != nil {
		return err
	}
	var out []views.MCPPrompt
	if s.MCP != nil {
		for _, p := range s.MCP.Prompts() {
			v := views.MCPPrompt{Server: p.Server, Name: p.Name, Description: p.Description}
			for _, a := range p.Arguments {
				v.Arguments = append(v.Arguments, views.MCPPromptArg{Name: a.Name, Description: a.Description, Required: a.Required})
			}
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Server != out[j].Server {
			return out[i].Server < out[j].Server
		}
		return out[i].Name < out[j].Name
	})
	return render(c, http.StatusOK, views.PromptMenu(ss.ID, out))
}

// usePrompt gets a prompt with its arguments (form fields "arg.<name>") and answers
// its text, which app.js puts into the composer for the user to review.
func (s *Server) usePrompt(c echo.Context) error {
	if _, err := s.ownedSession(c); err != nil {
		return err
	}
	if s.MCP == nil {
		return errs.E(errs.NotFound, "MCP is not set up on this server.")
	}
	server, name := c.FormValue("server"), c.FormValue("name")
	var prompt *mcp.Prompt
	for _, p := range s.MCP.Prompts() {
		if p.Server == server && p.Name == name {
			prompt = &p
			break
		}
	}
	if prompt == nil {
		return errs.E(errs.NotFound, "The prompt /%s:%s is not available (is its server ready?).", server, name)
	}
	args := map[string]string{}
	for _, a := range prompt.Arguments {
		v := strings.TrimSpace(c.FormValue("arg." + a.Name))
		if v == "" {
			if a.Required {
				return errs.E(errs.Invalid, "The prompt /%s:%s needs the argument %q.", server, name, a.Name)
			}
			continue
		}
		args[a.Name] = v
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), mcpCallTimeout)
	defer cancel()
	text, err := s.MCP.GetPrompt(ctx, server, name, args)
	if err != nil {
		if errs.Code(err) == errs.Internal {
			err = errs.Wrap(errs.Unavailable, err, "Could not get the prompt /%s:%s: %s", server, name, err.Error())
		}
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.String(http.StatusOK, text)
}

// attachList is the "attach" field of a send frame. htmx-ext-ws sends one value as a
// string and several as an array.
type attachList []string

func (l *attachList) UnmarshalJSON(b []byte) error {
	switch strings.TrimSpace(string(b)) {
	case "null", `""`:
		*l = nil
		return nil
	}
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*l = attachList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*l = many
	return nil
}

// withAttachments reads every attached resource ("<server>\n<uri>") and puts its
// content before text, as fenced blocks, so it is stored with the user message and
// counted by the context engine. The whole may be at most 4× the message limit; a
// failure sends nothing.
func (s *Server) withAttachments(ctx context.Context, text string, attach []string) (string, error) {
	// The typed text has the configured limit; the agent allows 4× for attachments.
	if max := s.Config.MaxMessageBytes; max > 0 && len(text) > max {
		return "", errs.E(errs.TooLarge, "Message is too long: %d bytes, the limit is %d.", len(text), max)
	}
	var refs [][2]string
	seen := map[string]bool{}
	for _, a := range attach {
		if strings.TrimSpace(a) == "" || seen[a] {
			continue
		}
		seen[a] = true
		server, uri, ok := strings.Cut(strings.ReplaceAll(a, "\r\n", "\n"), "\n")
		server, uri = strings.TrimSpace(server), strings.TrimSpace(uri)
		if !ok || server == "" || uri == "" {
			return "", errs.E(errs.Invalid, "An attachment could not be read (malformed); nothing was sent.")
		}
		refs = append(refs, [2]string{server, uri})
	}
	if len(refs) == 0 {
		return text, nil
	}
	if s.MCP == nil {
		return "", errs.E(errs.Unavailable, "MCP is not set up on this server, so the attachments cannot be read; nothing was sent.")
	}
	if len(refs) > maxAttachments {
		return "", errs.E(errs.Invalid, "At most %d resources can be attached to one message; nothing was sent.", maxAttachments)
	}
	limit := s.Config.MaxPromptBytes()
	var b strings.Builder
	for _, ref := range refs {
		server, uri := ref[0], ref[1]
		rctx, cancel := context.WithTimeout(ctx, mcpCallTimeout)
		rc, err := s.MCP.ReadResource(rctx, server, uri)
		cancel()
		if err != nil {
			return "", errs.Wrap(errs.Unavailable, err, "Could not read the resource %s from %s: %s. Nothing was sent.", uri, server, mcpErrText(err))
		}
		writeAttachment(&b, uri, rc)
		if limit > 0 && b.Len()+len(text) > limit {
			return "", errs.E(errs.TooLarge, "The attached resources are too large: with your message they come to more than %d bytes (4 × the message limit). Attach fewer or smaller resources; nothing was sent.", limit)
		}
	}
	b.WriteString(text)
	return b.String(), nil
}

// writeAttachment writes one resource as a fenced block (text) or a line with its
// size (binary).
func writeAttachment(b *strings.Builder, uri string, rc mcp.ResourceContent) {
	mime := rc.MimeType
	if mime == "" {
		mime = "unknown type"
	}
	if rc.Text == "" && rc.BlobBytes > 0 {
		fmt.Fprintf(b, "Attached resource %s (%s): binary content, %d bytes, not included.\n\n", uri, mime, rc.BlobBytes)
		return
	}
	fence := contextwin.Fence(rc.Text)
	fmt.Fprintf(b, "Attached resource %s (%s):\n%s\n%s\n%s\n\n", uri, mime, fence, strings.TrimRight(rc.Text, "\n"), fence)
}
