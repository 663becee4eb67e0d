package main

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"atrium/internal/browsertest"
	"atrium/internal/llm/llmtest"
)

// TestEndToEndAdminRunReveal: bob chats; in Settings → Runs alice sees his run as
// metadata only (chat title hidden), reveals it behind a confirm, reads its spans
// with the reply in a span's data, and bob then finds the reveal on his Memories
// page.
func TestEndToEndAdminRunReveal(t *testing.T) {
	ctx, problems := browsertest.New(t, 1300, 1000)
	fake := llmtest.NewServer(t)
	fake.SetModels("fake-model")
	fake.SetHandler(func(llmtest.ChatRequest) llmtest.Reply {
		return llmtest.Reply{Text: llmtest.Words("The bicycle is in the cellar.")}
	})
	a := startApp(t, nil)
	run := stepRunner(t, ctx)
	setUpInBrowser(run, a, fake)
	run("create bob",
		chromedp.Navigate(a.URL+"/settings/users"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=user-create-form]`)),
		chromedp.SendKeys(chromedp.CSS(`#new-user-username`), "bob"),
		chromedp.SendKeys(chromedp.CSS(`#new-user-password`), "bob password 1"),
		chromedp.Click(chromedp.CSS(`[data-testid=user-create]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=flash], [data-testid=form-notice]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=logout]`)),
		loginSteps("bob", "bob password 1"),
	)
	run("bob chats",
		chromedp.Navigate(a.URL+"/"),
		chromedp.Click(chromedp.CSS(`[data-testid=new-chat-main]`)),
		sendSteps("where is my bicycle"),
		chromedp.WaitVisible(chromedp.CSS(`article[data-role=assistant][data-status=complete]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=logout]`)),
		loginSteps("alice", "correct horse battery"),
	)
	row := `[data-testid=admin-run][data-owner=bob] `
	var before, status string
	run("alice sees metadata",
		chromedp.Click(chromedp.CSS(`[data-testid=nav-settings]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=nav-admin-runs]`)),
		chromedp.WaitVisible(chromedp.CSS(row+`[data-testid=admin-run-chat-hidden]`)),
		into(&before, chromedp.Evaluate[string](`document.body.textContent`)),
		into(&status, chromedp.Evaluate[string](`document.querySelector("[data-testid=admin-run][data-owner=bob]").dataset.status`)),
	)
	if strings.Contains(before, "bicycle") || status != "complete" {
		t.Errorf("before the reveal: status %q, the page shows the chat title: %v", status, strings.Contains(before, "bicycle"))
	}
	var data string
	var spans int
	run("alice reveals and reads the run",
		chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`),
		chromedp.Click(chromedp.CSS(row+`[data-testid=admin-run-reveal]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=admin-run-spans]`)),
		into(&spans, chromedp.Evaluate[int](`document.querySelectorAll("[data-testid=admin-run-span]").length`)),
		chromedp.Evaluate[chromedp.Void](`document.querySelectorAll("[data-testid=admin-run-span] details").forEach(d => d.open = true)`),
		into(&data, chromedp.Evaluate[string](`[...document.querySelectorAll("[data-testid=admin-run-span-data]")].map(e => e.textContent).join("\n")`)),
	)
	if spans < 2 || !strings.Contains(data, "The bicycle is in the cellar.") || !strings.Contains(data, "where is my bicycle") {
		t.Errorf("%d spans; data: %.1500s", spans, data)
	}
	var entry string
	run("bob sees the reveal",
		chromedp.Click(chromedp.CSS(`[data-testid=logout]`)),
		loginSteps("bob", "bob password 1"),
		chromedp.Navigate(a.URL+"/memories"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=memory-audit-entry]`)),
		into(&entry, chromedp.Text(chromedp.CSS(`[data-testid=memory-audit-entry]`))),
	)
	if !strings.Contains(entry, "Admin alice viewed the content of your run") {
		t.Errorf("bob's audit entry: %q", entry)
	}
	problems.Check(t)
}
