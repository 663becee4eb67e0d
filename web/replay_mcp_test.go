package web_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"atrium/internal/llm/llmtest"
	"atrium/internal/trace"
)

// A live replay calls an MCP tool the recorded request offered while its server is
// ready, and refuses it (the server never sees the call) once the server is disabled.
func TestReplayLiveMCPToolOnlyWhenReady(t *testing.T) {
	r := newReplayEnv(t)
	var calls atomic.Int32
	s := mcpserver.NewMCPServer("test", "1.0")
	s.AddTool(mcpgo.NewTool("echo", mcpgo.WithDescription("Echo the text"), mcpgo.WithString("text")),
		func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			calls.Add(1)
			return mcpgo.NewToolResultText("echoed: " + req.GetString("text", "")), nil
		})
	ts := httptest.NewServer(mcpserver.NewStreamableHTTPServer(s))
	t.Cleanup(ts.Close)
	wantStatus(t, r.admin.post("/settings/mcp", url.Values{"name": {"notes"}, "transport": {"http"}, "url": {ts.URL + "/mcp"}}), http.StatusSeeOther)
	r.env.waitMCPState("notes", "ready")
	// A turn whose request offers the server's tool: a replay runs only what was offered.
	r.env.llm.Enqueue(llmtest.Reply{Text: []string{"noted"}})
	r.turn(t, "Echo something")
	if !slices.ContainsFunc(r.env.llm.LastRequest().Chat.Tools, func(t llmtest.Tool) bool { return t.Name == "notes__echo" }) {
		t.Fatal("the turn's request does not offer notes__echo")
	}

	seq := r.modelStep(t, 1)
	same := r.choice(t, "Fake", "fake-model")
	script := func() {
		r.env.llm.Enqueue(
			llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "r1", Name: "notes__echo", Arguments: `{"text":"hi"}`}}},
			llmtest.Reply{Text: []string{"done"}},
		)
	}
	result := func() string {
		for _, m := range r.env.llm.LastRequest().Chat.Messages {
			if m.Role == "tool" && m.ToolCallID == "r1" {
				return m.Content
			}
		}
		return ""
	}

	script()
	r.replay(t, r.admin, seq, same, trace.ResultLive)
	if got := result(); !strings.Contains(got, "echoed: hi") || calls.Load() != 1 {
		t.Fatalf("ready server: result %q after %d calls", got, calls.Load())
	}

	row := r.env.mcpRow("notes")
	wantStatus(t, r.admin.post("/settings/mcp/"+strconv.FormatInt(row.ID, 10)+"/disable", nil), http.StatusSeeOther)
	r.env.waitMCPState("notes", "disabled")
	script()
	r.replay(t, r.admin, seq, same, trace.ResultLive)
	if got := result(); !strings.Contains(got, `The MCP server "notes" is disabled`) || calls.Load() != 1 {
		t.Errorf("disabled server: result %q after %d calls", got, calls.Load())
	}
}
