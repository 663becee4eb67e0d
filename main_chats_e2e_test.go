package main

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"atrium/internal/browsertest"
	"atrium/internal/llm/llmtest"
)

// TestEndToEndChatsExportImport: a chat with a tool turn is exported from the Account
// page (the JSON of all chats) and imported again through its form; the imported chat
// opens with the same messages and its tool card showing the recorded result.
func TestEndToEndChatsExportImport(t *testing.T) {
	ctx, problems := browsertest.New(t, 1200, 900)
	fake := llmtest.NewServer(t)
	fake.SetModels("fake-model")
	fake.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" {
			return llmtest.Reply{Text: llmtest.Words("It is 42."), ChunkDelay: 5 * time.Millisecond}
		}
		return llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "calculator", Arguments: `{"expression":"6*7"}`}}}
	})
	a := startApp(t, nil)
	run := stepRunner(t, ctx)
	setUpInBrowser(run, a, fake)

	var original string
	run("a chat with a tool turn",
		chromedp.Navigate(a.URL+"/"),
		chromedp.Click(chromedp.CSS(`[data-testid=new-chat-main]`)),
		sendSteps("what is 6*7?"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=tool-card][data-tool=calculator][data-status=ok]`)),
		chromedp.WaitVisible(chromedp.CSS(`#messages article[data-role=assistant]:last-of-type`)),
		into(&original, chromedp.Evaluate[string](`location.pathname`)),
	)
	// The export link is a download; the page's own fetch reads the same URL, and the
	// file goes into the import form's file input as a person would choose it.
	var notice string
	run("export all, import the file",
		chromedp.Navigate(a.URL+"/settings/account"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=chats-export]`)),
		chromedp.Evaluate[chromedp.Void](`fetch(document.querySelector('[data-testid=chats-export]').href).then(r => r.text()).then(t => { window.exported = t })`),
		chromedp.Poll[chromedp.Void](`window.exported !== undefined`, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Evaluate[chromedp.Void](`(() => { const dt = new DataTransfer(); dt.items.add(new File([window.exported], 'atrium-chats.json', {type: 'application/json'})); document.querySelector('[data-testid=chats-import-file]').files = dt.files })()`),
		chromedp.Click(chromedp.CSS(`[data-testid=chats-import]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=form-notice]`)),
		into(&notice, chromedp.Text(chromedp.CSS(`[data-testid=form-notice]`))),
	)
	if !strings.Contains(notice, "Imported 1 chats with 4 messages") {
		t.Fatalf("import notice %q", notice)
	}
	var links []string
	run("the chats now", chromedp.Navigate(a.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=session-link]`)),
		into(&links, chromedp.Evaluate[[]string](`[...document.querySelectorAll('[data-testid=session-link]')].map(a => new URL(a.href).pathname)`)))
	imported := ""
	for _, l := range links {
		if l != original {
			imported = l
		}
	}
	if len(links) != 2 || imported == "" {
		t.Fatalf("chats after the import: %v (original %s)", links, original)
	}
	var user, reply string
	run("open the imported chat",
		chromedp.Navigate(a.URL+imported),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=tool-card][data-tool=calculator][data-status=ok]`)),
		into(&user, chromedp.Text(chromedp.CSS(`#messages article[data-role=user]`))),
		into(&reply, chromedp.Text(chromedp.CSS(`#messages article[data-role=assistant]:last-of-type`))),
	)
	if !strings.Contains(user, "what is 6*7?") || !strings.Contains(reply, "It is 42.") {
		t.Errorf("imported chat shows %q / %q", user, reply)
	}
	problems.Check(t)
}
