package web_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"atrium/internal/browsertest"
	"atrium/internal/llm/llmtest"
	"atrium/internal/testkit"
)

// TestBrowserSmallWindowKeepsEveryFact is issue 10's small-window chat in Chromium: a
// model with its own 4,096-token window (typed "fake-model window=4096" with the
// provider's models), eight short facts typed into the composer, each answered with
// ~600 words, then "What are my pets called?". Every request the fake model receives
// for a reply carries each fact said so far, verbatim or in the summary, and the side
// panel's context meter shows the summary and no dropped turns.
func TestBrowserSmallWindowKeepsEveryFact(t *testing.T) {
	ctx, problems := browsertest.New(t, 1200, 900)
	env := newTestEnv(t)
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "fake-model window=4096", "")
	env.llm.SetHandler(llmtest.FaithfulModel(regexp.MustCompile(`my \w+ is \w+`),
		strings.Repeat("the quick brown fox jumps over the lazy dog and ", 55))) // ~600 words
	id := admin.newSession()

	steps := func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(c, actions...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	wait := func(expr string) chromedp.Action[chromedp.Void] {
		return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(25*time.Second))
	}
	steps("login",
		chromedp.Navigate(env.ts.URL+"/login"),
		chromedp.WaitVisible(chromedp.CSS(`#login-username`)),
		chromedp.SendKeys(chromedp.CSS(`#login-username`), "admin"),
		chromedp.SendKeys(chromedp.CSS(`#login-password`), testPassword),
		chromedp.Click(chromedp.CSS(`[data-testid=login-submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`#chat-search`)),
		chromedp.Navigate(env.ts.URL+"/s/"+id),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=composer]`)),
	)

	pets := []string{"my cat is Pixel", "my dog is Rex", "my parrot is Kiwi", "my hamster is Nibbles",
		"my rabbit is Clover", "my goldfish is Bubbles", "my turtle is Shelly", "my pony is Comet"}
	var said []string
	for i, q := range append(pets, "What are my pets called?") {
		before := len(env.llm.Requests())
		reply := fmt.Sprintf("#msg-%d", 2*(i+1))
		steps("turn "+q,
			chromedp.SendKeys(chromedp.CSS(`[data-testid=composer]`), "Note: "+q+"."),
			chromedp.KeyEvent(kb.Enter),
			wait(`document.querySelector("`+reply+`")?.dataset.status === "complete"`),
		)
		// A fold may run after the reply; the next turn starts from its summary.
		testkit.Eventually(t, 20*time.Second, "the chat to be idle", func() bool { return !env.agent.Busy(id) })
		var sent *llmtest.Recorded
		for _, r := range env.llm.Requests()[before:] {
			if !llmtest.IsFold(r.Chat) {
				sent = &r
				break
			}
		}
		if sent == nil {
			t.Fatalf("turn %d: the model received no reply request", i+1)
		}
		var text strings.Builder
		for _, m := range sent.Chat.Messages {
			text.WriteString(m.Content + "\n")
		}
		for _, f := range said {
			if !strings.Contains(text.String(), f) {
				t.Errorf("turn %d (%q): %q is in neither the request nor its summary", i+1, q, f)
			}
		}
		said = append(said, q)
	}
	if folds := countFolds(env.llm.Requests()); folds == 0 {
		t.Fatal("no summary fold ran: the window did not bind, so the test shows nothing")
	}
	// The last request: the early facts are in the summary, not verbatim turns.
	last := env.llm.LastRequest().Chat.Messages
	var summary bool
	for _, m := range last {
		summary = summary || (m.Role != "user" && m.Role != "assistant" && strings.Contains(m.Content, "my cat is Pixel"))
	}
	if !summary {
		t.Errorf("the last request carries the first fact in no summary (system) message")
	}

	steps("open the side panel",
		chromedp.Click(chromedp.CSS(`[data-testid=side-toggle]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=context-meter]`)),
		wait(`!!document.querySelector("[data-testid=meter-zone][data-zone=summary]")`),
	)
	zones, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](`Object.fromEntries([...document.querySelectorAll("[data-testid=meter-zone]")].map(z => [z.dataset.zone, z.querySelector(".zone-usage").textContent.trim()]))`))
	if err != nil {
		t.Fatalf("read the meter: %v", err)
	}
	shot(t, ctx, "small-window-meter")
	if u := zones["summary"]; u == "" || strings.HasPrefix(u, "0") {
		t.Errorf("the meter's summary row is %q (zones %v)", u, zones)
	}
	if u, ok := zones["dropped"]; ok && !strings.HasPrefix(u, "0") {
		t.Errorf("the meter shows dropped turns: %q (zones %v)", u, zones)
	}
	problems.Check(t)
}

func countFolds(reqs []llmtest.Recorded) int {
	n := 0
	for _, r := range reqs {
		if llmtest.IsFold(r.Chat) {
			n++
		}
	}
	return n
}
