package views_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"atrium/assets"
	"atrium/internal/browsertest"
	"atrium/views"

	"github.com/a-h/templ"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/gorilla/websocket"
)

// chatHarness serves a chat page, the assets and a websocket whose frames the test
// writes by hand: it checks the browser side of the chat contract (htmx, htmx-ext-ws,
// idiomorph, app.js and app.css under a strict CSP) without the real server.
type chatHarness struct {
	url    string
	mux    *http.ServeMux // for more routes a test serves
	conns  chan *websocket.Conn
	frames chan map[string]any
}

const testCSP = "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'"

func newChatHarness(t *testing.T, page views.Page, chat views.Chat) *chatHarness {
	t.Helper()
	h := &chatHarness{conns: make(chan *websocket.Conn, 4), frames: make(chan map[string]any, 16)}
	up := websocket.Upgrader{}
	mux := http.NewServeMux()
	mux.Handle("/assets/", assets.Handler())
	mux.Handle("GET /s/s1", templ.Handler(views.ChatPage(page, chat)))
	mux.HandleFunc("GET /s/s1/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		h.conns <- c
		for {
			_, data, err := c.ReadMessage()
			if err != nil {
				return
			}
			var m map[string]any
			if json.Unmarshal(data, &m) == nil {
				h.frames <- m
			}
		}
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", testCSP)
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	h.url, h.mux = srv.URL, mux
	return h
}

func browser(t *testing.T, width, height int) (context.Context, *browsertest.Problems) {
	return browsertest.New(t, width, height)
}

func (h *chatHarness) conn(t *testing.T) *websocket.Conn {
	t.Helper()
	select {
	case c := <-h.conns:
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("the page did not open the websocket")
		return nil
	}
}

func (h *chatHarness) next(t *testing.T) map[string]any {
	t.Helper()
	select {
	case m := <-h.frames:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no frame from the browser")
		return nil
	}
}

func send(t *testing.T, c *websocket.Conn, comps ...templ.Component) {
	t.Helper()
	var b strings.Builder
	for _, comp := range comps {
		if err := comp.Render(context.Background(), &b); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WriteMessage(websocket.TextMessage, []byte(b.String())); err != nil {
		t.Fatal(err)
	}
}

func run(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for i, step := range steps {
		if err := chromedp.Do(ctx, step); err != nil {
			t.Fatalf("step %d of %d: %v", i+1, len(steps), err)
		}
	}
}

// waitJS polls a JavaScript expression until it is true.
func waitJS(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(5*time.Second))
}

func TestBrowserChatStream(t *testing.T) {
	ctx, problems := browser(t, 1100, 800)
	chat := sampleChat()
	chat.Messages, chat.Live, chat.RunState, chat.OlderCursor = nil, nil, "idle", 0
	h := newChatHarness(t, page, chat)

	run(t, ctx, chromedp.Navigate(h.url+"/s/s1"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=composer]`)))
	c := h.conn(t)
	run(t, ctx, waitJS(`typeof htmx === "object" && htmx.version.startsWith("2")`))

	// Shift+Enter is a newline; Enter sends.
	run(t, ctx,
		chromedp.Click(chromedp.CSS(`[data-testid=composer]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=composer]`), "hello"),
		chromedp.KeyEvent("\r", chromedp.KeyModifiers(kb.ModifierShift)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=composer]`), "world"),
		chromedp.KeyEvent("\r"),
	)
	got := h.next(t)
	if got["type"] != "send" || got["text"] != "hello\nworld" {
		t.Fatalf("browser sent %v", got)
	}
	if hd, _ := got["HEADERS"].(map[string]any); hd["X-CSRF-Token"] != page.CSRF {
		t.Errorf("frame headers %v lack the CSRF token", got["HEADERS"])
	}
	// The composer keeps the text until the server accepts the send (its nonce).
	nonce, _ := got["nonce"].(string)
	if nonce == "" {
		t.Fatalf("the send carries no nonce: %v", got)
	}
	run(t, ctx, waitJS(`document.querySelector("[data-testid=composer]")?.value === "hello\nworld"`))
	send(t, c, views.FrameSendResult(nonce, true))
	run(t, ctx, waitJS(`document.querySelector("[data-testid=composer]")?.value === ""`))

	send(t, c,
		views.FrameUserMessage(views.Message{Seq: 1, Role: "user", Text: "hello\nworld"}, views.LiveMessage{Model: "m1"}),
		views.FrameRunState("streaming"),
	)
	send(t, c, views.FrameLiveBlocks(`<p>one</p>`))
	send(t, c, views.FrameLiveTail(`<p>tw</p>`))
	send(t, c, views.FrameLiveBlocks(`<p>two</p>`), views.FrameLiveTail(`<p>thr</p>`))
	run(t, ctx,
		// The oob wrappers are not inserted: #messages holds the articles themselves.
		waitJS(`[...document.querySelector("#messages").children].map(e => e.id).join(" ") === "msg-1 msg-live"`),
		waitJS(`document.querySelector("#msg-live-blocks")?.innerHTML.replace(/\s+/g, "") === "<p>one</p><p>two</p>"`),
		waitJS(`document.querySelector("#msg-live-tail")?.textContent.trim() === "thr"`),
		waitJS(`getComputedStyle(document.querySelector("[data-testid=send]")).display === "none"`),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=stop]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=stop]`)),
	)
	if got := h.next(t); got["type"] != "stop" {
		t.Fatalf("stop sent %v", got)
	}

	final := views.Message{Seq: 2, Role: "assistant", Status: "stopped", Model: "m1",
		HTML: `<p>one</p><div class="code"><button type="button" class="copy" data-copy>Copy</button><pre><code>x := 1</code></pre></div>`}
	send(t, c, views.FrameFinal(final), views.FrameRunState("idle"))
	run(t, ctx,
		waitJS(`!document.querySelector("#msg-live") && !!document.querySelector("#msg-2[data-status=stopped] [data-testid=stopped-badge]")`),
		waitJS(`document.querySelectorAll("#messages > article").length === 2`),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=send]`)),
		chromedp.Click(chromedp.CSS(`#msg-2 [data-copy]`)),
		waitJS(`document.querySelector("#msg-2 [data-copy]")?.textContent !== "Copy"`),
	)

	send(t, c, views.FrameNotice("The session is busy."))
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS(`#notice`)))
	send(t, c, views.FrameNotice(""))
	run(t, ctx, chromedp.WaitNotVisible(chromedp.CSS(`#notice`)))

	send(t, c, views.FrameSessionTitle(views.SessionItem{ID: "s1", Title: "Renamed"}))
	run(t, ctx, waitJS(`document.querySelector("#session-title")?.textContent === "Renamed" && document.querySelector("#session-s1 a")?.textContent === "Renamed"`))

	// A reconnect re-sends the whole list, which morphs in place.
	chat.Messages = []views.Message{{Seq: 1, Role: "user", Text: "hello\nworld"}, final}
	send(t, c, views.FrameMessages(chat))
	run(t, ctx, waitJS(`document.querySelectorAll("#messages > article").length === 2 && !!document.querySelector("#msg-2")`))

	problems.Check(t)
}

func TestBrowserPhoneSidebar(t *testing.T) {
	ctx, problems := browser(t, 360, 740)
	h := newChatHarness(t, page, sampleChat())
	run(t, ctx,
		// Headless Chromium keeps windows at least 500 px wide; emulate the phone.
		chromedp.EmulateViewport(360, 740),
		chromedp.Navigate(h.url+"/s/s1"),
		waitJS(`window.innerWidth === 360`),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=composer]`)),
		waitJS(`document.querySelector("#sidebar")?.getBoundingClientRect().right <= 0`),
		chromedp.Click(chromedp.CSS(`[data-testid=sidebar-toggle]`)),
		waitJS(`document.querySelector("#sidebar")?.getBoundingClientRect().left >= 0`),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=session-link]`)),
	)
	overflow, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`))
	if err != nil {
		t.Fatal(err)
	}
	if overflow {
		t.Error("the page scrolls sideways at 360px")
	}
	problems.Check(t)
}

// TestBrowserAgentStep streams a turn with reasoning and a tool call: the reasoning
// delta lands collapsed in the live reply, the committed step shows a running tool
// card, the card's update morphs it in place keeping the reader's open/closed choice,
// and the final message replaces the next live reply. The side column (task panel,
// context meter) takes its frames too.
func TestBrowserAgentStep(t *testing.T) {
	ctx, problems := browser(t, 1100, 800)
	chat := sampleChat()
	chat.Messages, chat.Live, chat.RunState, chat.OlderCursor = nil, nil, "idle", 0
	chat.Task, chat.Meter = views.TaskPanel{}, nil
	h := newChatHarness(t, page, chat)

	run(t, ctx, chromedp.Navigate(h.url+"/s/s1"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=composer]`)))
	c := h.conn(t)
	run(t, ctx,
		waitJS(`typeof htmx === "object"`),
		// Wide screen: the side panel starts collapsed; opened, it is a column.
		waitJS(`!document.querySelector("[data-side]").open`),
		chromedp.Click(chromedp.CSS(`[data-testid=side-toggle]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=task-empty]`)),
		chromedp.WaitVisible(chromedp.CSS(`#context-meter`)),
		waitJS(`document.querySelector("#task-panel").getBoundingClientRect().left >= document.querySelector("#messages").getBoundingClientRect().right`),
	)

	send(t, c,
		views.FrameUserMessage(views.Message{Seq: 1, Role: "user", Text: "What time is it?"}, views.LiveMessage{Model: "m1"}),
		views.FrameRunState("streaming"),
	)
	run(t, ctx,
		chromedp.WaitVisible(chromedp.CSS(`#msg-live`)),
		waitJS(`getComputedStyle(document.querySelector("#msg-live-reasoning-box")).display === "none"`),
	)

	const thought = "The user asks <script>window.pwned = 1</script> for the time."
	send(t, c, views.FrameLiveReasoning("The user asks <script>window.pwned = 1</script>"))
	send(t, c, views.FrameLiveReasoning(" for the time."))
	run(t, ctx,
		waitJS(`document.querySelector("#msg-live-reasoning").textContent === `+jsString(thought)),
		// The oob wrapper is not inserted, and the text stayed text.
		waitJS(`document.querySelector("#msg-live-reasoning").children.length === 0 && !window.pwned`),
		waitJS(`getComputedStyle(document.querySelector("#msg-live-reasoning-box")).display !== "none"`),
		waitJS(`!document.querySelector("#msg-live-reasoning-box").open`),
		waitJS(`!document.querySelector("#msg-live-reasoning").checkVisibility()`),
	)

	card := views.ToolCard{ID: "call 1", Name: "current_time", Args: "{\n  \"zone\": \"UTC\"\n}", Status: "running"}
	id := views.ToolDOMID(card.ID)
	sel := "#" + id
	step := views.Message{Seq: 2, Role: "assistant", Model: "m1", Reasoning: thought, Tools: []views.ToolCard{card}}
	send(t, c, views.FrameAssistantStep(step, views.LiveMessage{Model: "m1"}))
	run(t, ctx,
		waitJS(`[...document.querySelector("#messages").children].map(e => e.id).join(" ") === "msg-1 msg-2 msg-live"`),
		chromedp.WaitVisible(chromedp.CSS(`#msg-2 [data-testid=tool-card][data-status=running]`)),
		waitJS(`document.querySelector("`+sel+` [data-testid=tool-status]").textContent === "running…"`),
		waitJS(`!document.querySelector("#msg-2 details.reasoning").open`),
		waitJS(`document.querySelector("#msg-2 .reasoning-text").textContent === `+jsString(thought)),
		waitJS(`getComputedStyle(document.querySelector("#msg-live-reasoning-box")).display === "none"`),
		waitJS(`!document.querySelector("`+sel+` [data-testid=tool-args]").checkVisibility()`),
		// The reader opens the card.
		chromedp.Click(chromedp.CSS(sel+` > summary`)),
		chromedp.WaitVisible(chromedp.CSS(sel+` [data-testid=tool-args]`)),
		waitJS(`(window.atriumCard = document.querySelector("`+sel+`")).open`),
	)

	done := card
	done.Status, done.Result, done.Duration = "ok", "2025-03-01T12:00:00Z", 400*time.Millisecond
	send(t, c, views.FrameToolCard(done))
	run(t, ctx,
		waitJS(`document.querySelector("`+sel+`").dataset.status === "ok"`),
		// Morphed in place, still open.
		waitJS(`document.querySelector("`+sel+`") === window.atriumCard && window.atriumCard.open`),
		waitJS(`document.querySelectorAll("[data-testid=tool-card]").length === 1`),
		waitJS(`document.querySelector("`+sel+` [data-testid=tool-status]").textContent === "ok"`),
		waitJS(`document.querySelector("`+sel+` [data-testid=tool-duration]").textContent === "0.4 s"`),
		chromedp.WaitVisible(chromedp.CSS(sel+` [data-testid=tool-result]`)),
		waitJS(`!document.querySelector("#msg-2 details.reasoning").open`),
		// A closed card stays closed through the next morph.
		chromedp.Click(chromedp.CSS(sel+` > summary`)),
		waitJS(`!window.atriumCard.open`),
	)
	done.Truncated = true
	send(t, c, views.FrameToolCard(done))
	run(t, ctx,
		waitJS(`!!document.querySelector("`+sel+` [data-testid=tool-truncated]")`),
		waitJS(`document.querySelector("`+sel+`") === window.atriumCard && !window.atriumCard.open`),
	)

	send(t, c, views.FrameLiveBlocks(`<p>It is noon (UTC).</p>`))
	send(t, c, views.FrameFinal(views.Message{Seq: 3, Role: "assistant", HTML: `<p>It is noon (UTC).</p>`, Model: "m1"}), views.FrameRunState("idle"))
	run(t, ctx,
		waitJS(`[...document.querySelector("#messages").children].map(e => e.id).join(" ") === "msg-1 msg-2 msg-3"`),
		waitJS(`document.querySelector("#msg-3").textContent.includes("It is noon")`),
		waitJS(`document.querySelector("`+sel+`") === window.atriumCard && window.atriumCard.dataset.status === "ok"`),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=send]`)),
	)

	// The task panel: a morph from the server keeps what the reader is typing.
	run(t, ctx,
		chromedp.Click(chromedp.CSS(`[data-testid=task-goal-input]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=task-goal-input]`), "my draft"),
	)
	send(t, c, views.FrameTaskPanel(views.TaskPanel{SessionID: "s1", Goal: "Tell the time", Stage: "answered", Params: `{"zone": "UTC"}`, UpdatedAt: created}))
	send(t, c, views.FrameContextMeter(views.ContextMeter{Limit: 120000, Total: 1500, Zones: []views.MeterZone{
		{Name: "pinned", Tokens: 200, Budget: 800}, {Name: "summary", Budget: 500}, {Name: "history", Tokens: 1200}, {Name: "tools", Tokens: 100},
	}}))
	run(t, ctx,
		waitJS(`document.querySelector("[data-testid=task-goal]")?.textContent === "Tell the time"`),
		waitJS(`document.querySelector("[data-testid=task-stage]")?.textContent === "answered"`),
		waitJS(`document.querySelector("[data-testid=task-goal-input]").value === "my draft"`),
		waitJS(`document.querySelector(".task-edit").open`),
		waitJS(`document.querySelectorAll("#context-meter [data-testid=meter-zone]").length === 4`),
		waitJS(`document.querySelector("#context-meter [data-testid=meter-total] .zone-usage").textContent === "1,500 / 120,000 tokens"`),
	)
	problems.Check(t)
}

// TestBrowserPhoneSidePanel: at 360 px the task panel and meter sit in a collapsed
// box above the composer, which opens without pushing the page sideways.
func TestBrowserPhoneSidePanel(t *testing.T) {
	ctx, problems := browser(t, 360, 740)
	h := newChatHarness(t, page, sampleChat())
	run(t, ctx,
		// Headless Chromium keeps windows at least 500 px wide; emulate the phone.
		chromedp.EmulateViewport(360, 740),
		chromedp.Navigate(h.url+"/s/s1"),
		waitJS(`window.innerWidth === 360`),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=composer]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=side-toggle]`)),
		waitJS(`!document.querySelector("#task-panel").checkVisibility()`),
		waitJS(`document.querySelector("[data-side]").getBoundingClientRect().bottom <= document.querySelector("#composer").getBoundingClientRect().top + 1`),
		chromedp.Click(chromedp.CSS(`[data-testid=side-toggle]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=task-goal]`)),
		chromedp.WaitVisible(chromedp.CSS(`#context-meter`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=composer]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=task-edit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=task-save]`)),
	)
	for _, expr := range []string{
		`document.documentElement.scrollWidth > window.innerWidth`,
		`[...document.querySelectorAll("#task-panel input, #task-panel textarea, #context-meter meter")].some(e => e.getBoundingClientRect().right > window.innerWidth)`,
	} {
		bad, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err != nil {
			t.Fatal(err)
		}
		if bad {
			t.Errorf("at 360px: %s", expr)
		}
	}
	problems.Check(t)
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
