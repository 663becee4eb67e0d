package main

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"atrium/internal/browsertest"
	"atrium/internal/llm/llmtest"
)

// TestEndToEndRunViewer: a turn that calls a tool, then "How was this answered?" on
// the reply opens its run: the waterfall shows the context, the tool call and the
// model requests, and expanding the first model request shows the body as sent, its
// long part behind a toggle that opens too; the pin button pins it. The strict CSP
// holds (no violations).
func TestEndToEndRunViewer(t *testing.T) {
	ctx, problems := browsertest.New(t, 1200, 900)
	fake := llmtest.NewServer(t)
	fake.SetModels("fake-model")
	fake.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" {
			return llmtest.Reply{Text: llmtest.Words("The sum is 42."), ChunkDelay: 5 * time.Millisecond}
		}
		return llmtest.Reply{Reasoning: []string{"I should add them."},
			ToolCalls: []llmtest.ToolCall{{ID: "call_calc", Name: "calculator", Arguments: `{"expression":"40 + 2"}`}}}
	})
	a := startApp(t, nil)
	run := stepRunner(t, ctx)
	setUpInBrowser(run, a, fake)

	firstRequest := `[data-testid=span][data-kind=model_request]` // chromedp acts on the first match
	var kinds []string
	var body, rest string
	run("tool turn, then its run",
		chromedp.Navigate(a.URL+"/"),
		chromedp.Click(chromedp.CSS(`[data-testid=new-chat-main]`)),
		sendSteps("add 40 and 2"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=tool-card][data-tool=calculator][data-status=ok]`)),
		chromedp.Click(chromedp.CSS(`#messages article[data-role=assistant]:last-of-type [data-testid=run-link]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=waterfall] [data-testid=span-bar]`)),
		into(&kinds, chromedp.Evaluate[[]string](`[...document.querySelectorAll('[data-testid=span]')].map(e => e.dataset.kind)`)),
	)
	screenshot(t, ctx, "run-viewer-timeline")
	joined := strings.Join(kinds, " ")
	for _, k := range []string{"context", "tool_selection", "model_request", "model_response", "tool_call", "final"} {
		if !strings.Contains(joined, k) {
			t.Errorf("timeline lacks a %s span: %v", k, kinds)
		}
	}
	run("expand the model request",
		chromedp.Click(chromedp.CSS(firstRequest+` summary`)),
		chromedp.WaitVisible(chromedp.CSS(firstRequest+` [data-label="Body as sent (pretty-printed)"] [data-testid=payload-head]`)),
		into(&body, chromedp.Text(chromedp.CSS(firstRequest+` [data-label="Body as sent (pretty-printed)"] [data-testid=payload-head]`))),
		chromedp.Click(chromedp.CSS(firstRequest+` [data-label="Body as sent (pretty-printed)"] [data-testid=payload-more]`)),
		chromedp.WaitVisible(chromedp.CSS(firstRequest+` [data-label="Body as sent (pretty-printed)"] [data-testid=payload-rest]`)),
		into(&rest, chromedp.Text(chromedp.CSS(firstRequest+` [data-label="Body as sent (pretty-printed)"] [data-testid=payload-rest]`))),
	)
	if !strings.Contains(body, `"model": "fake-model"`) || !strings.Contains(body+rest, "add 40 and 2") {
		t.Errorf("the expanded request shows %q … %q", body, rest)
	}
	screenshot(t, ctx, "run-viewer")
	run("pin the run",
		chromedp.Click(chromedp.CSS(`[data-testid=run-pin][data-pinned=false] button`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=run-pin][data-pinned=true]`)),
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=run-pin][data-pinned=true]`)),
	)
	problems.Check(t)
}
