package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"atrium/internal/browsertest"
	"atrium/internal/llm/llmtest"
	"atrium/internal/testkit"
)

// everythingServer returns node and the path of server-everything from testdata/mcp,
// skipping (or failing under E2E_REQUIRED=1) when they are not installed.
func everythingServer(t *testing.T) (node, script string) {
	t.Helper()
	script, _ = filepath.Abs("testdata/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
	node, err := exec.LookPath("node")
	if _, serr := os.Stat(script); err != nil || serr != nil {
		msg := "node or server-everything missing: run npm ci --prefix testdata/mcp"
		if os.Getenv("E2E_REQUIRED") != "" {
			t.Fatal(msg)
		}
		testkit.Skip(t, msg)
	}
	return node, script
}

// addEverythingSteps adds server-everything over stdio in Settings → MCP and waits
// until its card says ready.
func addEverythingSteps(base, node, script string) chromedp.Action[chromedp.Void] {
	add := `form[data-testid=mcp-add-form] `
	return chromedp.Steps(
		chromedp.Navigate(base+"/settings/mcp"),
		chromedp.WaitVisible(chromedp.CSS(add+`[name=name]`)),
		chromedp.SendKeys(chromedp.CSS(add+`[name=name]`), "everything"),
		chromedp.SetValue(chromedp.CSS(add+`[name=transport]`), "stdio"),
		chromedp.SetValue(chromedp.CSS(add+`[name=command]`), node),
		chromedp.SetValue(chromedp.CSS(add+`[name=args]`), script+"\nstdio"),
		chromedp.Click(chromedp.CSS(add+`[data-testid=mcp-add]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=mcp-server][data-server=everything][data-state=ready]`)),
	)
}

// TestEndToEndMCP: an admin adds server-everything in settings and watches it reach
// "ready" with its tools listed; a scripted chat calls its echo tool and shows the card;
// disabling the server removes its tools from the page and from the model's offer.
func TestEndToEndMCP(t *testing.T) {
	node, script := everythingServer(t)
	ctx, problems := browsertest.New(t, 1200, 900)
	fake := llmtest.NewServer(t)
	fake.SetModels("fake-model")
	fake.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" {
			return llmtest.Reply{Text: llmtest.Words("The echo tool answered: " + last.Content)}
		}
		for _, tool := range req.Tools {
			if tool.Name == "everything__echo" {
				return llmtest.Reply{ToolCalls: []llmtest.ToolCall{
					{ID: "call_echo", Name: "everything__echo", Arguments: `{"message":"hello from the browser"}`}}}
			}
		}
		return llmtest.Reply{Text: []string{"No echo tool is offered."}}
	})
	a := startApp(t, nil)
	run := stepRunner(t, ctx)
	setUpInBrowser(run, a, fake)

	server := `[data-testid=mcp-server][data-server=everything]`
	var tools int
	run("add server-everything",
		addEverythingSteps(a.URL, node, script),
		chromedp.WaitReady(chromedp.CSS(server+` [data-testid=mcp-tool][data-tool=echo]`)),
		into(&tools, chromedp.Evaluate[int](`document.querySelectorAll('[data-server=everything] [data-testid=mcp-tool]').length`)),
	)
	if tools < 2 {
		t.Errorf("server-everything lists %d tools", tools)
	}

	var final string
	run("chat calls the echo tool",
		chromedp.Navigate(a.URL+"/"),
		chromedp.Click(chromedp.CSS(`[data-testid=new-chat-main]`)),
		// server-everything offers resources and prompts: the composer offers them.
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=resources-button]`)),
		chromedp.Poll[chromedp.Void](`+document.getElementById("mcp-indicator").dataset.prompts > 0`),
		sendSteps("please echo something"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=tool-card][data-tool=everything__echo][data-status=ok]`)),
		chromedp.WaitVisible(chromedp.CSS(`#messages article[data-role=assistant][data-status=complete]:last-of-type .md p`)),
		into(&final, chromedp.Text(chromedp.CSS(`#messages article[data-role=assistant]:last-of-type .md`))),
	)
	if !strings.Contains(final, "hello from the browser") {
		t.Errorf("final answer %q does not carry the echo result", final)
	}

	run("disable the server",
		chromedp.Navigate(a.URL+"/settings/mcp"),
		chromedp.Click(chromedp.CSS(`[data-testid=mcp-entry][data-server=everything] [data-testid=mcp-disable]`)),
		chromedp.WaitVisible(chromedp.CSS(server+`[data-state=disabled]`)),
		into(&tools, chromedp.Evaluate[int](`document.querySelectorAll('[data-server=everything] [data-testid=mcp-tool]').length`)),
	)
	if tools != 0 {
		t.Errorf("a disabled server still lists %d tools", tools)
	}
	run("the model no longer gets its tools",
		chromedp.Navigate(a.URL+"/"),
		chromedp.Click(chromedp.CSS(`[data-testid=new-chat-main]`)),
		sendSteps("echo again"),
		chromedp.WaitVisible(chromedp.CSS(`#messages article[data-role=assistant][data-status=complete]`)),
		// No ready server offers resources any more.
		chromedp.WaitNotVisible(chromedp.CSS(`[data-testid=resources-button]`)),
	)
	for _, tool := range fake.LastRequest().Chat.Tools {
		if strings.HasPrefix(tool.Name, "everything__") {
			t.Errorf("the model is still offered %s after the server was disabled", tool.Name)
		}
	}
	problems.Check(t)
}
