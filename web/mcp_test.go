package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"atrium/internal/llm/llmtest"
	"atrium/internal/mcp"
	"atrium/internal/store"
	"atrium/views"
)

// mcpTestEnv is a test env with an admin logged in (the supervisor is real; remote
// servers point at a closed port and so end up failed).
func mcpTestEnv(t *testing.T) (*testEnv, *browser) {
	t.Helper()
	env := newTestEnv(t)
	return env, env.setup()
}

// closedURL is an http URL nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr + "/mcp"
}

func (e *testEnv) mcpRows() []store.MCPServer {
	e.t.Helper()
	rows, err := e.db.ListMCPServers(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return rows
}

func (e *testEnv) mcpRow(name string) store.MCPServer {
	e.t.Helper()
	for _, r := range e.mcpRows() {
		if r.Name == name {
			return r
		}
	}
	e.t.Fatalf("no MCP server row %q", name)
	return store.MCPServer{}
}

// mcpState waits until the supervisor reports want for the server.
func (e *testEnv) waitMCPState(name, want string) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		for _, st := range e.srv.MCP.Statuses() {
			if st.Name == name {
				last = string(st.State)
			}
		}
		if last == want {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.t.Fatalf("server %s is %q, want %q", name, last, want)
}

// dbBytes is the database file with its WAL, as stored on disk.
func (e *testEnv) dbBytes() []byte {
	e.t.Helper()
	var all []byte
	matches, _ := filepath.Glob(filepath.Join(e.dir, "atrium.db*"))
	if len(matches) == 0 {
		e.t.Fatalf("no database files in %s", e.dir)
	}
	for _, m := range matches {
		b, err := os.ReadFile(m)
		if err != nil {
			e.t.Fatal(err)
		}
		all = append(all, b...)
	}
	return all
}

func TestMCPSettingsAdminOnly(t *testing.T) {
	env, admin := mcpTestEnv(t)
	bob := env.user(admin, "bob")
	for _, p := range []string{"/settings/mcp", "/settings/mcp/export"} {
		wantStatus(t, bob.get(p), http.StatusForbidden)
		wantStatus(t, admin.get(p), http.StatusOK)
	}
	wantStatus(t, bob.post("/settings/mcp", url.Values{"name": {"x"}, "transport": {"stdio"}, "command": {"true"}}), http.StatusForbidden)
	wantStatus(t, bob.post("/settings/mcp/import", url.Values{"json": {`{"mcpServers":{"x":{"command":"true"}}}`}}), http.StatusForbidden)
	if rows := env.mcpRows(); len(rows) != 0 {
		t.Fatalf("a plain user created %d MCP servers", len(rows))
	}
	// A plain user's page has no MCP link; the admin's has.
	if strings.Contains(bob.get("/settings/account").body, `data-testid="nav-mcp"`) {
		t.Error("a plain user sees the MCP link")
	}
	if !strings.Contains(admin.get("/settings/account").body, `data-testid="nav-mcp"`) {
		t.Error("the admin sees no MCP link")
	}
}

func TestMCPSettingsCRUDAndSecrets(t *testing.T) {
	env, admin := mcpTestEnv(t)
	const token = "tok-0123456789-abcdefWXYZ"
	const envSecret = "env-secret-9876543210-QRST"
	remote := closedURL(t)

	r := admin.post("/settings/mcp", url.Values{"name": {"remote"}, "transport": {"http"}, "url": {remote},
		"headers": {"X-Api-Key: " + envSecret + "h"}, "bearer_token": {token}, "timeout": {"15"}, "deny_tools": {"rm\nexec"}})
	wantStatus(t, r, http.StatusSeeOther)
	r = admin.post("/settings/mcp", url.Values{"name": {"local"}, "transport": {"stdio"}, "command": {"/nonexistent/mcp-server"},
		"args": {"--flag\nvalue with space"}, "env": {"API_KEY=" + envSecret}})
	wantStatus(t, r, http.StatusSeeOther)

	row := env.mcpRow("remote")
	if !row.Enabled || row.Transport != "http" || len(row.SecretsSealed) == 0 {
		t.Fatalf("remote row: %+v", row)
	}
	if bytes.Contains(row.Config, []byte(token)) {
		t.Fatal("the token is in the config JSON")
	}
	cfg, err := env.srv.ServerConfig(context.Background(), row)
	if err != nil || cfg.BearerToken != token || cfg.Headers["X-Api-Key"] != envSecret+"h" || cfg.CallTimeout != 15*time.Second ||
		strings.Join(cfg.DenyTools, ",") != "rm,exec" {
		t.Fatalf("remote config %+v, %v", cfg, err)
	}
	local, err := env.srv.ServerConfig(context.Background(), env.mcpRow("local"))
	if err != nil || local.Env["API_KEY"] != envSecret || strings.Join(local.Args, "|") != "--flag|value with space" {
		t.Fatalf("local config %+v, %v", local, err)
	}
	for _, secret := range []string{token, envSecret} {
		if bytes.Contains(env.dbBytes(), []byte(secret)) {
			t.Errorf("the secret %q is stored in clear in the database file", secret)
		}
	}

	env.waitMCPState("remote", "failed")
	env.waitMCPState("local", "failed")
	page := admin.get("/settings/mcp")
	wantStatus(t, page, http.StatusOK)
	for _, secret := range []string{token, envSecret} {
		if strings.Contains(page.body, secret) {
			t.Errorf("the page shows the secret %q", secret)
		}
	}
	for _, want := range []string{`data-testid="mcp-server" data-server="remote" data-state="failed"`,
		`data-testid="mcp-server" data-server="local" data-state="failed"`, "••••WXYZ", "API_KEY=••••QRST", `data-testid="mcp-error"`} {
		if !strings.Contains(page.body, want) {
			t.Errorf("the page lacks %s", want)
		}
	}

	// Edit with empty secret fields keeps the stored secrets.
	id := itoa(row.ID)
	r = admin.post("/settings/mcp/"+id, url.Values{"name": {"remote"}, "transport": {"http"}, "url": {remote + "2"}})
	wantStatus(t, r, http.StatusSeeOther)
	cfg, _ = env.srv.ServerConfig(context.Background(), env.mcpRow("remote"))
	if cfg.BearerToken != token || cfg.Headers["X-Api-Key"] != envSecret+"h" || cfg.URL != remote+"2" {
		t.Fatalf("after an edit without secrets: %+v", cfg)
	}
	// A bad edit is refused with the message and changes nothing.
	r = admin.post("/settings/mcp/"+id, url.Values{"name": {"Bad Name"}, "transport": {"http"}, "url": {remote}})
	wantStatus(t, r, http.StatusBadRequest)
	if !strings.Contains(r.body, `data-testid="form-error"`) || env.mcpRow("remote").ID != row.ID {
		t.Errorf("bad edit: %.300s", r.body)
	}

	// Disable: the row changes and the supervisor reports the server disabled.
	wantStatus(t, admin.post("/settings/mcp/"+id+"/disable", nil), http.StatusSeeOther)
	if env.mcpRow("remote").Enabled {
		t.Fatal("disable did not change the row")
	}
	env.waitMCPState("remote", "disabled")
	if !strings.Contains(admin.get("/settings/mcp").body, `data-server="remote" data-state="disabled"`) {
		t.Error("the page does not show the server disabled")
	}
	wantStatus(t, admin.post("/settings/mcp/"+id+"/enable", nil), http.StatusSeeOther)
	if !env.mcpRow("remote").Enabled {
		t.Fatal("enable did not change the row")
	}
	env.waitMCPState("remote", "failed")

	// Delete.
	wantStatus(t, admin.post("/settings/mcp/"+id+"/delete", nil), http.StatusSeeOther)
	if len(env.mcpRows()) != 1 {
		t.Fatalf("%d rows after delete, want 1", len(env.mcpRows()))
	}
	for _, st := range env.srv.MCP.Statuses() {
		if st.Name == "remote" {
			t.Error("the supervisor still has the deleted server")
		}
	}
	wantStatus(t, admin.post("/settings/mcp/999/delete", nil), http.StatusNotFound)
}

func TestMCPImportExport(t *testing.T) {
	env, admin := mcpTestEnv(t)
	const token = "import-token-0123456789"
	remote := closedURL(t)

	// Malformed JSON: the line is named, nothing is created, the paste is kept.
	bad := "{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\",}\n  }\n}"
	r := admin.post("/settings/mcp/import", url.Values{"json": {bad}})
	wantStatus(t, r, http.StatusBadRequest)
	if !strings.Contains(r.body, `data-testid="form-error"`) || !strings.Contains(r.body, "line 3") {
		t.Errorf("no line-level error: %.2000s", cardOrError(r.body))
	}
	if !strings.Contains(r.body, "&#34;command&#34;: &#34;x&#34;,}") && !strings.Contains(r.body, `"command": "x",}`) {
		t.Error("the paste was not kept")
	}
	if n := len(env.mcpRows()); n != 0 {
		t.Fatalf("%d rows after a malformed import", n)
	}
	// A valid paste with one invalid server creates nothing either.
	r = admin.post("/settings/mcp/import", url.Values{"json": {`{"mcpServers":{"ok":{"command":"true"},"bad":{"url":"ftp://x"}}}`}})
	wantStatus(t, r, http.StatusBadRequest)
	if n := len(env.mcpRows()); n != 0 {
		t.Fatalf("%d rows after an import with an invalid server", n)
	}

	good := `{"mcpServers": {
		"everything": {"command": "/nonexistent/npx", "args": ["-y", "@modelcontextprotocol/server-everything"], "env": {"SECRET": "` + token + `"}},
		"remote": {"url": "` + remote + `", "headers": {"Authorization": "Bearer ` + token + `"}}
	}}`
	wantStatus(t, admin.post("/settings/mcp/import", url.Values{"json": {good}}), http.StatusSeeOther)
	rows := env.mcpRows()
	if len(rows) != 2 || rows[0].Name != "everything" || rows[1].Name != "remote" || rows[1].Transport != "http" {
		t.Fatalf("rows after import: %+v", rows)
	}
	if bytes.Contains(env.dbBytes(), []byte(token)) {
		t.Error("an imported secret is stored in clear")
	}
	env.waitMCPState("remote", "failed")

	// Export: secrets REDACTED.
	r = admin.get("/settings/mcp/export")
	wantStatus(t, r, http.StatusOK)
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("export content type %q", ct)
	}
	if cd := r.Header.Get("Content-Disposition"); !strings.Contains(cd, "atrium-mcp.json") {
		t.Errorf("export disposition %q", cd)
	}
	if strings.Contains(r.body, token) || !strings.Contains(r.body, mcp.RedactedValue) {
		t.Fatalf("export: %s", r.body)
	}
	var doc struct {
		MCPServers map[string]json.RawMessage `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(r.body), &doc); err != nil || len(doc.MCPServers) != 2 {
		t.Fatalf("export is not mcpServers JSON: %v %s", err, r.body)
	}

	// Re-importing the export keeps the stored secrets (REDACTED) and updates by name.
	wantStatus(t, admin.post("/settings/mcp/import", url.Values{"json": {r.body}}), http.StatusSeeOther)
	rows = env.mcpRows()
	if len(rows) != 2 {
		t.Fatalf("%d rows after re-import", len(rows))
	}
	for _, row := range rows {
		cfg, err := env.srv.ServerConfig(context.Background(), row)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(cfg.Secrets(), " "), token) {
			t.Errorf("%s lost its secret on re-import: %v", row.Name, cfg.Secrets())
		}
	}
	// REDACTED for a server with nothing stored is an error.
	r = admin.post("/settings/mcp/import", url.Values{"json": {`{"mcpServers":{"new":{"command":"x","env":{"K":"REDACTED"}}}}`}})
	wantStatus(t, r, http.StatusBadRequest)
	if len(env.mcpRows()) != 2 {
		t.Error("an import with an unknown REDACTED value created a row")
	}
}

// cardOrError returns the interesting part of a page for a failure message.
func cardOrError(body string) string {
	if i := strings.Index(body, `data-testid="form-error"`); i >= 0 {
		return body[i:]
	}
	return body
}

func TestMCPLiveStatus(t *testing.T) {
	env, admin := mcpTestEnv(t)
	id := admin.newSession()

	// A settings page's socket gets the cards.
	d := websocket.Dialer{Jar: admin.jar, HandshakeTimeout: 5 * time.Second}
	wsBase := "ws" + strings.TrimPrefix(env.ts.URL, "http")
	conn, _, err := d.Dial(wsBase+"/settings/mcp/ws", http.Header{"Origin": {env.ts.URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	settings := &wsConn{t: t, conn: conn}
	chat := admin.dial(id)

	wantStatus(t, admin.post("/settings/mcp", url.Values{"name": {"remote"}, "transport": {"http"}, "url": {closedURL(t)}}), http.StatusSeeOther)
	frames := settings.until(`data-server="remote" data-state="failed"`)
	last := frames[len(frames)-1]
	if !strings.Contains(last, `id="mcp-server-remote"`) || !strings.Contains(last, `hx-swap-oob="morph"`) || strings.Contains(last, "_csrf") {
		t.Errorf("card frame: %s", last)
	}
	chat.until(`data-level="failed"`)

	// A plain user cannot open the settings socket.
	bob := env.user(admin, "bob")
	d = websocket.Dialer{Jar: bob.jar, HandshakeTimeout: 5 * time.Second}
	if _, resp, err := d.Dial(wsBase+"/settings/mcp/ws", http.Header{"Origin": {env.ts.URL}}); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("a plain user's settings socket: %v", err)
	}

	// The chat page renders the indicator.
	page := admin.get("/s/" + id)
	if !strings.Contains(page.body, `data-testid="mcp-indicator"`) || !strings.Contains(page.body, "MCP 0/1 ready") ||
		!strings.Contains(page.body, `data-testid="resources-button"`) {
		t.Errorf("chat page without the MCP indicator or resources button")
	}
}

func TestMCPAttachmentFromUnreadyServerSendsNothing(t *testing.T) {
	env, admin := mcpTestEnv(t)
	admin.addProvider("Fake", env.llm.URL(), "fake-model", "")
	id := admin.newSession()
	ws := admin.dial(id)
	ws.write(websocket.TextMessage, `{"type":"send","text":"hello","attach":"nosuch\nfile:///x","HEADERS":{}}`)
	frames := ws.until(noticeID)
	if f := frames[len(frames)-1]; !strings.Contains(f, "Could not read the resource file:///x from nosuch") {
		t.Errorf("notice: %s", f)
	}
	if msgs := env.messages(id); len(msgs) != 0 {
		t.Errorf("%d messages stored after a failed attachment", len(msgs))
	}
	// Resources and prompts with no ready server: empty lists, not errors.
	r := admin.get("/s/" + id + "/resources")
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(r.body, `data-testid="no-resources"`) {
		t.Errorf("resources: %s", r.body)
	}
	r = admin.get("/s/" + id + "/prompts")
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(r.body, `data-testid="no-prompts"`) {
		t.Errorf("prompts: %s", r.body)
	}
	r = admin.postRaw("/s/"+id+"/prompt", url.Values{"server": {"x"}, "name": {"y"}}, http.Header{"X-Csrf-Token": {admin.token()}, "Hx-Request": {"true"}})
	wantStatus(t, r, http.StatusNotFound)
	// Someone else's session is not found.
	bob := env.user(admin, "bob")
	wantStatus(t, bob.get("/s/"+id+"/resources"), http.StatusNotFound)
}

func TestMCPSettingsViewEscapesStderr(t *testing.T) {
	v := views.MCPSettings{Servers: []views.MCPServerItem{{ID: 7, Enabled: true, Command: "npx",
		EnvHints: []string{"KEY=••••abcd"},
		Status: views.MCPStatus{Name: "srv", Transport: "stdio", State: "failed", Error: "exit <b>1</b>",
			Tools:  []views.MCPTool{{Name: "echo", Description: "Echoes <i>back</i>"}},
			Stderr: []string{"starting", "<script>alert(1)</script>"}}}}}
	var buf bytes.Buffer
	if err := views.MCPSettingsPage(views.Page{CSRF: "tok"}, v).Render(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	html := buf.String()
	for _, want := range []string{`id="mcp-server-srv"`, `data-testid="mcp-server" data-server="srv" data-state="failed"`,
		`data-testid="mcp-tool"`, `<pre data-testid="mcp-stderr">starting` + "\n" + `&lt;script&gt;alert(1)&lt;/script&gt;</pre>`,
		`exit &lt;b&gt;1&lt;/b&gt;`, `action="/settings/mcp/7/disable"`, `ws-connect="/settings/mcp/ws"`} {
		if !strings.Contains(html, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if strings.Contains(html, "<script>alert") || strings.Contains(html, "<i>back") {
		t.Error("stderr or a description was not escaped")
	}
	// The stderr log is collapsed.
	if i := strings.Index(html, `class="mcp-stderr"`); i < 0 || strings.Contains(html[i-20:i+40], "open") {
		t.Error("the stderr log is not a collapsed details")
	}
}

// startMCPServer serves a tiny in-process MCP server (streamable HTTP) with one text
// resource, one binary resource and one prompt with a required argument.
func startMCPServer(t *testing.T) string {
	t.Helper()
	s := mcpserver.NewMCPServer("test", "1.0", mcpserver.WithResourceCapabilities(false, false), mcpserver.WithPromptCapabilities(false))
	s.AddResource(mcpgo.NewResource("file:///notes.md", "Notes", mcpgo.WithMIMEType("text/markdown")),
		func(ctx context.Context, req mcpgo.ReadResourceRequest) ([]mcpgo.ResourceContents, error) {
			return []mcpgo.ResourceContents{mcpgo.TextResourceContents{URI: req.Params.URI, MIMEType: "text/markdown", Text: "# Notes\nremember <this>"}}, nil
		})
	s.AddPrompt(mcpgo.NewPrompt("greet", mcpgo.WithPromptDescription("Say hello"), mcpgo.WithArgument("who", mcpgo.RequiredArgument())),
		func(ctx context.Context, req mcpgo.GetPromptRequest) (*mcpgo.GetPromptResult, error) {
			return mcpgo.NewGetPromptResult("", []mcpgo.PromptMessage{
				mcpgo.NewPromptMessage(mcpgo.RoleUser, mcpgo.NewTextContent("Please greet "+req.Params.Arguments["who"]+".")),
			}), nil
		})
	ts := httptest.NewServer(mcpserver.NewStreamableHTTPServer(s))
	t.Cleanup(ts.Close)
	return ts.URL + "/mcp"
}

func TestMCPResourcesAndPrompts(t *testing.T) {
	env, admin := mcpTestEnv(t)
	wantStatus(t, admin.post("/settings/mcp", url.Values{"name": {"notes"}, "transport": {"http"}, "url": {startMCPServer(t)}}), http.StatusSeeOther)
	env.waitMCPState("notes", "ready")
	admin.addProvider("Fake", env.llm.URL(), "fake-model", "")
	id := admin.newSession()

	r := admin.get("/s/" + id + "/resources")
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(r.body, `data-testid="attach-resource" data-attach="notes`+"\n"+`file:///notes.md"`) {
		t.Fatalf("resource panel: %s", r.body)
	}

	r = admin.get("/s/" + id + "/prompts")
	wantStatus(t, r, http.StatusOK)
	for _, want := range []string{`data-testid="prompt-item" data-label="/notes:greet"`, "Say hello", `name="arg.who" required`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("prompt menu lacks %s: %s", want, r.body)
		}
	}
	hx := http.Header{"X-Csrf-Token": {admin.token()}, "Hx-Request": {"true"}}
	r = admin.postRaw("/s/"+id+"/prompt", url.Values{"server": {"notes"}, "name": {"greet"}}, hx)
	wantStatus(t, r, http.StatusBadRequest)
	if !strings.Contains(r.body, `needs the argument "who"`) {
		t.Errorf("missing argument: %s", r.body)
	}
	r = admin.postRaw("/s/"+id+"/prompt", url.Values{"server": {"notes"}, "name": {"greet"}, "arg.who": {"Ada"}}, hx)
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(r.body, "Please greet Ada.") {
		t.Errorf("prompt text: %q", r.body)
	}

	// Attach the resource: its content goes before the text in the stored message.
	env.llm.Enqueue(llmtest.Reply{Text: []string{"ok"}})
	ws := admin.dial(id)
	ws.write(websocket.TextMessage, `{"type":"send","text":"summarise","attach":["notes\nfile:///notes.md"],"HEADERS":{}}`)
	ws.until(finalMarker)
	msgs := env.messages(id)
	if len(msgs) == 0 || msgs[0].Role != store.RoleUser {
		t.Fatalf("messages: %+v", msgs)
	}
	want := "Attached resource file:///notes.md (text/markdown):\n```\n# Notes\nremember <this>\n```\n\nsummarise"
	if msgs[0].Content != want {
		t.Errorf("stored user message %q, want %q", msgs[0].Content, want)
	}
}

// A credential in a server's URL is sealed when saved through the form, shown REDACTED
// on the page, kept when the REDACTED form is saved, and a row saved before this in
// clear is sealed when the servers are next applied.
func TestMCPURLCredentialSealed(t *testing.T) {
	env, admin := mcpTestEnv(t)
	const secret = "SEKRET-form-24680"
	remote := closedURL(t) + "?api_key=" + secret
	wantStatus(t, admin.post("/settings/mcp", url.Values{"name": {"remote"}, "transport": {"http"}, "url": {remote}}), http.StatusSeeOther)
	page := admin.get("/settings/mcp").body
	if strings.Contains(page, secret) || !strings.Contains(page, "api_key=REDACTED") {
		t.Fatalf("the page shows the credential (or no REDACTED mark)")
	}
	row := env.mcpRow("remote")
	wantStatus(t, admin.post(fmt.Sprintf("/settings/mcp/%d", row.ID), url.Values{"name": {"remote"}, "transport": {"http"},
		"url": {strings.ReplaceAll(remote, secret, "REDACTED")}}), http.StatusSeeOther)
	if cfg, err := env.srv.ServerConfig(context.Background(), env.mcpRow("remote")); err != nil || cfg.URL != remote {
		t.Fatalf("after saving the REDACTED form: %q, %v", cfg.URL, err)
	}

	// A row from before: its URL in the plain config.
	old := store.MCPServer{Name: "older", Transport: "http", Enabled: true,
		Config: []byte(`{"url":"` + closedURL(t) + `?token=` + secret + `"}`)}
	if err := env.db.SaveMCPServer(context.Background(), &old, func(int64) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if err := env.srv.ApplyMCP(context.Background()); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(env.mcpRow("older").Config, []byte(secret)) {
		t.Fatal("the older row's credential is still stored in clear")
	}
	if cfg, _ := env.srv.ServerConfig(context.Background(), env.mcpRow("older")); !strings.Contains(cfg.URL, "token="+secret) {
		t.Fatalf("the older row's URL lost its credential: %q", cfg.URL)
	}
}

// TestMCPSecretArgumentForm: an argument marked secret on the form is REDACTED on the
// page and in the export, not in the database file, and kept when the REDACTED form
// is saved.
func TestMCPSecretArgumentForm(t *testing.T) {
	env, admin := mcpTestEnv(t)
	const secret = "SEKRET-arg-97531"
	wantStatus(t, admin.post("/settings/mcp", url.Values{"name": {"local"}, "transport": {"stdio"},
		"command": {"/nonexistent/mcp-server"}, "args": {"serve\n" + secret + "\n--verbose"}, "secret_args": {"2"}}), http.StatusSeeOther)
	page := admin.get("/settings/mcp").body
	if strings.Contains(page, secret) || !strings.Contains(page, "serve\nREDACTED\n--verbose") {
		t.Fatalf("the form shows the secret argument (or no REDACTED line):\n%.4000s", page)
	}
	if export := admin.get("/settings/mcp/export").body; strings.Contains(export, secret) {
		t.Fatalf("the export holds the secret argument:\n%s", export)
	}
	if bytes.Contains(env.dbBytes(), []byte(secret)) {
		t.Fatal("the database file holds the secret argument in clear")
	}
	row := env.mcpRow("local")
	wantStatus(t, admin.post(fmt.Sprintf("/settings/mcp/%d", row.ID), url.Values{"name": {"local"}, "transport": {"stdio"},
		"command": {"/nonexistent/mcp-server"}, "args": {"serve\nREDACTED\n--verbose"}, "secret_args": {"2"}}), http.StatusSeeOther)
	if cfg, err := env.srv.ServerConfig(context.Background(), env.mcpRow("local")); err != nil || strings.Join(cfg.Args, " ") != "serve "+secret+" --verbose" {
		t.Fatalf("after saving the REDACTED form: %q, %v", cfg.Args, err)
	}
	r := admin.post(fmt.Sprintf("/settings/mcp/%d", row.ID), url.Values{"name": {"local"}, "transport": {"stdio"},
		"command": {"/nonexistent/mcp-server"}, "args": {"serve"}, "secret_args": {"two"}})
	if r.StatusCode != http.StatusBadRequest || !strings.Contains(r.body, "line number") {
		t.Fatalf("a bad mark: %d", r.StatusCode)
	}
}
