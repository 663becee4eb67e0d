package main

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"atrium/internal/browsertest"
	"atrium/internal/llm/llmtest"
	"atrium/internal/mcp/oauthtest"
)

// TestEndToEndMCPOAuth: an admin adds an OAuth-protected MCP server (mcp-go's server
// behind a test authorization server), sees "needs authorisation", clicks Connect,
// approves on the provider's consent page, comes back to Atrium's callback and sees
// the server ready; a chat then calls its tool with the token Atrium obtained.
func TestEndToEndMCPOAuth(t *testing.T) {
	as := oauthtest.Start(t)
	ctx, problems := browsertest.New(t, 1200, 900)
	fake := llmtest.NewServer(t)
	fake.SetModels("fake-model")
	fake.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" {
			return llmtest.Reply{Text: llmtest.Words("The provider says: " + last.Content)}
		}
		for _, tool := range req.Tools {
			if tool.Name == "prov__whoami" {
				return llmtest.Reply{ToolCalls: []llmtest.ToolCall{
					{ID: "call_who", Name: "prov__whoami", Arguments: `{"greeting":"hello from the browser"}`}}}
			}
		}
		return llmtest.Reply{Text: []string{"No whoami tool is offered."}}
	})
	a := startApp(t, nil)
	run := stepRunner(t, ctx)
	setUpInBrowser(run, a, fake)

	add := `form[data-testid=mcp-add-form] `
	entry := `[data-testid=mcp-entry][data-server=prov] `
	server := `[data-testid=mcp-server][data-server=prov]`
	run("add the OAuth-protected server",
		chromedp.Navigate(a.URL+"/settings/mcp"),
		chromedp.WaitVisible(chromedp.CSS(add+`[name=name]`)),
		chromedp.SendKeys(chromedp.CSS(add+`[name=name]`), "prov"),
		chromedp.SetValue(chromedp.CSS(add+`[name=transport]`), "http"),
		chromedp.SetValue(chromedp.CSS(add+`[name=url]`), as.URL),
		chromedp.Click(chromedp.CSS(add+`[data-testid=mcp-add]`)),
		chromedp.WaitVisible(chromedp.CSS(server+`[data-state=unauthorized] [data-testid=mcp-needs-auth]`)),
		chromedp.WaitVisible(chromedp.CSS(entry+`[data-testid=mcp-connect]`)),
	)
	var tools int
	run("connect through the provider's consent page",
		chromedp.Click(chromedp.CSS(entry+`[data-testid=mcp-connect]`)),
		chromedp.WaitVisible(chromedp.CSS("#approve")),
		chromedp.Click(chromedp.CSS("#approve")),
		chromedp.WaitVisible(chromedp.CSS(server+`[data-state=ready]`)),
		chromedp.WaitReady(chromedp.CSS(server+` [data-testid=mcp-tool][data-tool=whoami]`)),
		chromedp.WaitNotVisible(chromedp.CSS(entry+`[data-testid=mcp-connect]`)),
		into(&tools, chromedp.Evaluate[int](`document.querySelectorAll('[data-server=prov] [data-testid=mcp-tool]').length`)),
	)
	if tools != 1 {
		t.Errorf("the server lists %d tools, want 1", tools)
	}

	var final string
	run("a chat calls the tool with the token",
		chromedp.Navigate(a.URL+"/"),
		chromedp.Click(chromedp.CSS(`[data-testid=new-chat-main]`)),
		sendSteps("who am I?"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=tool-card][data-tool=prov__whoami][data-status=ok]`)),
		chromedp.WaitVisible(chromedp.CSS(`#messages article[data-role=assistant][data-status=complete]:last-of-type .md p`)),
		into(&final, chromedp.Text(chromedp.CSS(`#messages article[data-role=assistant]:last-of-type .md`))),
	)
	if !strings.Contains(final, "signed in as tester; hello from the browser") {
		t.Errorf("final answer %q does not carry the tool's result", final)
	}
	if as.Exchanges.Load() != 1 || as.Rejected.Load() != 0 {
		t.Errorf("code exchanges %d, refused requests %d", as.Exchanges.Load(), as.Rejected.Load())
	}
	problems.Check(t)
}
