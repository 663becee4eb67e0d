package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"atrium/internal/browsertest"
)

// adminSections and userSections are the settings nav's entries, by data-testid.
var (
	userSections  = []string{"nav-account", "nav-memories"}
	adminSections = []string{"nav-providers", "nav-mcp", "nav-admin-memories", "nav-admin-runs", "nav-users"}
	settingsPages = map[string]string{
		"/settings/account":   "nav-account",
		"/memories":           "nav-memories",
		"/settings/providers": "nav-providers",
		"/settings/mcp":       "nav-mcp",
		"/settings/memories":  "nav-admin-memories",
		"/settings/runs":      "nav-admin-runs",
		"/settings/users":     "nav-users",
	}
)

// visibleJS is true when the element matched by sel is rendered with a box.
func visibleJS(sel string) string {
	return `(() => { const e = document.querySelector(` + jsQuote(sel) + `); return !!e && e.checkVisibility() && e.getBoundingClientRect().width > 0; })()`
}

func jsQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }

// checkSettingsNav opens every settings page and checks its section nav: each of
// want visible, the page's own entry marked current, none of dontWant present, and
// the top bar carrying Chat and Settings only.
func checkSettingsNav(t *testing.T, run func(string, ...chromedp.Action[chromedp.Void]), base string, pages map[string]string, want, dontWant []string) {
	t.Helper()
	for path, current := range pages {
		steps := []chromedp.Action[chromedp.Void]{
			chromedp.Navigate(base + path),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=settings-nav]`)),
			chromedp.Poll[chromedp.Void](`document.querySelector("[data-testid=settings-nav] [aria-current=page]")?.dataset.testid === ` + jsQuote(current)),
			chromedp.Poll[chromedp.Void](`[...document.querySelectorAll(".topnav a")].map(a => a.dataset.testid).join(" ") === "nav-chat nav-settings"`),
		}
		for _, id := range want {
			steps = append(steps, chromedp.Poll[chromedp.Void](visibleJS(`[data-testid=settings-nav] [data-testid=`+id+`]`)))
		}
		for _, id := range dontWant {
			steps = append(steps, chromedp.Poll[chromedp.Void](`!document.querySelector("[data-testid=`+id+`]")`))
		}
		run("settings nav on "+path, steps...)
	}
}

// TestEndToEndSettingsArea: every settings page has the section nav at desktop and
// phone sizes, an old /admin/users link lands on /settings/users, and a plain user
// sees only their own sections and a 404 for an admin one.
func TestEndToEndSettingsArea(t *testing.T) {
	ctx, problems := browsertest.New(t, 1280, 800)
	fake := fakeModel(t)
	a := startApp(t, nil)
	run := stepRunner(t, ctx)
	setUpInBrowser(run, a, fake)

	all := append(append([]string{}, userSections...), adminSections...)
	checkSettingsNav(t, run, a.URL, settingsPages, all, nil)
	screenshot(t, ctx, "settings-desktop")

	var path string
	run("old users address",
		chromedp.Navigate(a.URL+"/admin/users"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=user-create-form]`)),
		into(&path, chromedp.Evaluate[string](`location.pathname`)),
	)
	if path != "/settings/users" {
		t.Fatalf("/admin/users landed on %q", path)
	}
	run("create bob",
		chromedp.SendKeys(chromedp.CSS(`#new-user-username`), "bob"),
		chromedp.SendKeys(chromedp.CSS(`#new-user-password`), "bob password 1"),
		chromedp.Click(chromedp.CSS(`[data-testid=user-create]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=flash], [data-testid=form-notice]`)),
		chromedp.Poll[chromedp.Void](`location.pathname === "/settings/users"`),
		chromedp.Click(chromedp.CSS(`[data-testid=logout]`)),
		loginSteps("bob", "bob password 1"),
	)
	checkSettingsNav(t, run, a.URL, map[string]string{"/settings/account": "nav-account", "/memories": "nav-memories"}, userSections, adminSections)
	run("an admin section is a 404 to bob",
		chromedp.Navigate(a.URL+"/settings/users"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=error-status]`)),
		chromedp.Poll[chromedp.Void](`document.querySelector("[data-testid=error-status]").textContent === "404"`),
	)

	// A phone: the nav is a scrollable row above the page, which does not scroll sideways.
	run("phone", chromedp.EmulateViewport(390, 844), chromedp.Navigate(a.URL+"/settings/account"), chromedp.Poll[chromedp.Void](`window.innerWidth === 390`))
	checkSettingsNav(t, run, a.URL, map[string]string{"/settings/account": "nav-account", "/memories": "nav-memories"}, userSections, adminSections)
	screenshot(t, ctx, "settings-phone")
	var overflow bool
	run("no sideways scroll", into(&overflow, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`)))
	if overflow {
		t.Error("a settings page scrolls sideways at 390px")
	}
	problems.Check(t, "status of 404") // bob's visit to /settings/users
}

// oneLineHeaderJS is true when every visible item of the top bar sits inside it on
// one line: the same vertical centre (±4 px), nothing taller than one line of text,
// and nothing past the right edge of the screen.
const oneLineHeaderJS = `(() => {
	const bar = document.querySelector(".topbar").getBoundingClientRect();
	const items = [...document.querySelectorAll(".topbar a, .topbar button")].filter(e => e.checkVisibility() && e.getBoundingClientRect().width > 0);
	if (items.length < 3) return "only " + items.length + " items";
	const mid = r => (r.top + r.bottom) / 2;
	const m0 = mid(items[0].getBoundingClientRect());
	for (const e of items) {
		const r = e.getBoundingClientRect();
		if (Math.abs(mid(r) - m0) > 4 || r.height > 40 || r.top < bar.top || r.bottom > bar.bottom || r.right > window.innerWidth) {
			return (e.dataset.testid || e.textContent) + " " + JSON.stringify(r);
		}
	}
	return bar.height <= 60 ? "" : "bar " + bar.height;
})()`

// TestEndToEndPhoneHeader: at 390×844 the header fits on one line on the chat and in
// settings; Log out is in the settings nav there, and works.
func TestEndToEndPhoneHeader(t *testing.T) {
	ctx, problems := browsertest.New(t, 1280, 800)
	fake := fakeModel(t)
	a := startApp(t, nil)
	run := stepRunner(t, ctx)
	setUpInBrowser(run, a, fake)

	run("phone", chromedp.EmulateViewport(390, 844), chromedp.Navigate(a.URL+"/"), chromedp.Poll[chromedp.Void](`window.innerWidth === 390`),
		chromedp.Click(chromedp.CSS(`[data-testid=new-chat-main]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=composer]`)),
	)
	for _, path := range []string{"", "/", "/settings/account", "/settings/users"} {
		if path != "" {
			run("open "+path, chromedp.Navigate(a.URL+path), chromedp.WaitVisible(chromedp.CSS(`.topbar`)))
		}
		var bad string
		var barH float64
		run("header on "+path, into(&bad, chromedp.Evaluate[string](oneLineHeaderJS)),
			into(&barH, chromedp.Evaluate[float64](`document.querySelector(".topbar").getBoundingClientRect().height`)))
		t.Logf("page %q at 390x844: top bar %.0f px high", path, barH)
		if bad != "" {
			t.Errorf("page %q: the header is not one line at 390px: %s", path, bad)
		}
	}
	screenshot(t, ctx, "users-phone")
	run("log out from the settings nav",
		chromedp.Navigate(a.URL+"/settings/account"),
		chromedp.Poll[chromedp.Void](`!document.querySelector(".topbar [data-testid=logout]").checkVisibility()`),
		chromedp.Click(chromedp.CSS(`[data-testid=settings-logout]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=login-form]`)),
	)
	problems.Check(t)
}

// TestEndToEndSidePanelAndKeys: at 1280×800 the "Task & context" panel starts
// collapsed with the chat at full width, opens into a column, and the choice survives
// a reload; the shortcuts (listed in the "?" dialog) open a new chat, focus the
// composer and the search, and stop a reply, but not while typing in a field.
func TestEndToEndSidePanelAndKeys(t *testing.T) {
	ctx, problems := browsertest.New(t, 1280, 800)
	fake := fakeModel(t)
	a := startApp(t, nil)
	run := stepRunner(t, ctx)
	setUpInBrowser(run, a, fake)

	chatFullWidth := `document.querySelector("#messages").getBoundingClientRect().right >= document.querySelector(".chat-col").getBoundingClientRect().right - 2`
	run("collapsed by default",
		chromedp.Navigate(a.URL+"/"),
		chromedp.Click(chromedp.CSS(`[data-testid=new-chat-main]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=composer]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=side-toggle]`)),
		chromedp.Poll[chromedp.Void](`!document.querySelector("[data-side]").open && !document.querySelector("#task-panel").checkVisibility()`),
		chromedp.Poll[chromedp.Void](chatFullWidth),
	)
	var collapsedW, openW float64
	msgWidth := chromedp.Evaluate[float64](`document.querySelector("#messages").getBoundingClientRect().width`)
	run("width collapsed", into(&collapsedW, msgWidth))
	run("opened, it is a column beside the chat",
		chromedp.Click(chromedp.CSS(`[data-testid=side-toggle]`)),
		chromedp.WaitVisible(chromedp.CSS(`#task-panel`)),
		chromedp.Poll[chromedp.Void](`document.querySelector("#task-panel").getBoundingClientRect().left >= document.querySelector("#messages").getBoundingClientRect().right`),
		// The choice is stored on the (asynchronous) toggle event: wait for it before reloading.
		chromedp.Poll[chromedp.Void](`localStorage.getItem("atrium.side-open") === "1"`),
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`#task-panel`)),
		chromedp.Poll[chromedp.Void](`document.querySelector("[data-side]").open`),
	)
	screenshot(t, ctx, "side-open-desktop")
	run("width open", into(&openW, msgWidth))
	t.Logf("#messages at 1280x800: %.0f px wide with the panel collapsed, %.0f px opened", collapsedW, openW)
	run("collapsed again, remembered",
		chromedp.Click(chromedp.CSS(`[data-testid=side-toggle]`)),
		chromedp.Poll[chromedp.Void](`!document.querySelector("#task-panel").checkVisibility()`),
		chromedp.Poll[chromedp.Void](`localStorage.getItem("atrium.side-open") === "0"`),
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=composer]`)),
		chromedp.Poll[chromedp.Void](`!document.querySelector("[data-side]").open`),
		chromedp.Poll[chromedp.Void](chatFullWidth),
	)

	blur := chromedp.Evaluate[chromedp.Void](`document.activeElement.blur()`)
	var chatURL, help string
	run("? opens the list",
		into(&chatURL, chromedp.Location()),
		blur,
		chromedp.KeyEvent("?"),
		chromedp.Poll[chromedp.Void](`document.querySelector("#keys-help").open`),
		into(&help, chromedp.Text(chromedp.CSS(`#keys-help`))),
		chromedp.KeyEvent(kb.Escape),
		chromedp.Poll[chromedp.Void](`!document.querySelector("#keys-help").open`),
	)
	for _, want := range []string{"New chat", "Focus the message box", "Search chats", "Stop the reply"} {
		if !strings.Contains(help, want) {
			t.Errorf("the shortcut list lacks %q: %q", want, help)
		}
	}
	run("the ? button opens it too",
		chromedp.Click(chromedp.CSS(`[data-testid=keys-button]`)),
		chromedp.Poll[chromedp.Void](`document.querySelector("#keys-help").open`),
		chromedp.Click(chromedp.CSS(`[data-testid=keys-help-close]`)),
		chromedp.Poll[chromedp.Void](`!document.querySelector("#keys-help").open`),
	)
	run("typing in the composer is typing",
		chromedp.Click(chromedp.CSS(`[data-testid=composer]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=composer]`), "n?s/c"),
		chromedp.Poll[chromedp.Void](`document.querySelector("[data-testid=composer]").value === "n?s/c"`),
		chromedp.Poll[chromedp.Void](`!document.querySelector("#keys-help").open && location.href === `+jsQuote(chatURL)),
		chromedp.Evaluate[chromedp.Void](`document.querySelector("[data-testid=composer]").value = ""`),
	)
	defer func() {
		if t.Failed() {
			var state string
			_ = chromedp.Do(ctx, into(&state, chromedp.Evaluate[string](`JSON.stringify({a: document.activeElement?.outerHTML.slice(0, 200), s: document.querySelector("#chat-search")?.value, c: document.querySelector("[data-testid=composer]")?.value, u: location.href})`)))
			t.Logf("page state: %s", state)
		}
	}()
	run("/ focuses the search, c the composer",
		blur,
		chromedp.KeyEvent("/"),
		chromedp.Poll[chromedp.Void](`document.activeElement.id === "chat-search"`),
		chromedp.Poll[chromedp.Void](`document.querySelector("#chat-search").value === ""`),
		blur,
		chromedp.KeyEvent("c"),
		chromedp.Poll[chromedp.Void](`document.activeElement.dataset.testid === "composer"`),
		chromedp.Poll[chromedp.Void](`document.querySelector("[data-testid=composer]").value === ""`),
	)
	run("s stops the reply",
		sendSteps("tell me something long"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=stop]`)),
		blur,
		chromedp.KeyEvent("s"),
		chromedp.Poll[chromedp.Void](`document.querySelector("#run-state").dataset.state === "idle"`),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=stopped-badge]`)),
	)
	run("n opens a new chat", blur, chromedp.KeyEvent("n"))
	if got := newPageAt(t, ctx, chatURL); !strings.Contains(got, "/s/") {
		t.Errorf("n on a chat went to %q", got)
	}
	run("settings", chromedp.Navigate(a.URL+"/settings/account"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=settings-nav]`)), blur, chromedp.KeyEvent("n"))
	if got := newPageAt(t, ctx, a.URL+"/settings/account"); !strings.Contains(got, "/s/") {
		t.Errorf("n on a settings page went to %q", got)
	}
	run("the new chat", chromedp.WaitVisible(chromedp.CSS(`[data-testid=composer]`)))
	problems.Check(t)
}

// newPageAt waits for the browser to leave from (a navigation the page starts, which
// a Poll inside the page cannot outlive) and returns where it went.
func newPageAt(t *testing.T, ctx context.Context, from string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		loc, err := chromedp.Run(ctx, chromedp.Location())
		if err == nil && loc != from && loc != "about:blank" {
			return loc
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("still at %s", from)
	return ""
}
