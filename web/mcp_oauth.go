package web

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"atrium/internal/errs"
	"atrium/views"
)

// This file is "Connect" on a remote MCP server's card: the start of the OAuth
// authorization code flow (POST, CSRF-checked, admins only) and its callback, where
// the provider sends the admin's browser back with a code. The callback is a GET
// from another site, so the login cookie (SameSite=Lax) comes along but no CSRF
// token can: the state is what protects it. A state is random, held server side for
// OAuthFlowTTL, good for one callback, and only for the admin who started it.

// mcpOAuthCallbackPath is the redirect URI's path.
const mcpOAuthCallbackPath = "/settings/mcp/oauth/callback"

// oauthRedirectURI is Atrium's callback as the provider must see it: under the
// configured public base URL, or else this request's own origin.
func (s *Server) oauthRedirectURI(c echo.Context) string {
	if s.Config.BaseURL != "" {
		return s.Config.BaseURL + mcpOAuthCallbackPath
	}
	scheme := "http"
	if s.secure(c) {
		scheme = "https"
	}
	return scheme + "://" + c.Request().Host + mcpOAuthCallbackPath
}

// startMCPOAuth begins authorising server :sid and sends the browser on to the
// provider (views.MCPOAuthContinue says why not with a redirect).
func (s *Server) startMCPOAuth(c echo.Context) error {
	ctx := c.Request().Context()
	if s.MCP == nil {
		return echo.ErrNotFound
	}
	row, err := s.mcpParam(c)
	if err != nil {
		return err
	}
	cfg, err := s.mcpConfigs.Config(ctx, row)
	if err != nil {
		return s.mcpNotice(c, "The stored secrets of "+row.Name+" cannot be read; enter them again and save before connecting.")
	}
	u, _ := currentUser(c)
	flow, authURL, err := s.MCP.BeginOAuth(ctx, cfg, u.ID, s.oauthRedirectURI(c))
	if err != nil {
		if errs.Code(err) == errs.Internal {
			return err
		}
		s.Log.Warn("web: mcp oauth could not start", "server", row.Name, "err", errs.Message(err))
		return s.mcpNotice(c, errs.Message(err))
	}
	s.oauthFlows.Put(flow, s.Now())
	host := authURL
	if u, err := url.Parse(authURL); err == nil {
		host = u.Host
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return render(c, http.StatusOK, views.MCPOAuthContinue(row.Name, authURL, host))
}

// finishMCPOAuth is the provider's redirect back: it checks the state, exchanges the
// code and returns to the MCP page, which shows the server connecting.
func (s *Server) finishMCPOAuth(c echo.Context) error {
	if s.MCP == nil {
		return echo.ErrNotFound
	}
	u, _ := currentUser(c)
	flow, ok := s.oauthFlows.Take(c.QueryParam("state"), u.ID, s.Now())
	if !ok {
		return s.mcpNoticeStatus(c, http.StatusBadRequest, "This authorisation link is not valid: it expired, was used already or was started by someone else. Start again with Connect on the server's card.")
	}
	if e := c.QueryParam("error"); e != "" {
		msg := "The provider did not authorise " + flow.Server + ": " + capText(e, 100)
		if d := c.QueryParam("error_description"); d != "" {
			msg += " (" + capText(d, 200) + ")"
		}
		return s.mcpNotice(c, msg)
	}
	if err := s.MCP.FinishOAuth(c.Request().Context(), flow, c.QueryParam("code")); err != nil {
		if errs.Code(err) == errs.Internal {
			return err
		}
		s.Log.Warn("web: mcp oauth could not finish", "server", flow.Server, "err", errs.Message(err))
		return s.mcpNotice(c, errs.Message(err))
	}
	return c.Redirect(http.StatusSeeOther, "/settings/mcp?notice="+url.QueryEscape(flow.Server+" is authorised; connecting."))
}

// mcpNotice goes back to the MCP page with a notice.
func (s *Server) mcpNotice(c echo.Context, notice string) error {
	return c.Redirect(http.StatusSeeOther, "/settings/mcp?notice="+url.QueryEscape(notice))
}

// mcpNoticeStatus renders the MCP page with a notice and an error status (for a
// callback that must not look like success).
func (s *Server) mcpNoticeStatus(c echo.Context, status int, notice string) error {
	v, err := s.mcpView(c.Request().Context(), views.MCPForm{}, notice)
	if err != nil {
		return err
	}
	return render(c, status, views.MCPSettingsPage(s.page(c, "MCP servers"), v))
}

// capText cuts text from another party to n bytes (on a rune boundary) and one line.
func capText(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
