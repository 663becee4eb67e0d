package web_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"atrium/internal/browsertest"
	"atrium/internal/llm/llmtest"
)

// TestBrowserEditRegenerateRetry: in Chromium against the real server, a user message
// is edited in place (Save & send), the chat shows the new branch with ‹ 2/2 ›, the
// pager flips back to the first version and a reload keeps it; Regenerate adds a version
// of the reply; a reply that failed (scripted model error) offers Retry, whose request
// carries exactly the branch on screen.
func TestBrowserEditRegenerateRetry(t *testing.T) {
	ctx, problems := browsertest.New(t, 1200, 900)
	env := newTestEnv(t)
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "fake-model", "")
	id := admin.newSession()
	steps, wait := browserSteps(t, ctx), jsWait
	// The chat as shown: "role:text" of each message, in order.
	shown := `[...document.querySelectorAll("#messages > article.msg")].map(m =>
		m.dataset.role + ":" + (m.querySelector(":scope > .text, :scope > .md")?.textContent.trim() ?? "")).join("|")`
	label := func(role string) string {
		return `[...document.querySelectorAll("#messages > article.msg[data-role=` + role + `] [data-testid=version-label]")].map(l => l.textContent).join()`
	}
	htmxIdle := wait(`!document.querySelector(".htmx-added, .htmx-request, .htmx-settling, .htmx-swapping")`)

	env.llm.Enqueue(llmtest.Reply{Text: llmtest.Words("Nice cat.")})
	steps("login and send",
		chromedp.Navigate(env.ts.URL+"/login"),
		chromedp.WaitVisible(chromedp.CSS(`#login-username`)),
		chromedp.SendKeys(chromedp.CSS(`#login-username`), "admin"),
		chromedp.SendKeys(chromedp.CSS(`#login-password`), testPassword),
		chromedp.Click(chromedp.CSS(`[data-testid=login-submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`#chat-search`)),
		chromedp.Navigate(env.ts.URL+"/s/"+id),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=composer]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=composer]`), "My cat is Pixel"),
		chromedp.KeyEvent(kb.Enter),
		wait(shown+` === "user:My cat is Pixel|assistant:Nice cat."`),
		wait(`document.querySelector("#messages > article.msg[data-role=assistant]").dataset.status === "complete"`),
		wait(`!!document.querySelector("[data-testid=run-link]")`), // the run is over
	)

	env.llm.Enqueue(llmtest.Reply{Text: llmtest.Words("Nice dog.")})
	steps("edit and send",
		htmxIdle,
		chromedp.Click(chromedp.CSS(`#messages > article.msg[data-role=user] [data-testid=edit-open]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=edit-text]`)),
		wait(`document.querySelector("[data-testid=edit-text]").value === "My cat is Pixel"`),
		// Cancel puts the text back and closes the editor.
		chromedp.SendKeys(chromedp.CSS(`[data-testid=edit-text]`), " and more"),
		chromedp.Click(chromedp.CSS(`[data-testid=edit-cancel]`)),
		wait(`!document.querySelector("[data-testid=edit]").open`),
		chromedp.Click(chromedp.CSS(`#messages > article.msg[data-role=user] [data-testid=edit-open]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=edit-text]`)),
		wait(`document.querySelector("[data-testid=edit-text]").value === "My cat is Pixel"`),
		chromedp.SetValue(chromedp.CSS(`[data-testid=edit-text]`), "My dog is Rex"),
		chromedp.Click(chromedp.CSS(`[data-testid=edit-save]`)),
		wait(shown+` === "user:My dog is Rex|assistant:Nice dog."`),
		wait(label("user")+` === "2/2"`),
		wait(`!!document.querySelector("[data-testid=run-link]")`),
	)
	steps("flip back to 1/2",
		htmxIdle,
		chromedp.Click(chromedp.CSS(`[data-testid=version-prev]`)),
		wait(shown+` === "user:My cat is Pixel|assistant:Nice cat."`),
		wait(label("user")+` === "1/2" && document.querySelector("[data-testid=version-prev]").disabled`),
	)
	steps("a reload keeps the branch",
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=composer]`)),
		wait(shown+` === "user:My cat is Pixel|assistant:Nice cat."`),
		wait(label("user")+` === "1/2"`),
	)

	env.llm.Enqueue(llmtest.Reply{Text: llmtest.Words("Pixel is a fine name.")})
	steps("regenerate the reply",
		htmxIdle,
		chromedp.Click(chromedp.CSS(`[data-testid=regenerate]`)),
		wait(shown+` === "user:My cat is Pixel|assistant:Pixel is a fine name."`),
		wait(label("assistant")+` === "2/2" && `+label("user")+` === "1/2"`),
		wait(`!!document.querySelector("[data-testid=run-link]")`),
	)
	if req := env.llm.LastRequest().Chat; strings.Join(conversationOf(req), "|") != "user:My cat is Pixel" {
		t.Fatalf("the regenerate request: %q", conversationOf(req))
	}

	env.llm.Enqueue(llmtest.Reply{Status: 500, ErrorBody: `{"error":{"message":"the model is overloaded"}}`})
	steps("a reply fails",
		chromedp.SendKeys(chromedp.CSS(`[data-testid=composer]`), "And now?"),
		chromedp.KeyEvent(kb.Enter),
		wait(`document.querySelector("#messages > article.msg:last-child")?.dataset.status === "error"`),
		wait(`document.querySelector("#messages > article.msg:last-child [data-testid=message-error]").textContent.includes("overloaded")`),
		wait(`!!document.querySelector("#messages > article.msg:last-child [data-testid=retry]")`),
	)
	env.llm.Enqueue(llmtest.Reply{Text: llmtest.Words("Now it works.")})
	steps("retry",
		htmxIdle,
		chromedp.Click(chromedp.CSS(`#messages > article.msg:last-child [data-testid=retry]`)),
		wait(shown+` === "user:My cat is Pixel|assistant:Pixel is a fine name.|user:And now?|assistant:Now it works."`),
		wait(`document.querySelector("#messages > article.msg:last-child").dataset.status === "complete"`),
		wait(`document.querySelector("#messages > article.msg:last-child [data-testid=version-label]").textContent === "2/2"`),
	)
	if req := env.llm.LastRequest().Chat; strings.Join(conversationOf(req), "|") != "user:My cat is Pixel|assistant:Pixel is a fine name.|user:And now?" {
		t.Fatalf("the retry request: %q", conversationOf(req))
	}
	steps("the failed reply is one flip away",
		htmxIdle,
		chromedp.Click(chromedp.CSS(`#messages > article.msg:last-child [data-testid=version-prev]`)),
		wait(`document.querySelector("#messages > article.msg:last-child").dataset.status === "error"`),
	)
	problems.Check(t)
}

// conversationOf is a request's messages after the system prompt, as "role:content".
func conversationOf(req llmtest.ChatRequest) []string {
	var out []string
	for _, m := range req.Messages {
		if m.Role != "system" {
			out = append(out, m.Role+":"+m.Content)
		}
	}
	return out
}
