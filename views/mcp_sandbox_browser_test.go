package views_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/a-h/templ"
	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"

	"atrium/assets"
	"atrium/views"
)

// TestBrowserMCPSandboxForm: a sandboxed server's facts show the sandbox line and its
// paths, and its edit form, refilled with them, submits the sandbox box, the paths (one
// per line) and the network box, under the strict CSP.
func TestBrowserMCPSandboxForm(t *testing.T) {
	ctx, problems := browser(t, 1100, 900)
	v := views.MCPSettings{Servers: []views.MCPServerItem{{ID: 7, Enabled: true, Command: "npx",
		Status:  views.MCPStatus{Name: "fs", Transport: "stdio", State: "ready"},
		Sandbox: "sandboxed (Landlock ABI 7)", SandboxOn: true, ReadPaths: []string{"/srv/ro", "/srv/docs"}, WritePaths: []string{"/srv/rw"}}}}
	posted := make(chan url.Values, 1)
	mux := http.NewServeMux()
	mux.Handle("/assets/", assets.Handler())
	mux.Handle("GET /settings/mcp", templ.Handler(views.MCPSettingsPage(page, v)))
	mux.HandleFunc("POST /settings/mcp/7", func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		posted <- r.PostForm
		w.Write([]byte("saved"))
	})
	up := websocket.Upgrader{}
	mux.HandleFunc("GET /settings/mcp/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				return
			}
		}
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", testCSP)
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	run(t, ctx, chromedp.Navigate(srv.URL+"/settings/mcp"),
		waitJS(`document.querySelector("[data-testid=mcp-sandbox]")?.textContent.includes("sandboxed (Landlock ABI 7)")`),
		waitJS(`document.querySelector("[data-testid=mcp-sandbox]").textContent.includes("write /srv/rw")`),
		clickJS(`[data-testid=mcp-entry] [data-testid=mcp-edit]`),
		waitJS(`document.querySelector("[data-testid=mcp-entry] [data-testid=mcp-sandbox-input]").checked`),
		waitJS(`document.querySelector("[data-testid=mcp-entry] [data-testid=mcp-read-paths]").value === "/srv/ro\n/srv/docs"`),
		clickJS(`[data-testid=mcp-entry] [data-testid=mcp-network-input]`),
		waitJS(`(() => { document.querySelector("[data-testid=mcp-entry] [data-testid=mcp-write-paths]").value = "/srv/rw\n/srv/out"; return true })()`),
		clickJS(`[data-testid=mcp-entry] [data-testid=mcp-save]`),
	)
	select {
	case f := <-posted:
		if f.Get("sandbox") != "on" || f.Get("network") != "on" || f.Get("read_paths") != "/srv/ro\r\n/srv/docs" || f.Get("write_paths") != "/srv/rw\r\n/srv/out" {
			t.Errorf("posted %q", f)
		}
	case <-ctx.Done():
		t.Fatal("the form was not posted")
	}
	problems.Check(t)
}
