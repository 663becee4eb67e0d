package mcp_test

import (
	"context"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"atrium/internal/llm"
	atriummcp "atrium/internal/mcp"
)

// BenchmarkMCPCallOverhead compares one call of server-everything's echo tool
// over stdio made with a plain mcp-go client (direct) and made through
// Atrium's registry — validation, timeout, supervisor — (atrium).
//
//	go test -run '^$' -bench MCPCallOverhead -benchtime 2000x ./internal/mcp
func BenchmarkMCPCallOverhead(b *testing.B) {
	node := needNode(b)

	b.Run("direct", func(b *testing.B) {
		c, err := client.NewStdioMCPClient(node, nil, everythingJS(), "stdio")
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		if _, err := c.Initialize(ctx, mcp.InitializeRequest{}); err != nil {
			b.Fatal(err)
		}
		req := mcp.CallToolRequest{}
		req.Params.Name = "echo"
		req.Params.Arguments = map[string]any{"message": "hello"}
		b.ResetTimer()
		for b.Loop() {
			res, err := c.CallTool(ctx, req)
			if err != nil || res.IsError {
				b.Fatalf("echo: %v %+v", err, res)
			}
		}
	})

	b.Run("atrium", func(b *testing.B) {
		h := newHarness(b)
		h.sup.Apply(context.Background(), []atriummcp.ServerConfig{everythingStdio(node, "everything")})
		h.waitState(b, "everything", 30*time.Second, atriummcp.StateReady)
		call := llm.ToolCall{ID: "c", Name: "everything__echo", Arguments: `{"message":"hello"}`}
		ctx := context.Background()
		b.ResetTimer()
		for b.Loop() {
			res := h.reg.Dispatch(ctx, "s", 1, call)
			if res.IsError {
				b.Fatalf("echo: %+v", res)
			}
		}
	})
}
