package web

import (
	"context"
	"time"

	"atrium/internal/mcp"
	"atrium/internal/store"
)

// Internals the external tests (package web_test) look at.
const (
	LoginCookie = loginCookie
	CSRFCookie  = csrfCookie
)

// ServerConfig is the stored MCP server row as the supervisor gets it (secrets opened).
func (s *Server) ServerConfig(ctx context.Context, row store.MCPServer) (mcp.ServerConfig, error) {
	return s.mcpConfigs.Config(ctx, row)
}

// SetLoginRecheck shortens how often open sockets re-check their login (set it before
// the sockets open), so a test can see a login ended by another process end them.
func (s *Server) SetLoginRecheck(d time.Duration) { s.loginRecheck = d }

// SetConsentTimes shortens how long an MCP server's question waits for a watcher and
// for an answer.
func (s *Server) SetConsentTimes(unwatched, maxWait time.Duration) {
	s.consents.unwatched, s.consents.maxWait, s.consents.poll = unwatched, maxWait, 10*time.Millisecond
}

// ClaimQuestion takes the open question id as a person's answer does at the moment it
// lands, and returns what then sends a, so a test can act in between.
func (s *Server) ClaimQuestion(id string, a mcp.Answer) (send func(), ok bool) {
	s.consents.mu.Lock()
	oq := s.consents.open[id]
	s.consents.mu.Unlock()
	if oq == nil {
		return nil, false
	}
	claimed := false
	oq.once.Do(func() { claimed = true })
	return func() { oq.answer <- a }, claimed
}

// OpenQuestion is the id of an MCP server's question open in the chat ("" for none).
func (s *Server) OpenQuestion(sessionID string) string {
	if qs := s.consents.forSession(sessionID); len(qs) > 0 {
		return qs[0].ID
	}
	return ""
}

// HoldImageDecodes takes every slot for image decodes until release is called, as
// decodes in flight would.
func HoldImageDecodes() (release func()) {
	for range cap(imageDecodes) {
		imageDecodes <- struct{}{}
	}
	return func() {
		for range cap(imageDecodes) {
			<-imageDecodes
		}
	}
}
