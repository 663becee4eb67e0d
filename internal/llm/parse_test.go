package llm_test

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"testing"

	"atrium/internal/llm"
	"atrium/internal/llm/llmtest"
)

// TestParseRequestInvertsTheWireBody: a request sent by either provider (a
// conversation with system prompts, tool calls, several tool results in a row and
// a tool schema) is read back from the bytes on the wire as it was built, but for
// what the Anthropic body itself normalises (see ParseRequest). This is what lets
// the trace store a model request once, as its wire body.
func TestParseRequestInvertsTheWireBody(t *testing.T) {
	t.Parallel()
	schema := json.RawMessage(`{"type":"object","properties":{"city":{"type":"string","description":"a \"city\" <name>"}},"required":["city"],"additionalProperties":false}`)
	req := llm.Request{Model: "m-1", Messages: []llm.Message{
		{Role: llm.RoleSystem, Content: "You are Atrium.\nBe brief."},
		{Role: llm.RoleSystem, Content: "Summary: the user likes <b>rain</b> & snow."},
		{Role: llm.RoleUser, Content: "weather in Zürich and Bern?"},
		{Role: llm.RoleAssistant, Content: "Let me look.", ToolCalls: []llm.ToolCall{
			{ID: "c1", Name: "get_weather", Arguments: `{"city":"Zürich"}`},
			{ID: "c2", Name: "get_weather", Arguments: `{"city":"Bern"}`}}},
		{Role: llm.RoleTool, ToolCallID: "c1", Content: `{"temp":3}`},
		{Role: llm.RoleTool, ToolCallID: "c2", Content: "error: \"unknown\""},
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c3", Name: "get_weather", Arguments: `{"city":"Bern"}`}}},
		{Role: llm.RoleTool, ToolCallID: "c3", Content: `{"temp":1}`},
		{Role: llm.RoleAssistant, Content: "3° and 1°."},
		{Role: llm.RoleUser, Content: "thanks"},
	}, Tools: []llm.ToolSpec{{Name: "get_weather", Description: "Current weather", Parameters: schema}}}

	for _, kind := range []string{llm.KindOpenAI, llm.KindAnthropic} {
		t.Run(kind, func(t *testing.T) {
			srv := llmtest.NewServer(t)
			srv.Enqueue(llmtest.Reply{Text: []string{"ok"}})
			p, err := llm.New(llm.Config{Kind: kind, BaseURL: srv.URL(), APIKey: "sk-test-key-0123456789",
				HTTPClient: &http.Client{Transport: llm.CaptureTransport(http.DefaultTransport)}})
			if err != nil {
				t.Fatal(err)
			}
			var sent *llm.HTTPRequest
			ctx := llm.WithCapture(context.Background(), func(h *llm.HTTPRequest) { sent = h })
			if _, err := p.Stream(ctx, req, nil); err != nil {
				t.Fatal(err)
			}
			body, err := sent.RawBody()
			if err != nil {
				t.Fatal(err)
			}
			got, err := llm.ParseRequest(kind, body)
			if err != nil {
				t.Fatal(err)
			}
			want := req
			if kind == llm.KindAnthropic {
				want.MaxTokens = 4096 // the value sent when the request leaves it 0
			}
			// A schema is compared by meaning: the Anthropic body rebuilds it.
			if len(got.Tools) != 1 || !sameJSON(t, got.Tools[0].Parameters, schema) {
				t.Errorf("tools %+v", got.Tools)
			}
			got.Tools[0].Parameters, want.Tools = schema, []llm.ToolSpec{{Name: "get_weather", Description: "Current weather", Parameters: schema}}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("read back\n %+v\nwant\n %+v", got, want)
			}
		})
	}
	if _, err := llm.ParseRequest(llm.KindOpenAI, []byte(`[1]`)); err == nil {
		t.Error("a body that is no request was read")
	}
	if _, err := llm.ParseRequest("gemini", []byte(`{}`)); err == nil {
		t.Error("an unknown format was read")
	}
}

func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
