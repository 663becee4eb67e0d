package views_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/a-h/templ"
	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"

	"atrium/internal/browsertest"
	"atrium/views"
)

// Window sizes for checks where the layout matters: a laptop, where #messages is the
// scroller and the sidebar a column, and a phone, where the page scrolls and the
// sidebar is a drawer.
var uiSizes = []struct {
	name          string
	width, height int
}{{"desktop", 1280, 800}, {"phone", 390, 844}}

// atSize opens a browser of that size (a phone is emulated: headless Chromium keeps
// windows at least 500 px wide) and loads the harness's chat.
func atSize(t *testing.T, width, height int, h *chatHarness, extra ...chromedp.ExecAllocatorOption) (context.Context, *browsertest.Problems) {
	t.Helper()
	ctx, problems := browsertest.New(t, width, height, extra...)
	run(t, ctx,
		chromedp.EmulateViewport(int64(width), int64(height)),
		chromedp.Navigate(h.url+"/s/s1"),
		waitJS(fmt.Sprintf(`window.innerWidth === %d`, width)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=composer]`)),
	)
	return ctx, problems
}

func evalJS[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// TestBrowserCopyMessage: each message's Copy puts its source on the clipboard: the
// user's text, and a reply's markdown (not its HTML), also for messages that arrived
// over the websocket.
func TestBrowserCopyMessage(t *testing.T) {
	chat := sampleChat()
	chat.Live, chat.RunState, chat.OlderCursor = nil, "idle", 0
	reply := "**Sure.** Pack:\n\n- a coat\n\n```sh\necho <hi>\n```\n"
	chat.Messages = []views.Message{
		{Seq: 5, Role: "user", Text: "Plan <b>a trip</b>\n  with two lines", CreatedAt: created},
		{Seq: 6, Role: "assistant", Text: reply, HTML: "<p><strong>Sure.</strong> Pack:</p><ul><li>a coat</li></ul>", CreatedAt: created},
	}
	h := newChatHarness(t, page, chat)
	ctx, problems := atSize(t, 1280, 800, h)
	c := h.conn(t)
	// Headless Chromium's page is not focused, and the clipboard wants a focused one.
	if _, err := chromedp.Call(ctx, emulation.SetFocusEmulationEnabled, emulation.SetFocusEmulationEnabledParams{Enabled: true}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"clipboard-read", "clipboard-write"} {
		if _, err := chromedp.CallBrowser(ctx, cdpbrowser.SetPermission, cdpbrowser.SetPermissionParams{
			Permission: &cdpbrowser.PermissionDescriptor{Name: name, AllowWithoutSanitization: true},
			Setting:    cdpbrowser.PermissionSettingGranted, Origin: h.url}); err != nil {
			t.Fatal(err)
		}
	}
	copied := func(sel string) string {
		t.Helper()
		run(t, ctx,
			chromedp.Evaluate[chromedp.Void](`navigator.clipboard.writeText("-")`, chromedp.EvalAwaitPromise),
			chromedp.Click(chromedp.CSS(sel+` [data-testid=copy-message]`)),
			waitJS(`document.querySelector(`+jsString(sel+` [data-testid=copy-message]`)+`).textContent === "Copied"`),
		)
		return evalJS[string](t, ctx, `navigator.clipboard.readText()`)
	}
	if got := copied("#msg-5"); got != chat.Messages[0].Text {
		t.Errorf("user message copied as %q", got)
	}
	if got := copied("#msg-6"); got != reply {
		t.Errorf("reply copied as %q, want its markdown", got)
	}

	live := "Second *answer*, with `code`."
	send(t, c, views.FrameUserMessage(views.Message{Seq: 7, Role: "user", Text: "and then?"}, views.LiveMessage{Model: "m1"}))
	send(t, c, views.FrameFinal(views.Message{Seq: 8, Role: "assistant", Text: live, HTML: "<p>Second <em>answer</em>, with <code>code</code>.</p>", Model: "m1"}))
	run(t, ctx, waitJS(`!!document.querySelector("#msg-8")`))
	if got := copied("#msg-7"); got != "and then?" {
		t.Errorf("live user message copied as %q", got)
	}
	if got := copied("#msg-8"); got != live {
		t.Errorf("live reply copied as %q, want its markdown", got)
	}
	problems.Check(t)
}

// TestBrowserRenameSetsTabTitle: a rename (a title frame, as every tab of the chat
// gets it) changes the browser tab's title too.
func TestBrowserRenameSetsTabTitle(t *testing.T) {
	chat := sampleChat()
	chat.Live, chat.RunState = nil, "idle"
	h := newChatHarness(t, views.Page{Title: "Trip plan", CSRF: "t", User: page.User}, chat)
	ctx, problems := atSize(t, 1280, 800, h)
	c := h.conn(t)
	if got := evalJS[string](t, ctx, `document.title`); got != "Trip plan · Atrium" {
		t.Fatalf("title %q before the rename", got)
	}
	send(t, c, views.FrameSessionTitle(views.SessionItem{ID: "s1", Title: "Oslo in May"}))
	run(t, ctx, waitJS(`document.querySelector("#session-title").textContent === "Oslo in May"`))
	run(t, ctx, waitJS(`document.title === "Oslo in May · Atrium"`))
	problems.Check(t)
}

// longMessages are n messages from seq on, each several lines long.
func longMessages(seq int64, n int) []views.Message {
	var out []views.Message
	for i := range n {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		text := strings.Repeat(fmt.Sprintf("Message %d, a line of text to read.\n", seq), 6)
		out = append(out, views.Message{Seq: seq, Role: role, Text: text, HTML: "<p>" + strings.ReplaceAll(text, "\n", "<br>") + "</p>"})
		seq++
	}
	return out
}

// TestBrowserLoadOlderKeepsPosition: "Load older" adds messages above the first one on
// screen, which stays where it was instead of the view jumping to the oldest.
func TestBrowserLoadOlderKeepsPosition(t *testing.T) {
	for _, size := range uiSizes {
		t.Run(size.name, func(t *testing.T) {
			chat := sampleChat()
			chat.Live, chat.RunState = nil, "idle"
			chat.Messages, chat.OlderCursor = longMessages(101, 12), 101
			h := newChatHarness(t, page, chat)
			h.mux.Handle("GET /s/s1/messages", templ.Handler(views.OlderMessages("s1", longMessages(1, 12), 0)))
			ctx, problems := atSize(t, size.width, size.height, h)
			h.conn(t)
			scroller := `(() => { const m = document.getElementById("messages");
				return m.scrollHeight > m.clientHeight + 1 && getComputedStyle(m).overflowY !== "visible" ? m : document.scrollingElement; })()`
			run(t, ctx,
				chromedp.Evaluate[chromedp.Void](scroller+`.scrollTop = 0`),
				waitJS(scroller+`.scrollTop === 0`),
			)
			before := evalJS[float64](t, ctx, `document.getElementById("msg-101").getBoundingClientRect().top`)
			run(t, ctx,
				chromedp.Click(chromedp.CSS(`[data-testid=load-older]`)),
				waitJS(`!!document.getElementById("msg-1") && !document.querySelector("[data-testid=load-older]")`),
				chromedp.Sleep(200*time.Millisecond), // a late jump would show here
			)
			after := evalJS[float64](t, ctx, `document.getElementById("msg-101").getBoundingClientRect().top`)
			if d := after - before; d > 2 || d < -2 {
				t.Errorf("the first message read moved by %.0f px (from %.0f to %.0f)", d, before, after)
			}
			problems.Check(t)
		})
	}
}

// TestBrowserLongTitlesStayInSidebar: long titles (with and without spaces) end in an
// ellipsis inside the sidebar, with the whole title on hover.
func TestBrowserLongTitlesStayInSidebar(t *testing.T) {
	long := "A very long chat title about planning the trip to Oslo in May with the whole family and the dog"
	unbroken := strings.Repeat("Averyveryverylongwordwithoutanyspace", 3)
	for _, size := range uiSizes {
		t.Run(size.name, func(t *testing.T) {
			chat := sampleChat()
			chat.Live, chat.RunState = nil, "idle"
			chat.Sessions.Items = []views.SessionItem{{ID: "s1", Title: long, Active: true}, {ID: "s2", Title: unbroken}, {ID: "s3", Title: "Short"}}
			h := newChatHarness(t, page, chat)
			ctx, problems := atSize(t, size.width, size.height, h)
			h.conn(t)
			if size.width < 721 {
				run(t, ctx, chromedp.Click(chromedp.CSS(`[data-testid=sidebar-toggle]`)),
					waitJS(`document.body.classList.contains("sidebar-open")`),
					chromedp.Sleep(400*time.Millisecond)) // the drawer slides in
			}
			type box struct {
				Title                              string
				Right, SidebarRight, Scroll, Width float64
				SidebarScroll, SidebarWidth        float64
			}
			boxes := evalJS[[]box](t, ctx, `[...document.querySelectorAll("#sidebar [data-testid=session-link]")].map(a => {
				const s = document.getElementById("sidebar");
				return {Title: a.title, Right: a.getBoundingClientRect().right, SidebarRight: s.getBoundingClientRect().right,
					Scroll: a.scrollWidth, Width: a.clientWidth, SidebarScroll: s.scrollWidth, SidebarWidth: s.clientWidth};
			})`)
			want := []string{long, unbroken, "Short"}
			if len(boxes) != len(want) {
				t.Fatalf("%d links, want %d", len(boxes), len(want))
			}
			for i, b := range boxes {
				if b.Title != want[i] {
					t.Errorf("link %d: hover title %q, want %q", i, b.Title, want[i])
				}
				if b.Right > b.SidebarRight+0.5 {
					t.Errorf("link %d ends at %.0f px, past the sidebar's edge at %.0f", i, b.Right, b.SidebarRight)
				}
				if b.SidebarScroll > b.SidebarWidth {
					t.Errorf("the sidebar scrolls sideways (%.0f px of content in %.0f)", b.SidebarScroll, b.SidebarWidth)
				}
				if i < 2 && b.Scroll <= b.Width {
					t.Errorf("link %d is not cut (%.0f of %.0f px): the test needs a longer title", i, b.Scroll, b.Width)
				}
			}
			problems.Check(t)
		})
	}
}

// TestBrowserLocalTimes: times are rendered in UTC (the fallback without JS) and shown
// in the browser's zone, here Asia/Tokyo (UTC+9, no summer time), also those that
// arrive in frames.
func TestBrowserLocalTimes(t *testing.T) {
	chat := sampleChat()
	chat.Live, chat.RunState, chat.OlderCursor = nil, "idle", 0
	h := newChatHarness(t, page, chat)
	ctx, problems := atSize(t, 1280, 800, h, chromedp.Env("TZ=Asia/Tokyo"))
	c := h.conn(t)
	if z := evalJS[string](t, ctx, `Intl.DateTimeFormat().resolvedOptions().timeZone`); z != "Asia/Tokyo" {
		t.Fatalf("the browser runs in %q", z)
	}
	// created is 2025-03-01 12:00 UTC.
	run(t, ctx, waitJS(`document.querySelector("#msg-5 time").textContent === "2025-03-01 21:00"`))
	if title := evalJS[string](t, ctx, `document.querySelector("#msg-5 time").title`); !strings.Contains(title, "2025") {
		t.Errorf("hover title %q lacks the full date", title)
	}
	late := time.Date(2025, 3, 1, 20, 30, 0, 0, time.UTC) // the next day in Tokyo
	send(t, c, views.FrameUserMessage(views.Message{Seq: 9, Role: "user", Text: "late", CreatedAt: late}, views.LiveMessage{}))
	run(t, ctx, waitJS(`document.querySelector("#msg-9 time")?.textContent === "2025-03-02 05:30"`))
	problems.Check(t)
}

// TestBrowserMCPControlsFollowServers: with MCP set up but no ready server offering
// anything, the composer has no Resources button and "/" opens no menu; they appear
// when an indicator frame says a ready server offers resources and prompts, and go
// when it no longer does, without a reload.
func TestBrowserMCPControlsFollowServers(t *testing.T) {
	for _, size := range uiSizes {
		t.Run(size.name, func(t *testing.T) {
			chat := sampleChat()
			chat.Messages, chat.Live, chat.RunState, chat.OlderCursor = nil, nil, "idle", 0
			chat.MCP = &views.MCPIndicator{}
			h := newChatHarness(t, page, chat)
			h.mux.Handle("GET /s/s1/prompts", templ.Handler(views.PromptMenu("s1", []views.MCPPrompt{{Server: "srv", Name: "greet"}})))
			ctx, problems := atSize(t, size.width, size.height, h)
			c := h.conn(t)
			buttonShown := `getComputedStyle(document.querySelector("[data-testid=resources-button]")).display !== "none"`
			menuShown := `!document.querySelector("[data-testid=prompt-menu]").hidden`
			slash := func() {
				run(t, ctx,
					chromedp.Evaluate[chromedp.Void](`document.querySelector("[data-testid=composer]").value = ""`),
					chromedp.Click(chromedp.CSS(`[data-testid=composer]`)),
					chromedp.SendKeys(chromedp.CSS(`[data-testid=composer]`), "/"),
					chromedp.Sleep(300*time.Millisecond))
			}
			if evalJS[bool](t, ctx, buttonShown) {
				t.Error("Resources button shown with no server")
			}
			slash()
			if evalJS[bool](t, ctx, menuShown) {
				t.Error(`"/" opened the prompt menu with no server`)
			}

			send(t, c, views.FrameMCPIndicator(views.MCPIndicator{Total: 1, Ready: 1, Resources: 3, Prompts: 1}))
			run(t, ctx, waitJS(buttonShown))
			slash()
			run(t, ctx, waitJS(menuShown), chromedp.WaitVisible(chromedp.CSS(`[data-testid=prompt-item]`)))

			send(t, c, views.FrameMCPIndicator(views.MCPIndicator{Total: 1, Failed: 1}))
			run(t, ctx, waitJS(`!(`+buttonShown+`) && !(`+menuShown+`)`))
			problems.Check(t)
		})
	}
}

// TestBrowserSendKeptWhenLoginEnds: the server ends the socket (login ended) without
// answering the send; the text stays in the composer, the notice says why, and the
// composer is free to send again once a socket is back.
func TestBrowserSendKeptWhenLoginEnds(t *testing.T) {
	chat := sampleChat()
	chat.Messages, chat.Live, chat.RunState, chat.OlderCursor = nil, nil, "idle", 0
	h := newChatHarness(t, page, chat)
	ctx, problems := atSize(t, 1280, 800, h)
	c := h.conn(t)
	run(t, ctx,
		chromedp.Click(chromedp.CSS(`[data-testid=composer]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=composer]`), "are you there?"),
		chromedp.KeyEvent("\r"),
	)
	if got := h.next(t); got["text"] != "are you there?" || got["nonce"] == "" {
		t.Fatalf("browser sent %v", got)
	}
	send(t, c, views.FrameNotice("Your login has ended. Log in again to continue; nothing was sent."))
	if err := c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, ""), time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	run(t, ctx,
		waitJS(`document.querySelector("#notice").textContent.includes("login has ended")`),
		waitJS(`document.querySelector("#composer").getAttribute("aria-busy") === null`),
	)
	if got := evalJS[string](t, ctx, `document.querySelector("[data-testid=composer]").value`); got != "are you there?" {
		t.Fatalf("composer holds %q after the socket ended, want the unsent text", got)
	}
	problems.Check(t, "WebSocket")
}
