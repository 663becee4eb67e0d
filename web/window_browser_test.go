package web_test

import (
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

// smallWindowPets are the facts of the small-window chat, one a turn.
var smallWindowPets = []string{"my cat is Pixel", "my dog is Rex", "my parrot is Kiwi", "my hamster is Nibbles",
	"my rabbit is Clover", "my goldfish is Bubbles", "my turtle is Shelly", "my pony is Comet"}

// faithfulPets answers with ~600 words, and folds with every fact it was shown.
var faithfulPets = llmtest.FaithfulModel(regexp.MustCompile(`my \w+ is \w+`),
	strings.Repeat("the quick brown fox jumps over the lazy dog and ", 55))

// smallWindowTurn is one turn of the chat: what was typed, the facts typed before it,
// and the text of every message of the request the model got for its reply.
type smallWindowTurn struct {
	typed string
	said  []string
	sent  string
}

// smallWindowChat types the facts and then "What are my pets called?" into the
// composer of a chat whose model has a 4,096-token window (typed "fake-model
// window=4096" with the provider's models), the fake model answering with model. It
// returns each turn and the side panel's context meter after the last one, by zone.
func smallWindowChat(t *testing.T, model func(llmtest.ChatRequest) llmtest.Reply) ([]smallWindowTurn, map[string]string, *testEnv) {
	ctx, problems := browsertest.New(t, 1200, 900)
	env := newTestEnv(t)
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "fake-model window=4096", "")
	env.llm.SetHandler(model)
	id := admin.newSession()

	steps, wait := browserSteps(t, ctx), jsWait
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

	var turns []smallWindowTurn
	var said []string
	for i, q := range append(smallWindowPets, "What are my pets called?") {
		before := len(env.llm.Requests())
		steps("turn "+q,
			chromedp.SendKeys(chromedp.CSS(`[data-testid=composer]`), "Note: "+q+"."),
			chromedp.KeyEvent(kb.Enter),
			wait(fmt.Sprintf(`document.querySelector("#msg-%d")?.dataset.status === "complete"`, 2*(i+1))),
		)
		// A fold may run after the reply; the next turn starts from its summary.
		testkit.Eventually(t, 20*time.Second, "the chat to be idle", func() bool { return !env.agent.Busy(id) })
		turn := smallWindowTurn{typed: q, said: append([]string(nil), said...)}
		for _, r := range env.llm.Requests()[before:] {
			if !llmtest.IsFold(r.Chat) {
				for _, m := range r.Chat.Messages {
					turn.sent += m.Content + "\n"
				}
				break
			}
		}
		if turn.sent == "" {
			t.Fatalf("turn %d: the model received no reply request", i+1)
		}
		turns = append(turns, turn)
		said = append(said, q)
	}

	steps("open the side panel",
		chromedp.Click(chromedp.CSS(`[data-testid=side-toggle]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=context-meter]`)),
		wait(`document.querySelectorAll("[data-testid=meter-zone]").length > 0`),
	)
	zones, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](`Object.fromEntries([...document.querySelectorAll("[data-testid=meter-zone]")].map(z => [z.dataset.zone, z.querySelector(".zone-usage").textContent.trim()]))`))
	if err != nil {
		t.Fatalf("read the meter: %v", err)
	}
	shot(t, ctx, "small-window-meter")
	problems.Check(t)
	return turns, zones, env
}

// TestBrowserSmallWindowKeepsEveryFact is issue 10's small-window chat in Chromium:
// eight short facts, each answered with ~600 words, then "What are my pets called?".
// Every request the fake model receives for a reply carries each fact said so far,
// verbatim or in the summary, and the context meter shows the summary and no dropped
// turns.
func TestBrowserSmallWindowKeepsEveryFact(t *testing.T) {
	turns, zones, env := smallWindowChat(t, faithfulPets)
	for i, turn := range turns {
		for _, f := range turn.said {
			if !strings.Contains(turn.sent, f) {
				t.Errorf("turn %d (%q): %q is in neither the request nor its summary", i+1, turn.typed, f)
			}
		}
	}
	folds := 0
	for _, r := range env.llm.Requests() {
		if llmtest.IsFold(r.Chat) {
			folds++
		}
	}
	if folds == 0 {
		t.Fatal("no summary fold ran: the window did not bind, so the test shows nothing")
	}
	// The last request: the first fact is in the summary, no longer a turn of its own.
	var inSummary bool
	for _, m := range env.llm.LastRequest().Chat.Messages {
		inSummary = inSummary || (m.Role != "user" && m.Role != "assistant" && strings.Contains(m.Content, "my cat is Pixel"))
	}
	if !inSummary {
		t.Errorf("the last request carries the first fact in no summary (system) message")
	}
	if u := zones["summary"]; u == "" || strings.HasPrefix(u, "0") {
		t.Errorf("the meter's summary row is %q (zones %v)", u, zones)
	}
	if u, ok := zones["dropped"]; ok && !strings.HasPrefix(u, "0") {
		t.Errorf("the meter shows dropped turns: %q (zones %v)", u, zones)
	}
}

// TestBrowserSmallWindowFailedFoldShowsDropped: when every summary fold fails, turns
// that no longer fit are not silently gone: the context meter shows them as dropped.
func TestBrowserSmallWindowFailedFoldShowsDropped(t *testing.T) {
	turns, zones, _ := smallWindowChat(t, func(r llmtest.ChatRequest) llmtest.Reply {
		if llmtest.IsFold(r) {
			return llmtest.Reply{Status: 500}
		}
		return faithfulPets(r)
	})
	if last := turns[len(turns)-1]; strings.Contains(last.sent, "my cat is Pixel") {
		t.Fatalf("the first fact still fits the last request, so nothing was dropped to show")
	}
	if u := zones["dropped"]; u == "" || strings.HasPrefix(u, "0") {
		t.Errorf("the meter's dropped row is %q (zones %v)", u, zones)
	}
}
