package main

import (
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	"atrium/internal/browsertest"
	"atrium/internal/llm/llmtest"
)

// TestEndToEndMemory: in chat A the user says "remember that I prefer metric units" and
// sees it saved; the Memories page lists it; chat B's model request carries it; "forget
// that …" removes it from the page and from the next request. (That its bytes leave
// the database files is checked by the Memories page tests, where no chat holds it.)
func TestEndToEndMemory(t *testing.T) {
	ctx, problems := browsertest.New(t, 1200, 900)
	fake := llmtest.NewServer(t)
	fake.SetModels("fake-model")
	var mu sync.Mutex
	var systems []string // the system message of every chat request, in order
	fake.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		mu.Lock()
		systems = append(systems, req.Messages[0].Content)
		mu.Unlock()
		return llmtest.Reply{Text: llmtest.Words("Understood.")}
	})
	lastSystem := func() string {
		mu.Lock()
		defer mu.Unlock()
		return systems[len(systems)-1]
	}
	a := startApp(t, nil)
	run := stepRunner(t, ctx)
	setUpInBrowser(run, a, fake)
	const pref = "I prefer metric units"
	replies := `#messages article[data-role=assistant][data-status=complete]`

	var notice string
	run("chat A: remember",
		chromedp.Navigate(a.URL+"/"),
		chromedp.Click(chromedp.CSS(`[data-testid=new-chat-main]`)),
		sendSteps("Please remember that "+pref),
		chromedp.WaitVisible(chromedp.CSS(replies)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=notice]`)),
		into(&notice, chromedp.Text(chromedp.CSS(`[data-testid=notice]`))),
	)
	if !strings.Contains(notice, "Saved to memory") {
		t.Errorf("notice %q, want Saved to memory", notice)
	}
	var listed string
	run("the Memories page lists it",
		chromedp.Navigate(a.URL+"/memories"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=memory] [data-testid=memory-text-shown]`)),
		into(&listed, chromedp.Text(chromedp.CSS(`[data-testid=memory] [data-testid=memory-text-shown]`))),
	)
	if listed != pref {
		t.Errorf("Memories page shows %q, want %q", listed, pref)
	}

	run("chat B: the model is told",
		chromedp.Navigate(a.URL+"/"),
		chromedp.Click(chromedp.CSS(`[data-testid=new-chat-main]`)),
		sendSteps("Which units should you use for me?"),
		chromedp.WaitVisible(chromedp.CSS(replies)),
	)
	if sys := lastSystem(); !strings.Contains(sys, pref) {
		t.Errorf("chat B's request does not carry the memory:\n%s", sys)
	}
	var chip string
	run("the reply says so, also after a reload",
		chromedp.WaitVisible(chromedp.CSS(replies+` [data-testid=memories-used]`)),
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(replies+` [data-testid=memories-used]`)),
		into(&chip, chromedp.Text(chromedp.CSS(replies+` [data-testid=memories-used]`))),
	)
	if chip != "1 memory used" {
		t.Errorf("memory chip %q", chip)
	}

	run("forget it",
		sendSteps("forget that I prefer metric units"),
		chromedp.WaitVisible(chromedp.CSS(replies+`:nth-of-type(4)`)),
		chromedp.Poll[chromedp.Void](`document.querySelector('[data-testid=notice]')?.textContent.includes('Forgot 1 memory')`),
		sendSteps("Which units again?"),
		chromedp.WaitVisible(chromedp.CSS(replies+`:nth-of-type(6)`)),
		chromedp.Navigate(a.URL+"/memories"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=memories]`)),
	)
	var left int
	run("gone from the page", into(&left, chromedp.Evaluate[int](`document.querySelectorAll('[data-testid=memory]').length`)))
	if left != 0 {
		t.Errorf("%d memories listed after forgetting", left)
	}
	if sys := lastSystem(); strings.Contains(sys, pref) {
		t.Errorf("the request after forgetting still carries the memory:\n%s", sys)
	}
	problems.Check(t)
}

// TestEndToEndAdminMemoryReveal: an admin sees bob's memories as a count without the
// text, reveals them (behind a confirm), and bob then finds the reveal on his own
// Memories page.
func TestEndToEndAdminMemoryReveal(t *testing.T) {
	ctx, problems := browsertest.New(t, 1200, 900)
	fake := llmtest.NewServer(t)
	fake.SetModels("fake-model")
	a := startApp(t, nil)
	run := stepRunner(t, ctx)
	setUpInBrowser(run, a, fake)
	const text = "Bob keeps his bicycle in the cellar"
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
	run("bob adds a memory",
		chromedp.Navigate(a.URL+"/memories"),
		chromedp.WaitVisible(chromedp.CSS(`#new-memory-text`)),
		chromedp.SendKeys(chromedp.CSS(`#new-memory-text`), text),
		chromedp.Click(chromedp.CSS(`[data-testid=memory-add]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=memory] [data-testid=memory-text-shown]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=logout]`)),
		loginSteps("alice", "correct horse battery"),
	)
	bob := `[data-testid=memory-owner][data-username=bob] `
	var count, before, revealed string
	run("alice sees metadata, then reveals",
		chromedp.Click(chromedp.CSS(`[data-testid=nav-settings]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=nav-admin-memories]`)),
		chromedp.WaitVisible(chromedp.CSS(bob+`[data-testid=memory-owner-count]`)),
		into(&count, chromedp.Text(chromedp.CSS(bob+`[data-testid=memory-owner-count]`))),
		into(&before, chromedp.Evaluate[string](`document.body.textContent`)),
		chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`),
		chromedp.Click(chromedp.CSS(bob+`[data-testid=memory-owner-reveal]`)),
		chromedp.WaitVisible(chromedp.CSS(bob+`[data-testid=admin-memory-text]`)),
		into(&revealed, chromedp.Text(chromedp.CSS(bob+`[data-testid=admin-memory-text]`))),
	)
	if count != "1" || strings.Contains(before, "bicycle") || revealed != text {
		t.Errorf("count %q, text before the reveal %v, revealed %q", count, strings.Contains(before, "bicycle"), revealed)
	}
	var entry string
	run("bob sees the reveal",
		chromedp.Click(chromedp.CSS(`[data-testid=logout]`)),
		loginSteps("bob", "bob password 1"),
		chromedp.Navigate(a.URL+"/memories"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=memory-audit-entry]`)),
		into(&entry, chromedp.Text(chromedp.CSS(`[data-testid=memory-audit-entry]`))),
	)
	if !strings.Contains(entry, "Admin alice viewed your memories on") {
		t.Errorf("bob's audit entry: %q", entry)
	}
	problems.Check(t)
}

// TestEndToEndMemoryChips: "remember …" → the reply's "Saved to memory" chip (also
// after a reload) → Undo → gone from the Memories page and from the next model
// request; with "ask before saving" on, extraction's proposal is a chip on the reply →
// Accept → listed on the Memories page; another → Reject → nothing saved.
func TestEndToEndMemoryChips(t *testing.T) {
	ctx, problems := browsertest.New(t, 1200, 900)
	fake := llmtest.NewServer(t)
	fake.SetModels("fake-model")
	var mu sync.Mutex
	var systems []string
	fake.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		if strings.Contains(req.Messages[0].Content, "long-term memory") { // the extraction
			user := req.Messages[1].Content
			switch {
			case strings.Contains(user, "kayak"):
				return llmtest.Reply{Text: []string{`{"actions":[{"op":"add","kind":"fact","text":"I paddle a red kayak"}]}`}}
			case strings.Contains(user, "canoe"):
				return llmtest.Reply{Text: []string{`{"actions":[{"op":"add","kind":"fact","text":"I own a blue canoe"}]}`}}
			}
			return llmtest.Reply{Text: []string{`{"actions":[]}`}}
		}
		mu.Lock()
		systems = append(systems, req.Messages[0].Content)
		mu.Unlock()
		return llmtest.Reply{Text: llmtest.Words("Understood.")}
	})
	lastSystem := func() string {
		mu.Lock()
		defer mu.Unlock()
		return systems[len(systems)-1]
	}
	a := startApp(t, map[string]string{"ATRIUM_MEMORY_EXTRACT": "true"})
	run := stepRunner(t, ctx)
	setUpInBrowser(run, a, fake)
	const pref = "I prefer imperial units"
	replies := `#messages article[data-role=assistant][data-status=complete]`
	memoryCount := `document.querySelectorAll('[data-testid=memory]').length`

	var state string
	run("remember, reload, Undo",
		chromedp.Navigate(a.URL+"/"),
		chromedp.Click(chromedp.CSS(`[data-testid=new-chat-main]`)),
		sendSteps("Please remember that "+pref),
		chromedp.WaitVisible(chromedp.CSS(replies+` [data-testid=saved-chip] [data-testid=undo-save]`)),
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(replies+` [data-testid=saved-chip] [data-testid=undo-save]`)),
	)
	screenshot(t, ctx, "memory-saved")
	run("Undo",
		chromedp.Click(chromedp.CSS(`[data-testid=undo-save]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=saved-chip][data-state=undone]`)),
		into(&state, chromedp.Text(chromedp.CSS(`[data-testid=saved-chip]`))),
	)
	if !strings.Contains(state, "Removed from memory") {
		t.Errorf("chip after Undo: %q", state)
	}
	run("the next request does not carry it",
		sendSteps("Which units should you use for me?"),
		chromedp.WaitVisible(chromedp.CSS(replies+`:nth-of-type(4)`)),
	)
	if sys := lastSystem(); strings.Contains(sys, pref) {
		t.Errorf("the request after Undo still carries the memory:\n%s", sys)
	}
	var left int
	run("gone from the Memories page",
		chromedp.Navigate(a.URL+"/memories"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=memories]`)),
		into(&left, chromedp.Evaluate[int](memoryCount)),
	)
	if left != 0 {
		t.Errorf("%d memories listed after Undo", left)
	}

	run("ask before saving",
		chromedp.Click(chromedp.CSS(`[data-testid=memory-ask]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=memory-settings-save]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=form-notice]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=memory-ask]:checked`)),
	)
	var done string
	run("a suggestion → Accept",
		chromedp.Navigate(a.URL+"/"),
		chromedp.Click(chromedp.CSS(`[data-testid=new-chat-main]`)),
		sendSteps("I paddle a red kayak on weekends."),
		chromedp.WaitVisible(chromedp.CSS(replies+` [data-testid=suggestion-chip]`)),
	)
	screenshot(t, ctx, "memory-suggestion")
	run("Accept",
		chromedp.Click(chromedp.CSS(`[data-testid=suggestion-accept]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=suggestion-done]`)),
		into(&done, chromedp.Text(chromedp.CSS(`[data-testid=suggestion-done]`))),
	)
	if done != "Saved to memory." {
		t.Errorf("accepted chip says %q", done)
	}
	run("another → Reject",
		sendSteps("I own a blue canoe too."),
		chromedp.WaitVisible(chromedp.CSS(replies+`:nth-of-type(4) [data-testid=suggestion-chip]`)),
		chromedp.Click(chromedp.CSS(replies+`:nth-of-type(4) [data-testid=suggestion-reject]`)),
		chromedp.WaitVisible(chromedp.CSS(replies+`:nth-of-type(4) [data-testid=suggestion-done]`)),
	)
	var listed string
	run("only the accepted one is on the page",
		chromedp.Navigate(a.URL+"/memories"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=memory] [data-testid=memory-text-shown]`)),
		into(&left, chromedp.Evaluate[int](memoryCount)),
		into(&listed, chromedp.Text(chromedp.CSS(`[data-testid=memory] [data-testid=memory-text-shown]`))),
	)
	if left != 1 || listed != "I paddle a red kayak" {
		t.Errorf("%d memories, first %q; want only the accepted one", left, listed)
	}
	problems.Check(t)
}
