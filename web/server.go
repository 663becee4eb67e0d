// Package web is Atrium's delivery layer: the route table, handlers (one file per page
// or feature), middleware and the websocket hub. It turns HTTP and websocket input into
// calls on internal services and renders views.
package web

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"atrium/internal/agent"
	"atrium/internal/auth"
	"atrium/internal/config"
	"atrium/internal/crypto"
	"atrium/internal/mcp"
	"atrium/internal/memory"
	"atrium/internal/pdftext"
	"atrium/internal/providers"
	"atrium/internal/store"
	"atrium/internal/trace"
	"atrium/views"
)

// Deps are the services the web layer drives. main builds them.
type Deps struct {
	Config    config.Config
	Store     *store.DB
	Keys      *crypto.Keyring
	Agent     *agent.Agent
	Hub       *Hub
	Providers *providers.Catalog
	Recorder  *trace.Recorder // nil: no context meter from past runs
	MCP       *mcp.Supervisor // nil: no MCP (no settings effect, indicator, resources or prompts)
	Memory    *memory.Service // long-term memory: the Memories page
	CSRFKey   []byte          // 32 random bytes, stable across restarts so open forms keep working
	Log       *slog.Logger
	Now       func() time.Time
	NewID     func() string      // session ids (random UUIDs)
	Metrics   http.Handler       // nil: no /metrics on the main address (it checks its own bearer token)
	PDF       *pdftext.Extractor // reads uploaded PDFs; nil: Atrium's own executable with the default limits
}

// Server holds the handlers' dependencies.
type Server struct {
	Deps
	csrf       *auth.CSRF
	logins     *auth.Logins
	mcpConfigs *mcp.ConfigStore
	setupDone  atomic.Bool
	echo       *echo.Echo
	secureBase bool // the public base URL is https
	mcp        mcpState
	oauthFlows mcp.OAuthFlows // MCP OAuth authorisations in progress (mcp_oauth.go)
	consents   *consents      // MCP servers' questions open in chats

	sockets      sockets       // open websockets by login, so ending a login closes them
	loginRecheck time.Duration // how often an open socket re-checks its login
}

// New builds the server and its route table.
func New(d Deps) *Server {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.PDF == nil {
		self, _ := os.Executable()
		d.PDF = &pdftext.Extractor{Self: self, Limits: pdftext.DefaultLimits()}
	}
	s := &Server{
		Deps:       d,
		csrf:       auth.NewCSRF(d.CSRFKey),
		logins:     auth.NewLogins(d.Store, d.Config.LoginTTL, d.Now),
		mcpConfigs: &mcp.ConfigStore{Rows: d.Store, Keys: d.Keys},
		secureBase: strings.HasPrefix(d.Config.BaseURL, "https://"),

		loginRecheck: loginRecheck,
	}
	s.consents = newConsents(s)
	s.echo = s.routes()
	return s
}

// Handler returns the root HTTP handler.
func (s *Server) Handler() http.Handler { return s.echo }

// render writes a templ component as an HTML response.
func render(c echo.Context, status int, comp templ.Component) error {
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	c.Response().WriteHeader(status)
	return comp.Render(c.Request().Context(), c.Response())
}

// isHTMX reports whether the request came from htmx (fragment expected).
func isHTMX(c echo.Context) bool { return c.Request().Header.Get("HX-Request") == "true" }

// redirect sends the browser to url: HX-Redirect for htmx requests, 303 otherwise.
func redirect(c echo.Context, url string) error {
	if isHTMX(c) {
		c.Response().Header().Set("HX-Redirect", url)
		return c.NoContent(http.StatusNoContent)
	}
	return c.Redirect(http.StatusSeeOther, url)
}

// page builds the common page model for the current request.
func (s *Server) page(c echo.Context, title string) views.Page {
	p := views.Page{Title: title, CSRF: s.csrfToken(c)}
	if u, ok := currentUser(c); ok {
		p.User = &views.User{ID: u.ID, Username: u.Username, IsAdmin: u.Role == store.RoleAdmin, Theme: u.Theme}
	}
	return p
}

// ready reports whether a write to the database would succeed (for /readyz).
func (s *Server) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return s.Store.Ready(ctx)
}
