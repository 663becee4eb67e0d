package web

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"atrium/internal/crypto"
	"atrium/internal/errs"
	"atrium/internal/mcp"
	"atrium/internal/sandbox"
	"atrium/internal/store"
	"atrium/views"
)

// This file is Settings → MCP servers: the rows in the store, their sealed secrets,
// the forms, import/export, and handing the configuration to the supervisor.

// mcpRoomSettings and mcpRoomChat are hub rooms (not sessions: session ids are UUIDs)
// for live MCP state: settings pages get server cards and the indicator, chat pages
// the indicator only.
const (
	mcpRoomSettings = "mcp:settings"
	mcpRoomChat     = "mcp:chat"
)

// mcpState is what the web layer remembers of the MCP servers between supervisor
// callbacks, so that a callback never has to call back into the supervisor.
type mcpState struct {
	applyMu sync.Mutex // serialises ApplyMCP: the last store state wins

	mu       sync.Mutex
	meta     map[string]string     // configured servers: name → transport
	statuses map[string]mcp.Status // latest status by name, configured servers only
}

// ApplyMCP loads every configured server and hands them to the supervisor, which
// reconciles without waiting for connections. It also registers their secrets with
// the trace redactor. main calls it at start; every settings change calls it.
func (s *Server) ApplyMCP(ctx context.Context) error {
	if s.MCP == nil {
		return nil
	}
	s.mcp.applyMu.Lock()
	defer s.mcp.applyMu.Unlock()
	rows, err := s.Store.ListMCPServers(ctx)
	if err != nil {
		return err
	}
	cfgs := make([]mcp.ServerConfig, 0, len(rows))
	meta := make(map[string]string, len(rows))
	for _, row := range rows {
		cfg, err := s.mcpConfigs.Config(ctx, row)
		if err != nil {
			// Without its secrets the server would start half-configured: leave it
			// out; the settings page says to enter them again.
			s.Log.Error("web: mcp server not started", "server", row.Name, "err", err)
			continue
		}
		if mcp.StoredInClear(row) {
			// Saved before credentials in URLs and arguments were sealed: seal them now.
			if err := s.mcpConfigs.Save(ctx, &cfg); err != nil {
				s.Log.Warn("web: could not seal an MCP server's credentials", "server", row.Name, "err", err)
			}
		}
		if s.Recorder != nil {
			for _, v := range cfg.Secrets() {
				s.Recorder.Redactor().AddSecret(v)
			}
		}
		cfgs = append(cfgs, cfg)
		meta[cfg.Name] = string(cfg.Transport)
	}
	s.mcp.mu.Lock()
	s.mcp.meta = meta
	for name := range s.mcp.statuses {
		if _, ok := meta[name]; !ok {
			delete(s.mcp.statuses, name)
		}
	}
	s.mcp.mu.Unlock()

	// The supervisor keeps its connections beyond this request.
	s.MCP.Apply(context.WithoutCancel(ctx), cfgs)

	s.mcp.mu.Lock()
	if s.mcp.statuses == nil {
		s.mcp.statuses = map[string]mcp.Status{}
	}
	for _, st := range s.MCP.Statuses() {
		if _, ok := meta[st.Name]; ok {
			s.mcp.statuses[st.Name] = st // Statuses is at least as new as any callback before it
		}
	}
	ind := s.mcpIndicatorLocked()
	s.mcp.mu.Unlock()
	frame := renderFrame(views.FrameMCPIndicator(ind))
	s.Hub.broadcastTo(mcpRoomSettings, frame)
	s.Hub.broadcastTo(mcpRoomChat, frame)
	return nil
}

// MCPChanged is the supervisor's onChange callback: it pushes the server's new state
// to every settings page (its card) and every chat page (the indicator). It never
// calls into the supervisor.
func (s *Server) MCPChanged(st mcp.Status) {
	s.mcp.mu.Lock()
	transport, known := s.mcp.meta[st.Name]
	if known {
		if s.mcp.statuses == nil {
			s.mcp.statuses = map[string]mcp.Status{}
		}
		s.mcp.statuses[st.Name] = st
	}
	ind := s.mcpIndicatorLocked()
	s.mcp.mu.Unlock()
	indicator := renderFrame(views.FrameMCPIndicator(ind))
	if known {
		s.Hub.broadcastTo(mcpRoomSettings, append(renderFrame(views.FrameMCPServer(statusView(st, transport))), indicator...))
	}
	s.Hub.broadcastTo(mcpRoomChat, indicator)
}

// mcpIndicatorLocked sums up the remembered states. Call with s.mcp.mu held.
func (s *Server) mcpIndicatorLocked() views.MCPIndicator {
	var m views.MCPIndicator
	for _, st := range s.mcp.statuses {
		countState(&m, st.State, st.Resources, st.Prompts)
	}
	return m
}

// countState adds one server to m; what it offers counts only while it is ready.
func countState(m *views.MCPIndicator, state mcp.State, resources, prompts int) {
	switch state {
	case mcp.StateDisabled:
		return
	case mcp.StateReady:
		m.Ready++
		m.Resources += resources
		m.Prompts += prompts
	case mcp.StateDegraded, mcp.StateUnauthorized:
		m.Degraded++
	case mcp.StateFailed:
		m.Failed++
	default:
		m.Connecting++
	}
	m.Total++
}

// mcpIndicator is the indicator for a page being rendered (nil without MCP).
func (s *Server) mcpIndicator() *views.MCPIndicator {
	if s.MCP == nil {
		return nil
	}
	var m views.MCPIndicator
	for _, st := range s.MCP.Statuses() {
		countState(&m, st.State, st.Resources, st.Prompts)
	}
	return &m
}

// statusView maps a supervisor status to the live card.
func statusView(st mcp.Status, transport string) views.MCPStatus {
	v := views.MCPStatus{Name: st.Name, Transport: transport, State: string(st.State), Since: st.Since,
		Error: st.Error, Resources: st.Resources, Prompts: st.Prompts, Stderr: st.Stderr, Auth: st.Auth}
	for _, t := range st.Tools {
		v.Tools = append(v.Tools, views.MCPTool{Name: t.Name, Description: t.Description})
	}
	return v
}

// mcpView loads the settings page model.
func (s *Server) mcpView(ctx context.Context, form views.MCPForm, notice string) (views.MCPSettings, error) {
	rows, err := s.Store.ListMCPServers(ctx)
	if err != nil {
		return views.MCPSettings{}, err
	}
	statuses := map[string]mcp.Status{}
	if s.MCP != nil {
		for _, st := range s.MCP.Statuses() {
			statuses[st.Name] = st
		}
	}
	out := views.MCPSettings{Form: form, Notice: notice}
	for _, row := range rows {
		cfg, cerr := s.mcpConfigs.Config(ctx, row)
		st, ok := statuses[row.Name]
		if !ok {
			st = mcp.Status{Name: row.Name, State: mcp.StateConnecting}
			if !row.Enabled {
				st.State = mcp.StateDisabled
			}
		}
		// Credentials in the URL and arguments show as REDACTED; saving the form keeps them.
		shownURL, shownArgs := mcp.RedactCredentials(cfg)
		it := views.MCPServerItem{ID: row.ID, Status: statusView(st, row.Transport), Enabled: row.Enabled, SecretArgs: cfg.SecretArgs,
			Command: cfg.Command, Args: shownArgs, Dir: cfg.Dir, URL: shownURL,
			AllowTools: cfg.AllowTools, DenyTools: cfg.DenyTools, CallTimeout: int(cfg.CallTimeout / time.Second),
			TokenHint: crypto.Hint(cfg.BearerToken), OAuthClientID: cfg.OAuthClientID, OAuthScopes: cfg.OAuthScopes,
			OAuthSecretHint: crypto.Hint(cfg.OAuthClientSecret), Roots: cfg.Roots, SamplingAlways: cfg.SamplingAlways,
			ProgressMax: int(cfg.ProgressMax / time.Second)}
		if row.Transport == store.MCPStdio {
			it.Sandbox, it.SandboxOn, it.NetworkOn = sandboxLine(cfg), cfg.Sandbox, cfg.Network
			it.ReadPaths, it.WritePaths = cfg.ReadPaths, cfg.WritePaths
		}
		if cerr != nil {
			it.SecretsError = "The stored secrets of this server cannot be read (was the master key changed?). Enter them again and save."
			if s.MCP != nil && row.Enabled {
				it.Status.State, it.Status.Error = string(mcp.StateFailed), "not started: its secrets cannot be read"
			}
		}
		for _, k := range sortedKeys(cfg.Env) {
			it.EnvHints = append(it.EnvHints, k+"="+secretHint(cfg.Env[k]))
		}
		for _, k := range sortedKeys(cfg.Headers) {
			it.HeaderHints = append(it.HeaderHints, k+": "+secretHint(cfg.Headers[k]))
		}
		countState(&out.Indicator, mcp.State(it.Status.State), it.Status.Resources, it.Status.Prompts)
		out.Servers = append(out.Servers, it)
	}
	return out, nil
}

// sandboxLine says whether a stdio server runs sandboxed on this kernel.
func sandboxLine(cfg mcp.ServerConfig) string {
	if !cfg.Sandbox {
		return "off"
	}
	return sandbox.Check().Describe(cfg.SandboxPolicy(""))
}

// secretHint is crypto.Hint, never empty for a set value.
func secretHint(v string) string {
	if h := crypto.Hint(v); h != "" {
		return h
	}
	return "(empty)"
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (s *Server) showMCP(c echo.Context) error {
	v, err := s.mcpView(c.Request().Context(), views.MCPForm{}, c.QueryParam("notice"))
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.MCPSettingsPage(s.page(c, "MCP servers"), v))
}

// mcpFail re-renders the page with a user-facing error in the form that failed.
func (s *Server) mcpFail(c echo.Context, err error, f views.MCPForm) error {
	if errs.Code(err) == errs.Internal {
		return err
	}
	f.Error = errs.Message(err)
	v, verr := s.mcpView(c.Request().Context(), f, "")
	if verr != nil {
		return verr
	}
	return render(c, statusOf(errs.Code(err)), views.MCPSettingsPage(s.page(c, "MCP servers"), v))
}

// mcpDone applies the new configuration and goes back to the page.
func (s *Server) mcpDone(c echo.Context, notice string) error {
	if err := s.ApplyMCP(c.Request().Context()); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/settings/mcp?notice="+url.QueryEscape(notice))
}

// lines splits a textarea into trimmed, non-empty lines.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// toolList splits a list of tool names (lines, commas or spaces).
func toolList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' || r == ',' || r == ' ' || r == '\t' })
}

// parsePairs reads "KEY<sep>VALUE" lines. keep holds the stored values: a value of
// REDACTED keeps the stored one (an error if there is none).
func parsePairs(text, sep, what string, keep map[string]string) (map[string]string, error) {
	ls := lines(text)
	if len(ls) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(ls))
	for i, l := range ls {
		k, v, ok := strings.Cut(l, sep)
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, errs.E(errs.Invalid, "%s, line %d: write it as NAME%sVALUE.", what, i+1, sep)
		}
		if v == mcp.RedactedValue {
			old, found := keep[k]
			if !found {
				return nil, errs.E(errs.Invalid, "%s, line %d: %s has no stored value to keep; enter the value.", what, i+1, k)
			}
			v = old
		}
		out[k] = v
	}
	return out, nil
}

// mcpInput reads the add/edit form. old is the stored config when editing (nil when
// adding): empty secret fields keep its values.
func mcpInput(c echo.Context, old *mcp.ServerConfig) (views.MCPForm, mcp.ServerConfig, error) {
	f := views.MCPForm{
		Name:       strings.TrimSpace(c.FormValue("name")),
		Transport:  c.FormValue("transport"),
		Command:    strings.TrimSpace(c.FormValue("command")),
		Args:       c.FormValue("args"),
		Env:        c.FormValue("env"),
		Dir:        strings.TrimSpace(c.FormValue("dir")),
		URL:        strings.TrimSpace(c.FormValue("url")),
		Headers:    c.FormValue("headers"),
		AllowTools: c.FormValue("allow_tools"),
		DenyTools:  c.FormValue("deny_tools"),
		Timeout:    strings.TrimSpace(c.FormValue("timeout")),
		ReadPaths:  c.FormValue("read_paths"),
		WritePaths: c.FormValue("write_paths"),
		Sandbox:    c.FormValue("sandbox") == "on",
		Network:    c.FormValue("network") == "on",

		SecretArgs:     strings.TrimSpace(c.FormValue("secret_args")),
		OAuthClientID:  strings.TrimSpace(c.FormValue("oauth_client_id")),
		OAuthScopes:    strings.TrimSpace(c.FormValue("oauth_scopes")),
		Roots:          c.FormValue("roots"),
		SamplingAlways: c.FormValue("sampling_always") == "on",
		ProgressMax:    strings.TrimSpace(c.FormValue("progress_max")),
	}
	cfg := mcp.ServerConfig{Name: f.Name, Transport: mcp.Transport(f.Transport), Enabled: true,
		AllowTools: toolList(f.AllowTools), DenyTools: toolList(f.DenyTools),
		Roots: lines(f.Roots), SamplingAlways: f.SamplingAlways}
	var keepEnv, keepHeaders map[string]string
	if old != nil {
		cfg.ID, cfg.Enabled = old.ID, old.Enabled
		keepEnv, keepHeaders = old.Env, old.Headers
	}
	// Only the fields of the chosen transport count; the form shows both sets.
	if cfg.Transport == mcp.TransportStdio {
		cfg.Command, cfg.Dir = f.Command, f.Dir
		cfg.Sandbox, cfg.Network = f.Sandbox, f.Network
		cfg.ReadPaths, cfg.WritePaths = lines(f.ReadPaths), lines(f.WritePaths)
		for _, a := range strings.Split(strings.ReplaceAll(f.Args, "\r\n", "\n"), "\n") {
			if strings.TrimSpace(a) != "" {
				cfg.Args = append(cfg.Args, strings.TrimRight(a, "\r"))
			}
		}
		for _, n := range toolList(f.SecretArgs) {
			i, err := strconv.Atoi(n)
			if err != nil || i < 1 {
				return f, cfg, errs.E(errs.Invalid, "Secret arguments: %q is not an argument's line number (1, 2, …).", n)
			}
			if !slices.Contains(cfg.SecretArgs, i-1) {
				cfg.SecretArgs = append(cfg.SecretArgs, i-1)
			}
		}
		env, err := parsePairs(f.Env, "=", "Environment", keepEnv)
		if err != nil {
			return f, cfg, err
		}
		cfg.Env = env
		if env == nil && old != nil {
			cfg.Env = old.Env
		}
	} else {
		cfg.URL = f.URL
		headers, err := parsePairs(f.Headers, ":", "Headers", keepHeaders)
		if err != nil {
			return f, cfg, err
		}
		cfg.Headers = headers
		if headers == nil && old != nil {
			cfg.Headers = old.Headers
		}
		cfg.BearerToken = strings.TrimSpace(c.FormValue("bearer_token"))
		if cfg.BearerToken == "" && old != nil {
			cfg.BearerToken = old.BearerToken
		}
		cfg.OAuthClientID, cfg.OAuthScopes = f.OAuthClientID, strings.Fields(f.OAuthScopes)
		cfg.OAuthClientSecret = strings.TrimSpace(c.FormValue("oauth_client_secret"))
		if cfg.OAuthClientSecret == "" && old != nil && cfg.OAuthClientID == old.OAuthClientID {
			cfg.OAuthClientSecret = old.OAuthClientSecret
		}
	}
	if f.Timeout != "" {
		n, err := strconv.Atoi(f.Timeout)
		if err != nil || n <= 0 {
			return f, cfg, errs.E(errs.Invalid, "The call timeout is a number of seconds.")
		}
		cfg.CallTimeout = time.Duration(n) * time.Second
	}
	if f.ProgressMax != "" {
		n, err := strconv.Atoi(f.ProgressMax)
		if err != nil || n <= 0 {
			return f, cfg, errs.E(errs.Invalid, "The longest run with progress is a number of seconds.")
		}
		cfg.ProgressMax = time.Duration(n) * time.Second
	}
	return f, cfg, cfg.Validate()
}

func (s *Server) createMCPServer(c echo.Context) error {
	f, cfg, err := mcpInput(c, nil)
	if err == nil {
		err = s.mcpConfigs.Save(c.Request().Context(), &cfg)
	}
	if err != nil {
		return s.mcpFail(c, err, f)
	}
	return s.mcpDone(c, "MCP server "+cfg.Name+" added.")
}

// mcpParam loads :sid with its config.
func (s *Server) mcpParam(c echo.Context) (store.MCPServer, error) {
	id, err := strconv.ParseInt(c.Param("sid"), 10, 64)
	if err != nil {
		return store.MCPServer{}, echo.ErrNotFound
	}
	row, err := s.Store.MCPServerByID(c.Request().Context(), id)
	if errs.Is(err, errs.NotFound) {
		return row, echo.ErrNotFound
	}
	return row, err
}

func (s *Server) updateMCPServer(c echo.Context) error {
	ctx := c.Request().Context()
	row, err := s.mcpParam(c)
	if err != nil {
		return err
	}
	old, oerr := s.mcpConfigs.Config(ctx, row)
	if oerr != nil {
		// Unreadable secrets: the form must bring them all again.
		old.Env, old.Headers, old.BearerToken = nil, nil, ""
	}
	f, cfg, err := mcpInput(c, &old)
	f.ID = row.ID
	if err == nil {
		err = mcp.KeepRedacted(&cfg, old)
	}
	if err == nil {
		err = s.mcpConfigs.Save(ctx, &cfg)
	}
	if err != nil {
		return s.mcpFail(c, err, f)
	}
	return s.mcpDone(c, "MCP server "+cfg.Name+" saved.")
}

func (s *Server) setMCPEnabled(c echo.Context, enabled bool) error {
	row, err := s.mcpParam(c)
	if err != nil {
		return err
	}
	if err := s.Store.SetMCPServerEnabled(c.Request().Context(), row.ID, enabled); err != nil {
		return err
	}
	verb := "disabled"
	if enabled {
		verb = "enabled"
	}
	return s.mcpDone(c, "MCP server "+row.Name+" "+verb+".")
}

func (s *Server) enableMCPServer(c echo.Context) error  { return s.setMCPEnabled(c, true) }
func (s *Server) disableMCPServer(c echo.Context) error { return s.setMCPEnabled(c, false) }

func (s *Server) deleteMCPServer(c echo.Context) error {
	row, err := s.mcpParam(c)
	if err != nil {
		return err
	}
	if err := s.Store.DeleteMCPServer(c.Request().Context(), row.ID); err != nil {
		return err
	}
	return s.mcpDone(c, "MCP server "+row.Name+" removed.")
}

// importMCP creates or updates servers by name from a pasted mcpServers JSON (see
// mcp.ConfigStore.Import).
func (s *Server) importMCP(c echo.Context) error {
	ctx := c.Request().Context()
	paste := c.FormValue("json")
	cfgs, err := s.mcpConfigs.Import(ctx, []byte(paste))
	if err != nil {
		if errs.Code(err) == errs.Internal {
			return err
		}
		v, verr := s.mcpView(ctx, views.MCPForm{}, "")
		if verr != nil {
			return verr
		}
		v.Import, v.ImportError = paste, errs.Message(err)
		return render(c, statusOf(errs.Code(err)), views.MCPSettingsPage(s.page(c, "MCP servers"), v))
	}
	names := make([]string, 0, len(cfgs))
	for _, cfg := range cfgs {
		names = append(names, cfg.Name)
	}
	return s.mcpDone(c, "Imported "+strings.Join(names, ", ")+".")
}

// exportMCP downloads every server as mcpServers JSON, secrets as REDACTED.
func (s *Server) exportMCP(c echo.Context) error {
	ctx := c.Request().Context()
	rows, err := s.Store.ListMCPServers(ctx)
	if err != nil {
		return err
	}
	cfgs := make([]mcp.ServerConfig, 0, len(rows))
	for _, row := range rows {
		cfg, _ := s.mcpConfigs.Config(ctx, row) // unreadable secrets are exported as absent
		cfgs = append(cfgs, cfg)
	}
	data, err := mcp.ExportServersJSON(cfgs, false)
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderContentDisposition, `attachment; filename="atrium-mcp.json"`)
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.Blob(http.StatusOK, "application/json", data)
}
