package main

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"atrium/internal/browsertest"
)

// TestEndToEndRefusedSendKeepsText: while a reply streams and one message is queued, a
// third is refused; it stays in the composer with the reason shown, and goes out once
// the chat is free (after Stop). A message the server refuses as too long stays too. Only an
// accepted message empties the composer.
func TestEndToEndRefusedSendKeepsText(t *testing.T) {
	ctx, problems := browsertest.New(t, 1280, 800)
	fake := fakeModel(t)
	a := startApp(t, map[string]string{"ATRIUM_MAX_MESSAGE_BYTES": "200"})
	run := stepRunner(t, ctx)
	setUpInBrowser(run, a, fake)

	composer := `document.querySelector("[data-testid=composer]").value`
	notice := `document.querySelector("#notice").textContent`
	run("new chat",
		chromedp.Navigate(a.URL+"/"),
		chromedp.Click(chromedp.CSS(`[data-testid=new-chat-main]`)),
		sendSteps("tell me something long"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=stop]`)),
		chromedp.Poll[chromedp.Void](composer+` === ""`),
	)
	defer func() {
		if !t.Failed() {
			return
		}
		var state string
		_ = chromedp.Do(ctx, into(&state, chromedp.Evaluate[string](`JSON.stringify({c: document.querySelector("[data-testid=composer]")?.value, n: document.querySelector("#notice")?.textContent, r: document.querySelector("#run-state")?.dataset.state, s: document.querySelector("#send-result")?.outerHTML, b: document.querySelector("#composer")?.getAttribute("aria-busy"), m: [...document.querySelectorAll("#messages article")].map(e => e.dataset.role + ":" + e.textContent.slice(0, 30))})`)))
		t.Logf("page state: %s", state)
	}()
	run("queue one",
		sendSteps("second"),
		chromedp.Poll[chromedp.Void](notice+`.includes("Queued")`),
		chromedp.Poll[chromedp.Void](composer+` === ""`),
	)
	run("third is refused and kept",
		sendSteps("third message"),
		chromedp.Poll[chromedp.Void](notice+`.includes("already queued")`),
		chromedp.Poll[chromedp.Void](`document.querySelector("#composer").getAttribute("aria-busy") === null`),
	)
	var kept string
	run("composer after refusal", into(&kept, chromedp.Evaluate[string](composer)))
	if kept != "third message" {
		t.Fatalf("composer after a refused send holds %q, want the refused text", kept)
	}

	run("stop (which drops the queued message)",
		chromedp.Click(chromedp.CSS(`[data-testid=stop]`)),
		chromedp.Poll[chromedp.Void](`document.querySelector("#run-state").dataset.state === "idle"`),
	)

	// The size check in the browser is only a courtesy: a tab without it (an old page,
	// a changed limit) is refused by the server, and keeps its text as well.
	long := strings.Repeat("x", 300)
	run("too long for the server",
		chromedp.Evaluate[chromedp.Void](`document.querySelector("[data-testid=composer]").removeAttribute("data-max-bytes")`),
		chromedp.SetValue(chromedp.CSS(`[data-testid=composer]`), long),
		chromedp.Click(chromedp.CSS(`[data-testid=send]`)),
		chromedp.Poll[chromedp.Void](notice+`.includes("too long")`),
		chromedp.Poll[chromedp.Void](`document.querySelector("#composer").getAttribute("aria-busy") === null`),
	)
	run("composer after too long", into(&kept, chromedp.Evaluate[string](composer)))
	if kept != long {
		t.Fatalf("composer after a too-long send holds %d bytes, want the %d refused", len(kept), len(long))
	}

	run("accepted now",
		chromedp.SetValue(chromedp.CSS(`[data-testid=composer]`), "third message"),
		chromedp.Click(chromedp.CSS(`[data-testid=send]`)),
		chromedp.Poll[chromedp.Void](composer+` === ""`),
		chromedp.Poll[chromedp.Void](`[...document.querySelectorAll("#messages [data-role=user]")].filter(e => e.textContent.includes("third message")).length === 1`),
	)
	problems.Check(t)
}

// TestEndToEndMCPControlsAppearLive: a chat open while no MCP server exists has no
// Resources button; when an admin adds server-everything (over plain HTTP, from
// elsewhere) and it becomes ready, the open chat gets the button without a reload.
func TestEndToEndMCPControlsAppearLive(t *testing.T) {
	node, script := everythingServer(t)
	ctx, problems := browsertest.New(t, 1280, 800)
	a := startApp(t, nil)
	admin := newHTTPClient(t, a.URL)
	admin.setupAdmin()
	run := stepRunner(t, ctx)
	run("open a chat",
		chromedp.Navigate(a.URL+"/login"),
		loginSteps("admin", "admin password"),
		chromedp.Click(chromedp.CSS(`[data-testid=new-chat]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=composer]`)),
		chromedp.WaitReady(chromedp.CSS(`[data-testid=mcp-indicator]`)),
		chromedp.WaitNotVisible(chromedp.CSS(`[data-testid=resources-button]`)),
	)
	tok := admin.csrf("/settings/mcp")
	if resp, body := admin.post("/settings/mcp", url.Values{"_csrf": {tok}, "name": {"everything"}, "transport": {"stdio"},
		"command": {node}, "args": {script + "\nstdio"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("add server: %d %.300s", resp.StatusCode, body)
	}
	run("Resources appear in the open chat", chromedp.WaitVisible(chromedp.CSS(`[data-testid=resources-button]`)))
	problems.Check(t)
}
