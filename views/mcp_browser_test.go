package views_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/a-h/templ"
	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"

	"atrium/assets"
	"atrium/views"
)

// TestBrowserMCPComposer checks the MCP parts of the composer in a browser: the
// resource panel and attachment chips (sent by htmx-ext-ws as "attach": a string for
// one, an array for several), the slash-command prompt menu and its argument form,
// and the indicator frame, under the strict CSP.
func TestBrowserMCPComposer(t *testing.T) {
	ctx, problems := browser(t, 1100, 800)
	chat := sampleChat()
	chat.Messages, chat.Live, chat.RunState, chat.OlderCursor = nil, nil, "idle", 0
	chat.MCP = &views.MCPIndicator{Total: 2, Ready: 2, Resources: 2, Prompts: 2}

	conns := make(chan *websocket.Conn, 4)
	frames := make(chan map[string]any, 16)
	up := websocket.Upgrader{}
	mux := http.NewServeMux()
	mux.Handle("/assets/", assets.Handler())
	mux.Handle("GET /s/s1", templ.Handler(views.ChatPage(page, chat)))
	mux.Handle("GET /s/s1/resources", templ.Handler(views.ResourcePanel([]views.MCPResourceGroup{
		{Server: "srv", Resources: []views.MCPResource{{URI: "file:///a.md", Name: "A <doc>", MimeType: "text/markdown"}, {URI: "file:///b", Name: "B"}}},
		{Server: "down", Error: "Could not list the resources: timeout"},
	})))
	mux.Handle("GET /s/s1/prompts", templ.Handler(views.PromptMenu("s1", []views.MCPPrompt{
		{Server: "srv", Name: "greet", Description: "Say hello", Arguments: []views.MCPPromptArg{{Name: "who", Required: true}}},
		{Server: "srv", Name: "other"},
	})))
	mux.HandleFunc("POST /s/s1/prompt", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-CSRF-Token") != page.CSRF {
			http.Error(w, "no csrf", http.StatusForbidden)
			return
		}
		if r.FormValue("arg.who") == "" {
			http.Error(w, "needs who", http.StatusBadRequest)
			return
		}
		w.Write([]byte("Greet " + r.FormValue("arg.who") + " from " + r.FormValue("server") + ":" + r.FormValue("name")))
	})
	mux.HandleFunc("GET /s/s1/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		conns <- c
		for {
			_, data, err := c.ReadMessage()
			if err != nil {
				return
			}
			var m map[string]any
			if json.Unmarshal(data, &m) == nil {
				frames <- m
			}
		}
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", testCSP)
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	h := &chatHarness{url: srv.URL, conns: conns, frames: frames}

	run(t, ctx, chromedp.Navigate(h.url+"/s/s1"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=composer]`)))
	c := h.conn(t)
	run(t, ctx,
		waitJS(`document.querySelector("[data-testid=mcp-indicator]")?.textContent === "MCP 2/2 ready"`),
		chromedp.Click(chromedp.CSS(`[data-testid=resources-button]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=attach-resource]`)),
		clickJS(`[data-testid=resource][data-resource="file:///a.md"] [data-testid=attach-resource]`),
		waitJS(`document.querySelectorAll("#composer [data-testid=attachment-chip]").length === 1`),
		waitJS(`document.querySelector("[data-testid=attachment-chip]").textContent.includes("A <doc>")`),
		chromedp.Click(chromedp.CSS(`[data-testid=composer]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=composer]`), "hello"),
		chromedp.KeyEvent("\r"),
	)
	got := h.next(t)
	if got["text"] != "hello" || got["attach"] != "srv\nfile:///a.md" {
		t.Fatalf("one attachment: browser sent %v", got)
	}
	// The chips go once the server accepted the message.
	run(t, ctx, waitJS(`document.querySelectorAll("[data-testid=attachment-chip]").length === 1`))
	send(t, c, views.FrameSendResult(got["nonce"].(string), true))
	run(t, ctx, waitJS(`document.querySelectorAll("[data-testid=attachment-chip]").length === 0`))

	// Two attachments go as an array; the panel stays open between attaches.
	run(t, ctx,
		clickJS(`[data-testid=resource][data-resource="file:///a.md"] [data-testid=attach-resource]`),
		clickJS(`[data-testid=resource][data-resource="file:///b"] [data-testid=attach-resource]`),
		waitJS(`document.querySelectorAll("[data-testid=attachment-chip]").length === 2`),
		chromedp.Click(chromedp.CSS(`[data-testid=composer]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=composer]`), "two"),
		chromedp.KeyEvent("\r"),
	)
	got = h.next(t)
	if list, _ := got["attach"].([]any); len(list) != 2 || list[0] != "srv\nfile:///a.md" || list[1] != "srv\nfile:///b" {
		t.Fatalf("two attachments: browser sent %v", got)
	}
	send(t, c, views.FrameSendResult(got["nonce"].(string), true))
	run(t, ctx, waitJS(`document.querySelectorAll("[data-testid=attachment-chip]").length === 0 && document.querySelector("[data-testid=composer]").value === ""`))

	// "/" opens the prompt menu; typing filters; Enter picks the first match, whose
	// argument form answers into the composer.
	run(t, ctx,
		chromedp.Click(chromedp.CSS(`[data-testid=composer]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=composer]`), "/"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=prompt-menu] [data-testid=prompt-item]`)),
		waitJS(`document.querySelectorAll("[data-testid=prompt-item]:not([hidden])").length === 2`),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=composer]`), "gr"),
		waitJS(`document.querySelectorAll("[data-testid=prompt-item]:not([hidden])").length === 1`),
		chromedp.KeyEvent("\r"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=prompt-arg][data-arg=who]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=prompt-arg][data-arg=who]`), "Ada"),
		chromedp.Click(chromedp.CSS(`[data-prompt-form]:not([hidden]) [data-testid=prompt-use]`)),
		waitJS(`document.querySelector("[data-testid=composer]").value === "Greet Ada from srv:greet"`),
		waitJS(`document.querySelector("[data-testid=prompt-menu]").hidden`),
	)
	select {
	case f := <-frames:
		t.Fatalf("choosing a prompt sent a message: %v", f)
	default:
	}

	// The indicator follows frames.
	send(t, c, views.FrameMCPIndicator(views.MCPIndicator{Total: 2, Ready: 1, Failed: 1}))
	run(t, ctx, waitJS(`document.querySelector("[data-testid=mcp-indicator]")?.dataset.level === "failed" &&
		document.querySelector("[data-testid=mcp-indicator]").textContent === "MCP 1/2 ready"`))
	problems.Check(t)
}

// clickJS clicks the first element matching sel from JavaScript.
func clickJS(sel string) chromedp.Action[chromedp.Void] {
	b, _ := json.Marshal(sel)
	return waitJS(`(() => { const e = document.querySelector(` + string(b) + `); if (!e) return false; e.click(); return true })()`)
}

// TestBrowserMCPSettingsLive checks that state frames morph a server's card on the
// settings page (the reader's open stderr log stays open) and the indicator.
func TestBrowserMCPSettingsLive(t *testing.T) {
	ctx, problems := browser(t, 1100, 800)
	v := views.MCPSettings{Indicator: views.MCPIndicator{Total: 1, Connecting: 1}, Servers: []views.MCPServerItem{{ID: 1, Enabled: true, Command: "npx",
		Status: views.MCPStatus{Name: "everything", Transport: "stdio", State: "connecting", Stderr: []string{"booting <x>"}}}}}
	conns := make(chan *websocket.Conn, 4)
	up := websocket.Upgrader{}
	mux := http.NewServeMux()
	mux.Handle("/assets/", assets.Handler())
	mux.Handle("GET /settings/mcp", templ.Handler(views.MCPSettingsPage(page, v)))
	mux.HandleFunc("GET /settings/mcp/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		conns <- c
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
	h := &chatHarness{url: srv.URL, conns: conns}

	run(t, ctx, chromedp.Navigate(h.url+"/settings/mcp"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=mcp-server][data-server=everything][data-state=connecting]`)))
	c := h.conn(t)
	run(t, ctx, clickJS(`.mcp-stderr > summary`), waitJS(`document.querySelector(".mcp-stderr").open`))
	send(t, c, views.FrameMCPServer(views.MCPStatus{Name: "everything", Transport: "stdio", State: "ready", Resources: 3,
		Tools: []views.MCPTool{{Name: "echo", Description: "Echoes"}, {Name: "add"}}, Stderr: []string{"booting <x>", "ready"}}),
		views.FrameMCPIndicator(views.MCPIndicator{Total: 1, Ready: 1}))
	run(t, ctx,
		waitJS(`document.querySelector("[data-testid=mcp-server][data-server=everything]")?.dataset.state === "ready"`),
		waitJS(`document.querySelectorAll("[data-testid=mcp-tool]").length === 2`),
		waitJS(`document.querySelector(".mcp-stderr").open && document.querySelector("[data-testid=mcp-stderr]").textContent === "booting <x>\nready"`),
		waitJS(`document.querySelector("[data-testid=mcp-indicator]").textContent === "MCP 1/1 ready"`),
		// The forms outside the card keep the page's CSRF token.
		waitJS(`document.querySelector("[data-testid=mcp-entry] input[name=_csrf]").value !== ""`),
	)
	problems.Check(t)
}

// TestBrowserMCPSettingsUnknownCard: a live frame for a server the page does not show
// (added in another tab, or by the form whose redirect is still loading) is dropped
// without an htmx error, and the cards the page does show still update.
func TestBrowserMCPSettingsUnknownCard(t *testing.T) {
	ctx, problems := browser(t, 1100, 800)
	conns := make(chan *websocket.Conn, 2)
	up := websocket.Upgrader{}
	mux := http.NewServeMux()
	mux.Handle("/assets/", assets.Handler())
	mux.Handle("GET /settings/mcp", templ.Handler(views.MCPSettingsPage(page, views.MCPSettings{
		Servers: []views.MCPServerItem{{ID: 1, Enabled: true, Status: views.MCPStatus{Name: "a", Transport: "stdio", State: "connecting"}}},
	})))
	mux.HandleFunc("GET /settings/mcp/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		conns <- c
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
	h := &chatHarness{url: srv.URL, conns: conns}

	run(t, ctx, chromedp.Navigate(h.url+"/settings/mcp"),
		chromedp.WaitVisible(chromedp.CSS(`[data-server=a][data-state=connecting]`)))
	c := h.conn(t)
	send(t, c, views.FrameMCPServer(views.MCPStatus{Name: "b", Transport: "stdio", State: "ready"}),
		views.FrameMCPServer(views.MCPStatus{Name: "a", Transport: "stdio", State: "ready"}))
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS(`[data-server=a][data-state=ready]`)),
		waitJS(`document.querySelector("[data-server=b]") === null`))
	problems.Check(t)
}
