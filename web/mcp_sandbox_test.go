package web_test

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"atrium/internal/sandbox"
)

// TestMCPSandboxSettings: the form stores the sandbox settings, the page shows the
// sandbox line and the paths, the edit form is refilled with them, and a bad path is
// refused with a message that names it.
func TestMCPSandboxSettings(t *testing.T) {
	env, admin := mcpTestEnv(t)
	wantStatus(t, admin.post("/settings/mcp", url.Values{"name": {"fs"}, "transport": {"stdio"}, "command": {"/nonexistent/mcp-server"},
		"sandbox": {"on"}, "read_paths": {"/srv/ro\r\n\r\n  /srv/docs  "}, "write_paths": {"/srv/rw"}}), http.StatusSeeOther)
	wantStatus(t, admin.post("/settings/mcp", url.Values{"name": {"plain"}, "transport": {"stdio"}, "command": {"/nonexistent/mcp-server"}}),
		http.StatusSeeOther)

	cfg, err := env.srv.ServerConfig(context.Background(), env.mcpRow("fs"))
	if err != nil || !cfg.Sandbox || cfg.Network || !slices.Equal(cfg.ReadPaths, []string{"/srv/ro", "/srv/docs"}) || !slices.Equal(cfg.WritePaths, []string{"/srv/rw"}) {
		t.Fatalf("stored: %+v, %v", cfg, err)
	}
	if plain, _ := env.srv.ServerConfig(context.Background(), env.mcpRow("plain")); plain.Sandbox {
		t.Fatalf("a server added without the box ticked is sandboxed: %+v", plain)
	}

	page := admin.get("/settings/mcp")
	wantStatus(t, page, http.StatusOK)
	line := sandbox.Check().Describe(cfg.SandboxPolicy(""))
	for _, want := range []string{line, "read /srv/docs", "write /srv/rw", "no network", `name="sandbox" value="on" checked`,
		"/srv/ro\n/srv/docs</textarea>"} {
		if !strings.Contains(page.body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}

	id := itoa(env.mcpRow("fs").ID)
	wantStatus(t, admin.post("/settings/mcp/"+id, url.Values{"name": {"fs"}, "transport": {"stdio"}, "command": {"/nonexistent/mcp-server"},
		"sandbox": {"on"}, "network": {"on"}, "read_paths": {"/srv/ro"}}), http.StatusSeeOther)
	if cfg, _ = env.srv.ServerConfig(context.Background(), env.mcpRow("fs")); !cfg.Network || cfg.WritePaths != nil {
		t.Fatalf("after the edit: %+v", cfg)
	}
	if page := admin.get("/settings/mcp"); !strings.Contains(page.body, "network allowed") {
		t.Error("the page does not say the network is allowed")
	}

	for path, want := range map[string]string{"relative/dir": "is not absolute", "/srv/../etc": `write it as &#34;/etc&#34;`} {
		r := admin.post("/settings/mcp/"+id, url.Values{"name": {"fs"}, "transport": {"stdio"}, "command": {"/nonexistent/mcp-server"},
			"sandbox": {"on"}, "write_paths": {path}})
		wantStatus(t, r, http.StatusBadRequest)
		if !strings.Contains(r.body, want) {
			t.Errorf("path %q: the answer lacks %q: %.400s", path, want, r.body)
		}
	}
	if cfg, _ = env.srv.ServerConfig(context.Background(), env.mcpRow("fs")); !cfg.Network {
		t.Fatalf("a refused edit changed the server: %+v", cfg)
	}
}
