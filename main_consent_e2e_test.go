package main

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"atrium/internal/browsertest"
	"atrium/internal/llm/llmtest"
)

// TestEndToEndConsent is issue 12 items 2, 3 and 5 in Chromium with server-everything
// over stdio and the fake model: an elicitation form answered in the chat reaches the
// server (the tool result the model gets shows the answer); a sampling request shown
// with its messages is approved (the fake model gets the server's messages) and one is
// declined (the server gets the refusal, the model never runs); a long-running tool's
// progress appears on its card while it runs.
func TestEndToEndConsent(t *testing.T) {
	node, script := everythingServer(t)
	ctx, problems := browsertest.New(t, 1200, 900)
	fake := llmtest.NewServer(t)
	fake.SetModels("fake-model")
	var mu sync.Mutex
	var sampled []llmtest.ChatRequest
	fake.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		if len(req.Messages) > 0 && req.Messages[0].Content == "You are a helpful test server." {
			mu.Lock()
			sampled = append(sampled, req)
			mu.Unlock()
			return llmtest.Reply{Text: llmtest.Words("Because of Rayleigh scattering.")}
		}
		if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" {
			return llmtest.Reply{Text: []string{"Tool said: " + last.Content}}
		}
		call := func(name, args string) llmtest.Reply {
			return llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "everything__" + name, Arguments: args}}}
		}
		switch req.LastUser() {
		case "elicit":
			return call("trigger-elicitation-request", `{}`)
		case "sample yes":
			return call("trigger-sampling-request", `{"prompt":"why is the sky blue?","maxTokens":60}`)
		case "sample no":
			return call("trigger-sampling-request", `{"prompt":"tell me a secret","maxTokens":60}`)
		case "progress":
			return call("trigger-long-running-operation", `{"duration":4,"steps":4}`)
		}
		return llmtest.Reply{Text: []string{"?"}}
	})
	a := startApp(t, nil)
	run := stepRunner(t, ctx)
	setUpInBrowser(run, a, fake)

	run("add server-everything", addEverythingSteps(a.URL, node, script))
	run("new chat", chromedp.Navigate(a.URL+"/"), chromedp.Click(chromedp.CSS(`[data-testid=new-chat-main]`)))

	final := func(what, want string) chromedp.Action[chromedp.Void] {
		return chromedp.Poll[chromedp.Void](`[...document.querySelectorAll('#messages article[data-role=assistant][data-status=complete]')]
			.some(a => a.textContent.includes(`+jsString(want)+`))`, chromedp.WithPollingTimeout(30*time.Second))
	}
	form := `form[data-testid=consent][data-kind=form] `
	var shown string
	run("elicitation: the form appears with its defaults",
		sendSteps("elicit"),
		chromedp.WaitVisible(chromedp.CSS(form+`[data-testid=consent-input-name]`)),
		into(&shown, chromedp.Evaluate[string](`document.querySelector('[data-testid=consent-input-firstLine]').value + '|' +
			document.querySelector('[data-testid=consent-input-integer]').value + '|' +
			document.querySelector('[data-testid=consent-server]').textContent`)),
	)
	screenshot(t, ctx, "consent-form")
	if shown != "It was a dark and stormy night.|42|everything" {
		t.Errorf("form shows %q", shown)
	}
	var problem string
	run("elicitation: a number out of range is refused before it is sent",
		chromedp.SetValue(chromedp.CSS(form+`[data-testid=consent-input-integer]`), "500"),
		chromedp.SendKeys(chromedp.CSS(form+`[data-testid=consent-input-name]`), "Ada Lovelace"),
		chromedp.Click(chromedp.CSS(form+`[data-testid=consent-accept]`)),
		into(&problem, chromedp.Evaluate[string](`document.querySelector('[data-testid=consent-input-integer]').validationMessage`)),
	)
	if problem == "" {
		t.Error("the browser accepted 500 for an integer of at most 100")
	}
	run("elicitation: answered",
		chromedp.SetValue(chromedp.CSS(form+`[data-testid=consent-input-integer]`), "7"),
		chromedp.Click(chromedp.CSS(form+`[data-testid=consent-accept]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=consent][data-outcome=accepted]`)),
		final("elicitation", "Name: Ada Lovelace"),
		final("elicitation", "Favorite Integer: 7"),
	)

	samp := `form[data-testid=consent][data-kind=sampling] `
	run("sampling: shown and approved",
		sendSteps("sample yes"),
		chromedp.WaitVisible(chromedp.CSS(samp+`[data-testid=consent-accept]`)),
		into(&shown, chromedp.Evaluate[string](`document.querySelector('[data-kind=sampling]').textContent`)),
	)
	screenshot(t, ctx, "consent-sampling")
	for _, want := range []string{"You are a helpful test server.", "why is the sky blue?", "At most 60 tokens", "everything"} {
		if !strings.Contains(shown, want) {
			t.Errorf("the sampling request shows %q, without %q", shown, want)
		}
	}
	run("sampling: the model's answer reaches the server",
		chromedp.Click(chromedp.CSS(samp+`[data-testid=consent-accept]`)),
		final("sampling", "Because of Rayleigh scattering."),
	)
	mu.Lock()
	if len(sampled) != 1 || !strings.Contains(sampled[0].LastUser(), "why is the sky blue?") || sampled[0].MaxTokens != 60 {
		t.Errorf("the model got %+v", sampled)
	}
	mu.Unlock()

	run("sampling: declined",
		sendSteps("sample no"),
		chromedp.WaitVisible(chromedp.CSS(samp+`[data-testid=consent-decline]`)),
		chromedp.Click(chromedp.CSS(samp+`[data-testid=consent-decline]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=consent][data-outcome=declined]`)),
		final("declined", "User rejected sampling request"),
	)
	mu.Lock()
	if len(sampled) != 1 {
		t.Errorf("the model ran for a declined request: %d sampling calls", len(sampled))
	}
	mu.Unlock()

	run("progress on the card",
		sendSteps("progress"),
		chromedp.Poll[chromedp.Void](`[...document.querySelectorAll('[data-testid=tool-card][data-status=running] [data-testid=tool-progress-count]')]
			.some(e => /^[1-4] \/ 4$/.test(e.textContent.trim()))`, chromedp.WithPollingTimeout(15*time.Second)),
	)
	screenshot(t, ctx, "tool-progress")
	run("progress: the call ends", final("progress", "Long running operation completed"))
	problems.Check(t)
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
