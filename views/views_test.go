package views_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"atrium/views"

	"github.com/a-h/templ"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// render renders c and returns the HTML.
func render(t *testing.T, c templ.Component) string {
	t.Helper()
	var b strings.Builder
	if err := c.Render(context.Background(), &b); err != nil {
		t.Fatalf("render: %v", err)
	}
	return b.String()
}

// parsePage parses a full document.
func parsePage(t *testing.T, c templ.Component) *html.Node {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(render(t, c)))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return doc
}

// parseFragment parses a partial (a frame or a list) as children of <body>.
func parseFragment(t *testing.T, c templ.Component) []*html.Node {
	t.Helper()
	body := &html.Node{Type: html.ElementNode, Data: "body", DataAtom: atom.Body}
	nodes, err := html.ParseFragment(strings.NewReader(render(t, c)), body)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	var els []*html.Node
	for _, n := range nodes {
		if n.Type == html.ElementNode {
			els = append(els, n)
		}
	}
	return els
}

func attr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

// findAll returns the elements under roots (roots included) for which match is true.
func findAll(match func(*html.Node) bool, roots ...*html.Node) []*html.Node {
	var out []*html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && match(n) {
			out = append(out, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	for _, r := range roots {
		walk(r)
	}
	return out
}

func byTag(tag string) func(*html.Node) bool {
	return func(n *html.Node) bool { return n.Data == tag }
}

func byAttr(key, val string) func(*html.Node) bool {
	return func(n *html.Node) bool { v, ok := attr(n, key); return ok && v == val }
}

// one returns the single element matching, failing the test otherwise.
func one(t *testing.T, what string, match func(*html.Node) bool, roots ...*html.Node) *html.Node {
	t.Helper()
	found := findAll(match, roots...)
	if len(found) != 1 {
		t.Fatalf("%s: found %d elements, want 1", what, len(found))
	}
	return found[0]
}

func byID(t *testing.T, id string, roots ...*html.Node) *html.Node {
	t.Helper()
	return one(t, "#"+id, byAttr("id", id), roots...)
}

func wantAttr(t *testing.T, n *html.Node, key, want string) {
	t.Helper()
	if got, ok := attr(n, key); !ok || got != want {
		t.Errorf("<%s id=%q> %s=%q (present %v), want %q", n.Data, idOf(n), key, got, ok, want)
	}
}

func idOf(n *html.Node) string { v, _ := attr(n, "id"); return v }

func text(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

var (
	admin   = &views.User{ID: 1, Username: "ada", IsAdmin: true}
	page    = views.Page{Title: "Test", CSRF: `tok"en<&>`, User: admin}
	created = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
)

func sampleChat() views.Chat {
	return views.Chat{
		Session: views.SessionItem{ID: "s1", Title: "Trip plan", Active: true},
		Sessions: views.SessionList{
			Items:      []views.SessionItem{{ID: "s1", Title: "Trip plan", Active: true}, {ID: "s2", Title: ""}},
			NextCursor: "c/2",
		},
		Messages: []views.Message{
			{Seq: 5, Role: "user", Text: "Plan <b>a trip</b>", Status: "complete", CreatedAt: created},
			{Seq: 6, Role: "assistant", HTML: "<p>Sure.</p>", Status: "stopped", Model: "m1", CreatedAt: created, Reasoning: "The user wants a trip.",
				Tools: []views.ToolCard{{ID: "call_1", Name: "current_time", Args: "{}", Status: "ok", Result: "2025-03-01T12:00:00Z", Duration: 40 * time.Millisecond}}},
			{Seq: 7, Role: "assistant", HTML: "", Status: "error", Error: "model unavailable"},
		},
		OlderCursor:     5,
		Live:            &views.LiveMessage{BlocksHTML: "<p>done</p>", TailHTML: "<p>typing</p>", Model: "m1"},
		RunState:        "streaming",
		Models:          []views.ModelOption{{Value: "p1/m1", Label: "m1", Selected: true}, {Value: "p1/m2", Label: "m2"}},
		MaxMessageBytes: 32768,
		Task:            views.TaskPanel{Goal: "Plan a trip to Oslo", Stage: "dates", Params: "{\n  \"nights\": 3\n}", UpdatedAt: created},
		Meter: &views.ContextMeter{Limit: 120000, Total: 2100, Zones: []views.MeterZone{
			{Name: "pinned", Tokens: 300, Budget: 800}, {Name: "summary", Tokens: 0, Budget: 500},
			{Name: "history", Tokens: 1600}, {Name: "tools", Tokens: 200},
		}},
	}
}

func allPages() map[string]templ.Component {
	settings := views.Settings{
		Providers: []views.Provider{{ID: 3, Name: "Local", Kind: "openai", BaseURL: "http://localhost:11434/v1", KeyHint: "…abcd", Models: []string{"llama3"}}},
		Models:    []views.ModelOption{{Value: "3/llama3", Label: "Local / llama3", Selected: true}},
	}
	users := views.Users{Users: []views.AdminUser{
		{ID: 1, Username: "ada", Role: "admin", CreatedAt: created, IsSelf: true},
		{ID: 2, Username: "bob", Role: "user", CreatedAt: created, Disabled: true},
	}}
	anon := views.Page{Title: "Log in", CSRF: "t"}
	return map[string]templ.Component{
		"setup":    views.SetupPage(anon, views.AuthForm{Error: "Passwords differ"}),
		"login":    views.LoginPage(anon, views.AuthForm{Username: "ada", Error: "Wrong username or password"}),
		"home":     views.HomePage(page, sampleChat().Sessions),
		"chat":     views.ChatPage(page, sampleChat()),
		"settings": views.SettingsPage(page, settings),
		"users":    views.UsersPage(page, users),
		"error":    views.ErrorPage(page, 404, "No such chat"),
	}
}

func TestLayoutLoadsPinnedScriptsOnly(t *testing.T) {
	doc := parsePage(t, views.LoginPage(views.Page{CSRF: "t"}, views.AuthForm{}))

	scripts := findAll(byTag("script"), doc)
	wantOrder := []string{"/assets/htmx.min.", "/assets/ws.", "/assets/idiomorph-ext.min.", "/assets/app."}
	if len(scripts) != len(wantOrder) {
		t.Fatalf("found %d scripts, want %d", len(scripts), len(wantOrder))
	}
	for i, s := range scripts {
		src, _ := attr(s, "src")
		if !strings.HasPrefix(src, wantOrder[i]) {
			t.Errorf("script %d src=%q, want prefix %q", i, src, wantOrder[i])
		}
		if v, _ := attr(s, "integrity"); !strings.HasPrefix(v, "sha384-") {
			t.Errorf("script %s integrity=%q", src, v)
		}
		if _, ok := attr(s, "defer"); !ok {
			t.Errorf("script %s is not deferred", src)
		}
	}
	css := one(t, "stylesheet", byAttr("rel", "stylesheet"), doc)
	if v, _ := attr(css, "integrity"); !strings.HasPrefix(v, "sha384-") {
		t.Errorf("stylesheet integrity=%q", v)
	}
	cfg := one(t, "htmx-config", byAttr("name", "htmx-config"), doc)
	var conf map[string]bool
	content, _ := attr(cfg, "content")
	if err := json.Unmarshal([]byte(content), &conf); err != nil || conf["allowEval"] || conf["allowScriptTags"] || conf["includeIndicatorStyles"] {
		t.Errorf("htmx-config %q (%v)", content, err)
	}
}

// TestPagesFitTheCSP checks every full page for what script-src 'self' would block
// or what would bypass CSRF protection.
func TestPagesFitTheCSP(t *testing.T) {
	for name, c := range allPages() {
		t.Run(name, func(t *testing.T) {
			doc := parsePage(t, c)
			for _, s := range findAll(byTag("script"), doc) {
				if _, ok := attr(s, "src"); !ok || text(s) != "" {
					t.Errorf("inline script: %q", text(s))
				}
			}
			if n := len(findAll(byTag("style"), doc)); n > 0 {
				t.Errorf("%d <style> elements", n)
			}
			for _, n := range findAll(func(*html.Node) bool { return true }, doc) {
				for _, a := range n.Attr {
					if a.Key == "style" || strings.HasPrefix(a.Key, "on") || strings.HasPrefix(a.Key, "hx-on") {
						t.Errorf("<%s> has %s=%q", n.Data, a.Key, a.Val)
					}
				}
			}
			for _, f := range findAll(byAttr("method", "post"), doc) {
				action, _ := attr(f, "action")
				if _, htmx := attr(f, "hx-post"); htmx {
					continue // htmx sends the X-CSRF-Token header
				}
				tok := findAll(func(n *html.Node) bool {
					name, _ := attr(n, "name")
					typ, _ := attr(n, "type")
					return n.Data == "input" && name == "_csrf" && typ == "hidden"
				}, f)
				if len(tok) != 1 {
					t.Errorf("form %s has %d _csrf fields", action, len(tok))
				}
			}
			body := one(t, "body", byTag("body"), doc)
			wantAttr(t, body, "hx-ext", "morph")
		})
	}
}

func TestBodySendsCSRFHeader(t *testing.T) {
	doc := parsePage(t, views.ChatPage(page, sampleChat()))
	body := one(t, "body", byTag("body"), doc)
	raw, _ := attr(body, "hx-headers")
	var h map[string]string
	if err := json.Unmarshal([]byte(raw), &h); err != nil {
		t.Fatalf("hx-headers %q: %v", raw, err)
	}
	if h["X-CSRF-Token"] != page.CSRF {
		t.Errorf("X-CSRF-Token = %q, want %q", h["X-CSRF-Token"], page.CSRF)
	}
}

func TestTopBar(t *testing.T) {
	tests := []struct {
		name     string
		user     *views.User
		want     []string
		dontWant []string
	}{
		{"anonymous", nil, nil, []string{"nav-chat", "logout", "nav-settings"}},
		// The settings sections live in the settings area's own nav, not in the top bar.
		{"user", &views.User{Username: "bob"}, []string{"nav-chat", "nav-settings", "logout", "username", "keys-button", "keys-help"}, []string{"nav-users", "nav-memories", "settings-nav"}},
		{"admin", admin, []string{"nav-chat", "nav-settings", "logout", "keys-help"}, []string{"nav-users", "nav-mcp", "settings-nav"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := parsePage(t, views.ErrorPage(views.Page{CSRF: "t", User: tt.user}, 500, ""))
			for _, id := range tt.want {
				one(t, id, byAttr("data-testid", id), doc)
			}
			for _, id := range tt.dontWant {
				if n := len(findAll(byAttr("data-testid", id), doc)); n != 0 {
					t.Errorf("found %s", id)
				}
			}
		})
	}
}

func TestFormErrors(t *testing.T) {
	for _, name := range []string{"setup", "login"} {
		doc := parsePage(t, allPages()[name])
		e := one(t, name+" form-error", byAttr("data-testid", "form-error"), doc)
		wantAttr(t, e, "role", "alert")
	}
	doc := parsePage(t, views.LoginPage(views.Page{}, views.AuthForm{}))
	if n := len(findAll(byAttr("data-testid", "form-error"), doc)); n != 0 {
		t.Errorf("login without error shows %d form-error elements", n)
	}
	login := parsePage(t, allPages()["login"])
	u := one(t, "username", byAttr("name", "username"), login)
	wantAttr(t, u, "value", "ada")
}

func TestChatPageDOMContract(t *testing.T) {
	doc := parsePage(t, views.ChatPage(page, sampleChat()))

	chat := byID(t, "chat", doc)
	wantAttr(t, chat, "hx-ext", "ws")
	wantAttr(t, chat, "ws-connect", "/s/s1/ws")
	for _, id := range []string{"notice", "messages", "run-state", "composer"} {
		byID(t, id, chat)
	}
	wantAttr(t, byID(t, "notice", chat), "role", "alert")

	msgs := byID(t, "messages", chat)
	older := byID(t, "older", msgs)
	wantAttr(t, older, "hx-get", "/s/s1/messages?before=5")
	wantAttr(t, older, "hx-target", "this")
	wantAttr(t, older, "hx-swap", "outerHTML")
	var ids []string
	for c := msgs.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.ElementNode {
			ids = append(ids, idOf(c))
		}
	}
	if got, want := strings.Join(ids, " "), "older msg-5 msg-6 msg-7 msg-live"; got != want {
		t.Errorf("#messages children = %s, want %s", got, want)
	}
	live := byID(t, "msg-live", msgs)
	byID(t, "msg-live-blocks", live)
	byID(t, "msg-live-tail", live)
	wantAttr(t, live, "data-status", "streaming")

	rs := byID(t, "run-state", chat)
	wantAttr(t, rs, "data-state", "streaming")
	stop := one(t, "stop button", byAttr("data-testid", "stop"), rs)
	stopForm := stop.Parent
	if _, ok := attr(stopForm, "ws-send"); !ok || stopForm.Data != "form" {
		t.Errorf("stop button is not in a ws-send form")
	}
	one(t, "hidden type=stop", func(n *html.Node) bool {
		name, _ := attr(n, "name")
		v, _ := attr(n, "value")
		return name == "type" && v == "stop"
	}, stopForm)

	composer := byID(t, "composer", chat)
	if _, ok := attr(composer, "ws-send"); !ok || composer.Data != "form" {
		t.Errorf("#composer is not a ws-send form")
	}
	ta := one(t, "composer textarea", byAttr("data-testid", "composer"), composer)
	wantAttr(t, ta, "name", "text")
	if ta.Data != "textarea" {
		t.Errorf("composer is <%s>", ta.Data)
	}
	one(t, "hidden type=send", func(n *html.Node) bool {
		name, _ := attr(n, "name")
		v, _ := attr(n, "value")
		typ, _ := attr(n, "type")
		return name == "type" && v == "send" && typ == "hidden"
	}, composer)
	one(t, "send button", byAttr("data-testid", "send"), composer)

	title := byID(t, "session-title", doc)
	if text(title) != "Trip plan" {
		t.Errorf("#session-title = %q", text(title))
	}
	rename := one(t, "rename form", byAttr("hx-post", "/s/s1/rename"), doc)
	one(t, "title field", byAttr("name", "title"), rename)
	del := one(t, "delete", byAttr("hx-post", "/s/s1/delete"), doc)
	if _, ok := attr(del, "hx-confirm"); !ok {
		t.Error("delete has no hx-confirm")
	}
	sel := one(t, "model select", byAttr("hx-post", "/s/s1/model"), doc)
	wantAttr(t, sel, "name", "model")
	wantAttr(t, sel, "hx-trigger", "change")
	wantAttr(t, sel, "hx-swap", "none")

	sessions := byID(t, "sessions", doc)
	links := findAll(byAttr("data-testid", "session-link"), sessions)
	if len(links) != 2 {
		t.Fatalf("found %d session links, want 2", len(links))
	}
	wantAttr(t, links[0], "href", "/s/s1")
	wantAttr(t, links[0], "aria-current", "page")
	if _, ok := attr(links[1], "aria-current"); ok {
		t.Error("inactive session marked current")
	}
	more := byID(t, "sessions-more", sessions)
	wantAttr(t, more, "hx-target", "this")
	wantAttr(t, more, "hx-swap", "outerHTML")
	one(t, "more button", byAttr("hx-get", "/sessions?cursor=c%2F2"), more)
	one(t, "new chat", byAttr("data-testid", "new-chat"), doc)
}

func TestChatPageIdleWithNotice(t *testing.T) {
	c := sampleChat()
	c.RunState, c.Live, c.OlderCursor, c.Models = "", nil, 0, nil
	c.Notice = "No model is configured yet."
	doc := parsePage(t, views.ChatPage(page, c))
	wantAttr(t, byID(t, "run-state", doc), "data-state", "idle")
	if n := len(findAll(byAttr("data-testid", "stop"), doc)); n != 0 {
		t.Error("idle page has a stop button")
	}
	if n := len(findAll(byAttr("id", "older"), doc)); n != 0 {
		t.Error("page without older messages has #older")
	}
	if n := len(findAll(byAttr("id", "msg-live"), doc)); n != 0 {
		t.Error("idle page has #msg-live")
	}
	if got := text(byID(t, "notice", doc)); got != c.Notice {
		t.Errorf("#notice = %q", got)
	}
}

func TestMessageItem(t *testing.T) {
	t.Run("user text is escaped", func(t *testing.T) {
		m := views.Message{Seq: 1, Role: "user", Text: "<script>alert(1)</script>\n<img src=x onerror=alert(1)>"}
		out := render(t, views.MessageItem(m))
		els := parseFragment(t, views.MessageItem(m))
		if n := len(findAll(func(n *html.Node) bool { return n.Data == "script" || n.Data == "img" }, els...)); n != 0 {
			t.Fatalf("user text became markup: %s", out)
		}
		if !strings.Contains(out, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("user text not shown escaped: %s", out)
		}
		if got := text(one(t, ".text", byAttr("class", "text"), els...)); got != m.Text {
			t.Errorf("text = %q, want %q", got, m.Text)
		}
	})
	t.Run("assistant html is inserted", func(t *testing.T) {
		els := parseFragment(t, views.MessageItem(views.Message{Seq: 2, Role: "assistant", HTML: "<p><strong>hi</strong></p>", Status: "complete"}))
		art := one(t, "article", byTag("article"), els...)
		wantAttr(t, art, "id", "msg-2")
		wantAttr(t, art, "class", "msg msg-assistant status-complete")
		wantAttr(t, art, "data-testid", "message")
		wantAttr(t, art, "data-role", "assistant")
		wantAttr(t, art, "data-status", "complete")
		md := one(t, ".md", byAttr("class", "md"), art)
		one(t, "strong", byTag("strong"), md)
	})
	t.Run("stopped", func(t *testing.T) {
		els := parseFragment(t, views.MessageItem(views.Message{Seq: 3, Role: "assistant", HTML: "<p>x</p>", Status: "stopped"}))
		one(t, "stopped badge", byAttr("data-testid", "stopped-badge"), els...)
		if n := len(findAll(byAttr("data-testid", "message-error"), els...)); n != 0 {
			t.Error("stopped message shows an error")
		}
	})
	t.Run("interrupted", func(t *testing.T) {
		const why = "Interrupted: the server stopped while this reply was being written."
		els := parseFragment(t, views.MessageItem(views.Message{Seq: 3, Role: "assistant", HTML: "<p>half</p>", Status: "stopped",
			Error: why, Interrupted: true}))
		if b := text(one(t, "badge", byAttr("data-testid", "stopped-badge"), els...)); b != "interrupted" {
			t.Errorf("badge %q, want interrupted", b)
		}
		if n := text(one(t, "note", byAttr("data-testid", "message-note"), els...)); n != why {
			t.Errorf("note %q, want %q", n, why)
		}
		one(t, "partial text", byTag("p"), one(t, ".md", byAttr("class", "md"), els...))
		if n := len(findAll(byAttr("data-testid", "message-error"), els...)); n != 0 {
			t.Error("an interrupted reply shows as an error")
		}
	})
	t.Run("error", func(t *testing.T) {
		els := parseFragment(t, views.MessageItem(views.Message{Seq: 4, Role: "assistant", Status: "error", Error: "upstream <502>"}))
		e := one(t, "error", byAttr("data-testid", "message-error"), els...)
		if text(e) != "upstream <502>" {
			t.Errorf("error text = %q", text(e))
		}
		wantAttr(t, one(t, "article", byTag("article"), els...), "data-status", "error")
	})
	t.Run("empty status is complete", func(t *testing.T) {
		els := parseFragment(t, views.MessageItem(views.Message{Seq: 5, Role: "user", Text: "x"}))
		wantAttr(t, els[0], "data-status", "complete")
	})
}

// TestFramesAreOOB checks that every websocket frame is top-level elements carrying
// hx-swap-oob, as htmx-ext-ws requires.
func TestFramesAreOOB(t *testing.T) {
	m := views.Message{Seq: 9, Role: "assistant", HTML: "<p>final</p>", Model: "m1"}
	tests := []struct {
		name    string
		c       templ.Component
		want    []string // hx-swap-oob of each top-level element
		wantIDs []string
	}{
		{"user message", views.FrameUserMessage(views.Message{Seq: 8, Role: "user", Text: "hi"}, views.LiveMessage{}), []string{"beforeend:#messages"}, []string{""}},
		{"live blocks", views.FrameLiveBlocks("<p>a</p>"), []string{"beforeend:#msg-live-blocks"}, []string{""}},
		{"live tail", views.FrameLiveTail("<p>b</p>"), []string{"morph"}, []string{"msg-live-tail"}},
		{"final", views.FrameFinal(m), []string{"outerHTML:#msg-live"}, []string{"msg-9"}},
		{"run state", views.FrameRunState("idle"), []string{"outerHTML"}, []string{"run-state"}},
		{"notice", views.FrameNotice("busy"), []string{"outerHTML"}, []string{"notice"}},
		{"messages", views.FrameMessages(sampleChat()), []string{"morph"}, []string{"messages"}},
		{"session title", views.FrameSessionTitle(views.SessionItem{ID: "s1", Title: "New"}), []string{"outerHTML", "outerHTML"}, []string{"session-s1", "session-title"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			els := parseFragment(t, tt.c)
			if len(els) != len(tt.want) {
				t.Fatalf("%d top-level elements, want %d: %s", len(els), len(tt.want), render(t, tt.c))
			}
			for i, el := range els {
				wantAttr(t, el, "hx-swap-oob", tt.want[i])
				if idOf(el) != tt.wantIDs[i] {
					t.Errorf("element %d id=%q, want %q", i, idOf(el), tt.wantIDs[i])
				}
			}
		})
	}
}

func TestFrameUserMessageAppendsMessageAndLive(t *testing.T) {
	els := parseFragment(t, views.FrameUserMessage(views.Message{Seq: 8, Role: "user", Text: "hi"}, views.LiveMessage{Model: "m1"}))
	var ids []string
	for c := els[0].FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.ElementNode {
			ids = append(ids, idOf(c))
		}
	}
	if got := strings.Join(ids, " "); got != "msg-8 msg-live" {
		t.Errorf("children = %s, want msg-8 msg-live", got)
	}
}

func TestFrameFinalIsMessageItem(t *testing.T) {
	m := views.Message{Seq: 9, Role: "assistant", HTML: "<p>final</p>", Status: "stopped", Model: "m1", CreatedAt: created}
	final := render(t, views.FrameFinal(m))
	item := render(t, views.MessageItem(m))
	if got := strings.Replace(final, ` hx-swap-oob="outerHTML:#msg-live"`, "", 1); got != item {
		t.Errorf("FrameFinal minus hx-swap-oob differs from MessageItem:\n%s\n%s", final, item)
	}
}

func TestFrameRunState(t *testing.T) {
	tests := []struct {
		state, wantState string
		stop, queued     bool
	}{
		{"idle", "idle", false, false},
		{"", "idle", false, false},
		{"streaming", "streaming", true, false},
		{"queued", "queued", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.wantState+"/"+tt.state, func(t *testing.T) {
			els := parseFragment(t, views.FrameRunState(tt.state))
			wantAttr(t, els[0], "data-state", tt.wantState)
			if got := len(findAll(byAttr("data-testid", "stop"), els...)) == 1; got != tt.stop {
				t.Errorf("stop button shown = %v, want %v", got, tt.stop)
			}
			if got := strings.Contains(text(els[0]), "Queued"); got != tt.queued {
				t.Errorf("queued shown = %v, want %v", got, tt.queued)
			}
		})
	}
}

func TestFrameNoticeEmpty(t *testing.T) {
	out := render(t, views.FrameNotice(""))
	if !strings.Contains(out, `data-testid="notice" hx-swap-oob="outerHTML"></div>`) {
		t.Errorf("empty notice is not an empty div: %s", out)
	}
}

func TestOlderMessages(t *testing.T) {
	msgs := []views.Message{{Seq: 3, Role: "user", Text: "a"}, {Seq: 4, Role: "assistant", HTML: "<p>b</p>"}}
	els := parseFragment(t, views.OlderMessages("s1", msgs, 3))
	var ids []string
	for _, el := range els {
		ids = append(ids, idOf(el))
	}
	if got := strings.Join(ids, " "); got != "older msg-3 msg-4" {
		t.Errorf("top-level ids = %s", got)
	}
	wantAttr(t, els[0], "hx-get", "/s/s1/messages?before=3")
	if els := parseFragment(t, views.OlderMessages("s1", msgs, 0)); idOf(els[0]) != "msg-3" {
		t.Errorf("no more history, but first element is #%s", idOf(els[0]))
	}
}

func TestSessionListItems(t *testing.T) {
	els := parseFragment(t, views.SessionListItems(views.SessionList{Items: []views.SessionItem{{ID: "a", Title: "<x>"}}}))
	if len(els) != 1 || idOf(els[0]) != "session-a" {
		t.Fatalf("got %d items", len(els))
	}
	link := one(t, "link", byAttr("data-testid", "session-link"), els...)
	if text(link) != "<x>" {
		t.Errorf("title = %q", text(link))
	}
}

func TestSettingsPageNeverRendersAKey(t *testing.T) {
	s := views.Settings{
		Providers: []views.Provider{
			{ID: 1, Name: "OpenAI", Kind: "openai", KeyHint: "sk-…wxyz", Models: []string{"gpt-x"}},
			{ID: 2, Name: "Claude", Kind: "anthropic"},
		},
		Form:   views.ProviderForm{ID: 1, Name: "OpenAI", Kind: "openai", Error: "bad base URL"},
		Models: []views.ModelOption{{Value: "1/gpt-x", Label: "OpenAI / gpt-x", Selected: true}},
	}
	doc := parsePage(t, views.SettingsPage(page, s))
	keys := findAll(byAttr("name", "api_key"), doc)
	if len(keys) != 3 { // two edit forms and the add form
		t.Fatalf("found %d api_key fields, want 3", len(keys))
	}
	for _, k := range keys {
		wantAttr(t, k, "type", "password")
		wantAttr(t, k, "autocomplete", "off")
		if v, ok := attr(k, "value"); ok {
			t.Errorf("api_key field has value=%q", v)
		}
	}
	if !strings.Contains(text(doc), "sk-…wxyz") {
		t.Error("key hint not shown")
	}
	// The failed edit keeps its error next to its form, opened.
	e := one(t, "form-error", byAttr("data-testid", "form-error"), doc)
	if text(e) != "bad base URL" {
		t.Errorf("form-error = %q", text(e))
	}
	for _, path := range []string{"/settings/providers", "/settings/providers/1", "/settings/providers/1/delete", "/settings/providers/1/refresh", "/settings/providers/2"} {
		one(t, "form "+path, byAttr("action", path), doc)
	}
	kinds := findAll(byAttr("name", "kind"), doc)
	if len(kinds) != 3 {
		t.Errorf("found %d kind selects", len(kinds))
	}
	claudeKind := one(t, "kind select of provider 2", byAttr("id", "provider-2-kind"), doc)
	sel := findAll(func(n *html.Node) bool { _, ok := attr(n, "selected"); return n.Data == "option" && ok }, claudeKind)
	if len(sel) != 1 || func() string { v, _ := attr(sel[0], "value"); return v }() != "anthropic" {
		t.Error("provider 2's kind is not preselected as anthropic")
	}
	one(t, "default model form", byAttr("action", "/settings/default-model"), doc)
}

func TestUsersPage(t *testing.T) {
	doc := parsePage(t, allPages()["users"])
	rows := findAll(byAttr("data-testid", "user-row"), doc)
	if len(rows) != 2 {
		t.Fatalf("found %d rows", len(rows))
	}
	self, other := rows[0], rows[1]
	for _, id := range []string{"user-disable", "user-enable", "user-role-save", "user-delete"} {
		if n := len(findAll(byAttr("data-testid", id), self)); n != 0 {
			t.Errorf("own row has %s", id)
		}
	}
	one(t, "reset own password", byAttr("data-testid", "user-reset"), self)
	one(t, "enable", byAttr("action", "/settings/users/2/enable"), other)
	one(t, "role", byAttr("action", "/settings/users/2/role"), other)
	one(t, "reset", byAttr("action", "/settings/users/2/reset"), other)
	one(t, "delete", byAttr("action", "/settings/users/2/delete"), other)
	if _, open := attr(one(t, "delete details", byAttr("data-testid", "user-delete-details"), other), "open"); open {
		t.Error("the delete form is open without an error")
	}
	one(t, "create", byAttr("action", "/settings/users"), doc)
}

func TestErrorPage(t *testing.T) {
	doc := parsePage(t, views.ErrorPage(page, 404, "No such chat"))
	if got := text(one(t, "status", byAttr("data-testid", "error-status"), doc)); got != "404" {
		t.Errorf("status = %q", got)
	}
	if got := text(one(t, "message", byAttr("data-testid", "error-message"), doc)); got != "No such chat" {
		t.Errorf("message = %q", got)
	}
	wantAttr(t, one(t, "home link", byAttr("data-testid", "error-home"), doc), "href", "/")
}
