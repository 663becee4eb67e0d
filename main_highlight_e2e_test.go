package main

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"atrium/internal/browsertest"
	"atrium/internal/llm/llmtest"
)

// highlightCode is the code of the reply below: Go with a keyword, a string that
// closes the <pre> and opens a script, which must stay text.
const highlightCode = "func main() {\n\tfmt.Println(\"</pre><script>window.__xss = 1</script>\")\n}\n"

// TestEndToEndHighlight: a streamed reply's Go block is highlighted with coloured
// spans, in different colours for the light and the dark scheme (the system's, and the
// theme chosen over it), its hostile string stays text, and Copy copies the plain code.
func TestEndToEndHighlight(t *testing.T) {
	ctx, problems := browsertest.New(t, 1100, 800)
	fake := llmtest.NewServer(t)
	fake.SetModels("fake-model")
	fake.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		return llmtest.Reply{Text: llmtest.Words("Here:\n\n```go\n" + highlightCode + "```\n\nDone.\n"), ChunkDelay: 5 * time.Millisecond}
	})
	a := startApp(t, map[string]string{"ATRIUM_GENERATE_TITLES": "false"})
	run := stepRunner(t, ctx)
	setUpInBrowser(run, a, fake)

	const keyword = `article[data-role=assistant][data-status=complete] .code pre code.language-go span.kd`
	run("send",
		chromedp.Navigate(a.URL+"/"),
		chromedp.Click(chromedp.CSS(`[data-testid=new-chat-main]`)),
		sendSteps("show me go code"),
		chromedp.WaitVisible(chromedp.CSS(keyword)),
	)
	var spans int
	var word string
	var xss bool
	run("read block",
		into(&spans, chromedp.Evaluate[int](`document.querySelectorAll('article[data-role=assistant] .code pre span').length`)),
		into(&word, chromedp.Text(chromedp.CSS(keyword))),
		into(&xss, chromedp.Evaluate[bool](`window.__xss !== undefined || !!document.querySelector('article[data-role=assistant] script')`)),
	)
	if spans < 5 || word != "func" || xss {
		t.Errorf("highlighted block: %d spans, keyword %q, script ran or present: %v", spans, word, xss)
	}

	colour := func(system, theme string) string {
		t.Helper()
		if _, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: system}}}); err != nil {
			t.Fatal(err)
		}
		var c string
		run("colour "+system+" "+theme,
			chromedp.Evaluate[chromedp.Void](`(t => t ? document.documentElement.dataset.theme = t : delete document.documentElement.dataset.theme)(`+"'"+theme+"'"+`)`),
			into(&c, chromedp.Evaluate[string](`getComputedStyle(document.querySelector(`+"'"+keyword+"'"+`)).color`)),
		)
		return c
	}
	plain := func() string {
		var c string
		run("text colour", into(&c, chromedp.Evaluate[string](`getComputedStyle(document.querySelector('article[data-role=assistant] .code pre code')).color`)))
		return c
	}
	lightSys, darkSys := colour("light", ""), colour("dark", "")
	if lightSys == darkSys {
		t.Errorf("keyword colour %s in both the light and the dark scheme", lightSys)
	}
	if p := plain(); p == darkSys {
		t.Errorf("keyword has the plain text colour %s in the dark scheme", p)
	}
	if got := colour("dark", "light"); got != lightSys {
		t.Errorf("theme light on a dark system: keyword %s, want the light %s", got, lightSys)
	}
	if got := colour("light", "dark"); got != darkSys {
		t.Errorf("theme dark on a light system: keyword %s, want the dark %s", got, darkSys)
	}
	if p := plain(); p == darkSys {
		t.Errorf("keyword has the plain text colour %s with theme dark", p)
	}

	// Copy puts the code on the clipboard, not the markup.
	if _, err := chromedp.Call(ctx, emulation.SetFocusEmulationEnabled, emulation.SetFocusEmulationEnabledParams{Enabled: true}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"clipboard-read", "clipboard-write"} {
		if _, err := chromedp.CallBrowser(ctx, browser.SetPermission, browser.SetPermissionParams{
			Permission: &browser.PermissionDescriptor{Name: name, AllowWithoutSanitization: true},
			Setting:    browser.PermissionSettingGranted, Origin: a.URL}); err != nil {
			t.Fatal(err)
		}
	}
	var copied string
	run("copy",
		chromedp.Evaluate[chromedp.Void](`navigator.clipboard.writeText("-")`, chromedp.EvalAwaitPromise),
		chromedp.Click(chromedp.CSS(`article[data-role=assistant] .code [data-copy]`)),
		chromedp.Poll[chromedp.Void](`document.querySelector('article[data-role=assistant] .code [data-copy]').textContent !== "Copy"`),
		into(&copied, chromedp.Evaluate[string](`navigator.clipboard.readText()`, chromedp.EvalAwaitPromise)),
	)
	if copied != highlightCode {
		t.Errorf("Copy copied %q, want the code %q", copied, highlightCode)
	}
	if strings.Contains(copied, "<span") {
		t.Errorf("Copy copied markup")
	}
	problems.Check(t)
}
