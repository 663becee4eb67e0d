package web_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"atrium/internal/browsertest"
	"atrium/internal/llm/llmtest"
)

// TestBrowserSearchJumpsToOldMessage: in Chromium against the real server, typing in the
// sidebar's search box shows highlighted results (hostile text inert); clicking one for a
// message far above the chat's latest page opens the chat scrolled to that message,
// highlighted, and it stays there once the websocket's snapshot arrives; Load newer and
// Load older then continue from the window.
func TestBrowserSearchJumpsToOldMessage(t *testing.T) {
	ctx, problems := browsertest.New(t, 1200, 800)
	env := newTestEnv(t)
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "fake-model", "")
	env.llm.Enqueue(llmtest.Reply{Text: llmtest.Words("Noted, the platypus is back.")})
	id := admin.newSession()
	wantStatus(t, admin.post("/s/"+id+"/rename", url.Values{"title": {"Zoo trip"}}), http.StatusOK)
	seedMessages(t, env.db, id, 40, 400)
	appendText(t, env.db, id, "user", "Where did the Platypus go after lunch?") // seq 41
	seedMessages(t, env.db, id, 100, 400)                                       // up to 141
	other := admin.newSession()
	appendText(t, env.db, other, "assistant", `<img src=x onerror="window.__xss=1"><script>window.__xss=2</script> a platypus drawing`)

	steps, wait := browserSteps(t, ctx), jsWait
	steps("login",
		chromedp.Navigate(env.ts.URL+"/login"),
		chromedp.WaitVisible(chromedp.CSS(`#login-username`)),
		chromedp.SendKeys(chromedp.CSS(`#login-username`), "admin"),
		chromedp.SendKeys(chromedp.CSS(`#login-password`), testPassword),
		chromedp.Click(chromedp.CSS(`[data-testid=login-submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`#chat-search`)),
	)
	steps("type in the search box",
		chromedp.SendKeys(chromedp.CSS(`#chat-search`), "platyp"),
		wait(`document.querySelectorAll("[data-testid=search-hit]").length === 2`),
		wait(`[...document.querySelectorAll("[data-testid=search-hit] mark")].map(m => m.textContent).join() === "platyp,Platyp"`),
		wait(`document.querySelector("[data-testid=search-hit][data-seq='41']").textContent.includes("Zoo trip")`),
		wait(`document.querySelector("[data-testid=search-hit]").textContent.includes('<img src=x onerror="window.__xss=1">')`),
		wait(`window.__xss === undefined && !document.querySelector("#search-results img, #search-results script")`),
	)
	steps("open the old message",
		chromedp.Click(chromedp.CSS(`[data-testid=search-hit][data-seq='41']`)),
		wait(`location.search === "?at=41" && !!document.querySelector("#msg-41.jump-target")`),
		// The websocket's snapshot morphs #messages a moment later: the window must survive it.
		chromedp.Sleep(time.Second),
		wait(`!!document.querySelector("#msg-41.jump-target") && !document.querySelector("#msg-141")`),
		wait(`(() => { const r = document.querySelector("#msg-41").getBoundingClientRect();
			return r.top >= 0 && r.bottom <= window.innerHeight; })()`),
		wait(`!!document.querySelector("[data-testid=load-older]") && !!document.querySelector("[data-testid=load-newer]")`),
	)
	// A message sent now lands at the bottom, below Load newer (the gap is still there).
	steps("send from the window",
		chromedp.SendKeys(chromedp.CSS(`[data-testid=composer]`), "Found it"),
		chromedp.KeyEvent(kb.Enter),
		wait(`!!document.querySelector("#msg-142") && document.querySelector("#msg-143")?.dataset.status === "complete"`),
		wait(`document.querySelector("[data-testid=load-newer]").compareDocumentPosition(document.querySelector("#msg-142")) & Node.DOCUMENT_POSITION_FOLLOWING`),
	)
	// Load newer reaches those again: each message is shown once, in order.
	// A button htmx has swapped in is inert until its settle step processes it (~20 ms,
	// longer on a loaded machine): a click before that does nothing, so wait for htmx to be idle.
	htmxIdle := wait(`!document.querySelector(".htmx-added, .htmx-request, .htmx-settling, .htmx-swapping")`)
	steps("load newer to the end",
		htmxIdle,
		chromedp.Click(chromedp.CSS(`[data-testid=load-newer]`)),
		wait(`!!document.querySelector("#msg-117") && !!document.querySelector("[data-testid=load-newer]")`),
		htmxIdle,
		chromedp.Click(chromedp.CSS(`[data-testid=load-newer]`)),
		wait(`!!document.querySelector("#msg-141") && !document.querySelector("[data-testid=load-newer]")`),
		wait(`[...document.querySelectorAll("#messages > article.msg")].map(m => m.id).join() ===
			Array.from({length: 143 - 15 + 1}, (_, i) => "msg-" + (15 + i)).join()`),
	)
	steps("load older",
		htmxIdle,
		chromedp.Click(chromedp.CSS(`[data-testid=load-older]`)),
		wait(`!!document.querySelector("#msg-1") && document.querySelectorAll("#messages > article.msg").length === 143`),
		wait(`!!document.querySelector("#msg-41.jump-target")`),
	)
	problems.Check(t)
}
