package main

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"atrium/internal/browsertest"
	"atrium/internal/llm/llmtest"
)

const markdownReply = "# Plan\n\nHello **world**, this is *rendered*.\n\n- one\n- two\n\n```go\nfmt.Println(1)\n```\n"

const hostileReply = "<script>window.__xss = 1</script>\n\n" +
	"[click me](javascript:window.__xss=2) and <img src=x onerror=\"window.__xss=3\"> done.\n"

// fakeModel answers by keyword in the user's last message.
func fakeModel(t *testing.T) *llmtest.Server {
	fake := llmtest.NewServer(t)
	fake.SetModels("fake-model")
	fake.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		last := req.LastUser()
		switch {
		case strings.Contains(last, "markdown"):
			return llmtest.Reply{Text: llmtest.Words(markdownReply), ChunkDelay: 5 * time.Millisecond}
		case strings.Contains(last, "long"):
			return llmtest.Reply{Text: llmtest.Words(strings.Repeat("lorem ipsum ", 300)), ChunkDelay: 20 * time.Millisecond}
		case strings.Contains(last, "hostile"):
			return llmtest.Reply{Text: llmtest.Words(hostileReply)}
		}
		return llmtest.Reply{Text: []string{"ok"}}
	})
	return fake
}

// TestEndToEndChat drives the real server in Chromium: first-run setup and login, a
// provider added in settings, a streamed markdown reply, Stop mid-stream, reload,
// hostile model output rendered inert, and another user's 404 on the session URL.
func TestEndToEndChat(t *testing.T) {
	ctx, problems := browsertest.New(t, 1100, 800)
	fake := fakeModel(t)
	a := startApp(t, nil)

	run := stepRunner(t, ctx)

	// 1. First run: the setup page creates the admin, who is logged in; then log out
	// and in; the admin points Atrium at the (fake) model in settings.
	setUpInBrowser(run, a, fake)
	var hint string
	run("key hint", into(&hint, chromedp.Text(chromedp.CSS(`[data-testid=key-hint]`))))
	if strings.Contains(hint, "secret") || !strings.Contains(hint, "9876") {
		t.Errorf("key hint %q: want only the last characters", hint)
	}

	// 2. A new chat; the streamed reply appears as rendered markdown.
	var sessionURL string
	run("new chat and send",
		chromedp.Navigate(a.URL+"/"),
		chromedp.Click(chromedp.CSS(`[data-testid=new-chat-main]`)),
		sendSteps("show me some markdown"),
		chromedp.WaitVisible(chromedp.CSS(`article[data-role=assistant][data-status=complete] .md h1`)),
		into(&sessionURL, chromedp.Location()),
	)
	var h1, strong string
	var items, copyButtons int
	run("read reply",
		into(&h1, chromedp.Text(chromedp.CSS(`article[data-role=assistant] .md h1`))),
		into(&strong, chromedp.Text(chromedp.CSS(`article[data-role=assistant] .md strong`))),
		into(&items, chromedp.Evaluate[int](`document.querySelectorAll('article[data-role=assistant] .md li').length`)),
		into(&copyButtons, chromedp.Evaluate[int](`document.querySelectorAll('article[data-role=assistant] .code [data-copy]').length`)),
	)
	if h1 != "Plan" || strong != "world" || items != 2 || copyButtons != 1 {
		t.Errorf("rendered reply: h1=%q strong=%q items=%d copy buttons=%d", h1, strong, items, copyButtons)
	}
	if len(fake.Requests()) == 0 || fake.LastRequest().Header.Get("Authorization") != "Bearer sk-e2e-secret-9876" {
		t.Errorf("the provider did not get the configured key")
	}

	// 3. Stop mid-stream keeps the partial reply, marked stopped.
	var partial string
	run("stop",
		sendSteps("write something long"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=stop]`)),
		chromedp.Poll[chromedp.Void](`document.querySelector('#msg-live') && document.querySelector('#msg-live').textContent.includes('lorem ipsum lorem')`),
		chromedp.Click(chromedp.CSS(`[data-testid=stop]`)),
		chromedp.WaitVisible(chromedp.CSS(`article[data-status=stopped] [data-testid=stopped-badge]`)),
		into(&partial, chromedp.Text(chromedp.CSS(`article[data-status=stopped] .md`))),
	)
	if n := strings.Count(partial, "lorem"); n == 0 || n >= 300 {
		t.Errorf("stopped reply has %d of 300 words; want a non-empty part", n)
	}

	screenshot(t, ctx, "chat-desktop")

	// 4. Reload: the history is there, from the database.
	var roles []string
	run("reload",
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=stopped-badge]`)),
		into(&roles, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#messages article[data-testid=message]')].map(a => a.dataset.role + ':' + a.dataset.status)`)),
	)
	want := "user:complete assistant:complete user:complete assistant:stopped"
	if got := strings.Join(roles, " "); got != want {
		t.Errorf("after reload the messages are %q, want %q", got, want)
	}

	// 6. Hostile model output is rendered inert.
	var xss, scripts, jsLinks int
	var text string
	run("hostile reply",
		sendSteps("say something hostile"),
		chromedp.WaitVisible(chromedp.CSS(`#messages article[data-role=assistant][data-status=complete]:last-of-type`)),
		chromedp.Poll[chromedp.Void](`document.querySelectorAll('#messages article[data-role=assistant]').length === 3 && !document.querySelector('#msg-live')`),
		chromedp.Sleep(100*time.Millisecond), // give an injected handler a chance to fire
		into(&xss, chromedp.Evaluate[int](`window.__xss === undefined ? 0 : window.__xss`)),
		into(&scripts, chromedp.Evaluate[int](`document.querySelectorAll('#messages script, #messages img[onerror]').length`)),
		into(&jsLinks, chromedp.Evaluate[int](`[...document.querySelectorAll('#messages a')].filter(a => /^\s*javascript:/i.test(a.getAttribute('href') || '')).length`)),
		into(&text, chromedp.Text(chromedp.CSS(`#messages article[data-role=assistant]:last-of-type .md`))),
	)
	if xss != 0 || scripts != 0 || jsLinks != 0 {
		t.Errorf("hostile reply was not inert: __xss=%d scripts=%d javascript links=%d", xss, scripts, jsLinks)
	}
	if !strings.Contains(text, "<script>") {
		t.Errorf("the script tag should show as text, got %q", text)
	}

	// A failed htmx request says why in the notice area (the server answers in text).
	var ignored any
	run("htmx error is shown",
		into(&ignored, chromedp.Evaluate[any](`htmx.ajax('POST', location.pathname + '/rename', {values: {title: '   '}, swap: 'none'}), null`)),
		chromedp.Poll[chromedp.Void](`document.getElementById('notice').textContent.includes('A title needs some text')`),
	)

	// 5. A second user opening the first user's session URL gets 404.
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
	var status string
	run("foreign session",
		chromedp.Navigate(sessionURL),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=error-page]`)),
		into(&status, chromedp.Text(chromedp.CSS(`[data-testid=error-status]`))),
	)
	if !strings.Contains(status, "404") {
		t.Errorf("bob sees status %q on alice's session, want 404", status)
	}
	u, _ := url.Parse(sessionURL)
	if body, code := bobClient(t, a.URL).get(u.Path); code != 404 || strings.Contains(body, "lorem") {
		t.Errorf("HTTP GET of a foreign session: %d", code)
	}

	// 7. Alice deletes bob on the users page: the confirmation says what goes, and
	// bob's login ends with him.
	bobHTTP := bobClient(t, a.URL)
	row := `tr[data-username=bob] `
	var what string
	var rows int
	run("delete bob",
		chromedp.Click(chromedp.CSS(`[data-testid=logout]`)),
		loginSteps("alice", "correct horse battery"),
		chromedp.Navigate(a.URL+"/settings/users"),
		chromedp.Click(chromedp.CSS(row+`[data-testid=user-delete-open]`)),
		chromedp.WaitVisible(chromedp.CSS(row+`[data-testid=user-delete-what]`)),
		into(&what, chromedp.Text(chromedp.CSS(row+`[data-testid=user-delete-what]`))),
		chromedp.SendKeys(chromedp.CSS(row+`[data-testid=user-delete-confirm]`), "bob"),
		chromedp.Click(chromedp.CSS(row+`[data-testid=user-delete]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=form-notice]`)),
		into(&rows, chromedp.Evaluate[int](`document.querySelectorAll('tr[data-username=bob]').length`)),
	)
	for _, w := range []string{"chats and messages", "memories", "runs", "logins", "data key", "cannot be undone"} {
		if !strings.Contains(what, w) {
			t.Errorf("the delete confirmation does not name %q: %q", w, what)
		}
	}
	if rows != 0 {
		t.Error("bob is still listed after his deletion")
	}
	if _, code := bobHTTP.get("/"); code != 303 {
		t.Errorf("bob's login after his deletion: GET / answered %d, want 303 to the login page", code)
	}

	// The 404 of the foreign session and the 400 of the deliberate bad rename are expected.
	problems.Check(t, "404 (Not Found)", "400 (Bad Request)", "Response Status Error Code 400")
}

// bobClient logs in as bob over plain HTTP.
func bobClient(t *testing.T, base string) *httpClient {
	h := newHTTPClient(t, base)
	tok := h.csrf("/login")
	resp, _ := h.post("/login", url.Values{"_csrf": {tok}, "username": {"bob"}, "password": {"bob password 1"}})
	if resp.StatusCode != 303 {
		t.Fatalf("bob login: %d", resp.StatusCode)
	}
	return h
}

// into runs a and stores its value in dst, so that value-returning actions can sit in a
// list of steps.
func into[T any](dst *T, a chromedp.Action[T]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		v, err := a(ctx, t)
		*dst = v
		return chromedp.Void{}, err
	}
}

// screenshot saves a PNG of the page into $E2E_SCREENSHOTS, when set, for a person to
// look at; it checks nothing.
func screenshot(t *testing.T, ctx context.Context, name string) {
	dir := os.Getenv("E2E_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644)
	}
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
	}
}

// stepRunner runs browser steps with a timeout, failing the test with the step's name.
func stepRunner(t *testing.T, ctx context.Context) func(string, ...chromedp.Action[chromedp.Void]) {
	return func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := chromedp.Do(c, actions...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
}

func loginSteps(user, pw string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=login-form]`)),
		chromedp.SendKeys(chromedp.CSS(`#login-username`), user),
		chromedp.SendKeys(chromedp.CSS(`#login-password`), pw),
		chromedp.Click(chromedp.CSS(`[data-testid=login-submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=new-chat]`)),
	)
}

func sendSteps(text string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=composer]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=composer]`), text),
		chromedp.KeyEvent(kb.Enter),
	)
}

// setUpInBrowser creates the admin "alice" on the setup page, logs out and in again,
// and adds the fake model as a provider in settings.
func setUpInBrowser(run func(string, ...chromedp.Action[chromedp.Void]), a *runningApp, fake *llmtest.Server) {
	run("setup",
		chromedp.Navigate(a.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=setup-form]`)),
		chromedp.SendKeys(chromedp.CSS(`#setup-username`), "alice"),
		chromedp.SendKeys(chromedp.CSS(`#setup-password`), "correct horse battery"),
		chromedp.SendKeys(chromedp.CSS(`#setup-password2`), "correct horse battery"),
		chromedp.Click(chromedp.CSS(`[data-testid=setup-submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=new-chat-main]`)),
	)
	run("logout and login", chromedp.Click(chromedp.CSS(`[data-testid=logout]`)), loginSteps("alice", "correct horse battery"))

	add := `form[data-testid=provider-add-form] `
	run("add provider",
		chromedp.Navigate(a.URL+"/settings/providers"),
		chromedp.WaitVisible(chromedp.CSS(add+`[name=name]`)),
		chromedp.SendKeys(chromedp.CSS(add+`[name=name]`), "Fake"),
		chromedp.SetValue(chromedp.CSS(add+`[name=base_url]`), fake.URL()),
		chromedp.SendKeys(chromedp.CSS(add+`[name=api_key]`), "sk-e2e-secret-9876"),
		chromedp.Click(chromedp.CSS(add+`[data-testid=provider-add]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=provider][data-provider-name=Fake]`)),
	)
}

// TestEndToEndAgentTools: a tool-call card appears, then the final answer; the task the
// model set survives a reload in the task panel; the context meter shows the last step.
func TestEndToEndAgentTools(t *testing.T) {
	ctx, problems := browsertest.New(t, 1200, 900)
	fake := llmtest.NewServer(t)
	fake.SetModels("fake-model")
	fake.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" {
			return llmtest.Reply{Text: llmtest.Words("Done: the task is set and the sum is 42."), ChunkDelay: 5 * time.Millisecond}
		}
		return llmtest.Reply{ToolCalls: []llmtest.ToolCall{
			{ID: "call_task", Name: "task_update", Arguments: `{"goal":"Plan a trip to Lisbon","stage":"research"}`},
			{ID: "call_calc", Name: "calculator", Arguments: `{"expression":"40 + 2"}`},
		}}
	})
	a := startApp(t, nil)
	run := stepRunner(t, ctx)
	setUpInBrowser(run, a, fake)

	var calcStatus, finalText, goal, stage string
	var cards int
	run("tool turn",
		chromedp.Navigate(a.URL+"/"),
		chromedp.Click(chromedp.CSS(`[data-testid=new-chat-main]`)),
		sendSteps("plan my trip and add 40 and 2"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=tool-card][data-tool=calculator][data-status=ok]`)),
		chromedp.WaitVisible(chromedp.CSS(`article[data-role=assistant][data-status=complete]:last-of-type .md p`)),
		into(&cards, chromedp.Evaluate[int](`document.querySelectorAll('[data-testid=tool-card]').length`)),
		into(&calcStatus, chromedp.Text(chromedp.CSS(`[data-testid=tool-card][data-tool=calculator]`))),
		into(&finalText, chromedp.Text(chromedp.CSS(`#messages article[data-role=assistant]:last-of-type .md`))),
		chromedp.Click(chromedp.CSS(`[data-testid=side-toggle]`)), // collapsed by default
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=context-meter] [data-zone], [data-testid=context-meter] .meter-zone`)),
	)
	if cards != 2 || !strings.Contains(calcStatus, "calculator") || !strings.Contains(finalText, "sum is 42") {
		t.Errorf("cards=%d calculator card %q final %q", cards, calcStatus, finalText)
	}
	screenshot(t, ctx, "agent-tools")

	run("reload keeps the task",
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=tool-card][data-tool=task_update][data-status=ok]`)),
		into(&goal, chromedp.Text(chromedp.CSS(`[data-testid=task-goal]`), chromedp.NodeReady)),
		into(&stage, chromedp.Text(chromedp.CSS(`[data-testid=task-stage]`), chromedp.NodeReady)),
		chromedp.WaitReady(chromedp.CSS(`[data-testid=context-meter] [data-testid=meter-zone]`)), // from the recorded run
	)
	if !strings.Contains(goal, "Plan a trip to Lisbon") || !strings.Contains(stage, "research") {
		t.Errorf("after reload the task panel shows goal %q stage %q", goal, stage)
	}
	problems.Check(t)
}
