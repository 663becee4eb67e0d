package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"atrium/internal/llm"
	"atrium/internal/llm/llmtest"
)

func TestAnthropicStreamsThinkingTextToolsAndUsage(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t)
	srv.Enqueue(llmtest.Reply{
		Reasoning: []string{"Weather ", "question."},
		Text:      llmtest.Words("Let me look that up."),
		ToolCalls: []llmtest.ToolCall{{ID: "toolu_1", Name: "get_weather", Arguments: `{"city":"Zürich"}`}},
		Usage:     &llm.Usage{InputTokens: 30, OutputTokens: 11},
	})
	p := newProvider(t, llm.KindAnthropic, srv, "sk-ant-test")

	req := userRequest("weather in Zürich?")
	req.Tools = []llm.ToolSpec{{
		Name: "get_weather", Description: "Current weather",
		Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}`),
	}}
	var rec recorder
	resp, err := p.Stream(context.Background(), req, rec.on)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if got := strings.Join(rec.texts(llm.EventReasoning), ""); got != "Weather question." {
		t.Errorf("reasoning events = %q", got)
	}
	if got := rec.texts(llm.EventText); !equalStrings(got, llmtest.Words("Let me look that up.")) {
		t.Errorf("text events = %q", got)
	}
	last := rec.events[len(rec.events)-1]
	if last.Kind != llm.EventToolCall || last.ToolCall.Arguments != `{"city":"Zürich"}` {
		t.Errorf("last event = %+v", last)
	}
	want := llm.Response{
		Content: "Let me look that up.", Reasoning: "Weather question.",
		ToolCalls:    []llm.ToolCall{{ID: "toolu_1", Name: "get_weather", Arguments: `{"city":"Zürich"}`}},
		Usage:        llm.Usage{InputTokens: 30, OutputTokens: 11},
		FinishReason: "tool_use",
	}
	if resp.Content != want.Content || resp.Reasoning != want.Reasoning || resp.Usage != want.Usage ||
		resp.FinishReason != want.FinishReason || len(resp.ToolCalls) != 1 || resp.ToolCalls[0] != want.ToolCalls[0] {
		t.Errorf("response = %+v\nwant       %+v", resp, want)
	}

	r := srv.LastRequest()
	if r.Path != "/v1/messages" || r.Header.Get("Authorization") != "Bearer sk-ant-test" || r.Header.Get("Anthropic-Version") == "" {
		t.Errorf("request = %s, headers %v", r.Path, r.Header)
	}
	var body struct {
		System    []struct{ Text string } `json:"system"`
		MaxTokens int                     `json:"max_tokens"`
		Tools     []struct {
			InputSchema map[string]any `json:"input_schema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatal(err)
	}
	if len(body.System) != 1 || body.System[0].Text != "You are terse." || body.MaxTokens == 0 {
		t.Errorf("system/max_tokens sent = %s", r.Body)
	}
	if len(body.Tools) != 1 || body.Tools[0].InputSchema["additionalProperties"] != false || body.Tools[0].InputSchema["required"] == nil {
		t.Errorf("tool schema sent = %s", r.Body)
	}
	if msgs := r.Chat.Messages; len(msgs) != 2 || msgs[1].Role != "user" {
		t.Errorf("messages sent = %+v", msgs)
	}

	// Tool results go back as one user turn after the assistant's tool_use.
	req.Messages = append(req.Messages,
		llm.Message{Role: llm.RoleAssistant, Content: resp.Content, ToolCalls: resp.ToolCalls},
		llm.Message{Role: llm.RoleTool, ToolCallID: "toolu_1", Content: "21°C"},
	)
	if _, err := p.Stream(context.Background(), req, nil); err != nil {
		t.Fatalf("second Stream: %v", err)
	}
	msgs := srv.LastRequest().Chat.Messages
	if len(msgs) != 4 || msgs[2].ToolCalls[0].Arguments != `{"city":"Zürich"}` || msgs[3].Role != "tool" || msgs[3].Content != "21°C" {
		t.Errorf("history sent = %+v", msgs)
	}
}

func TestAnthropicHTTPErrors(t *testing.T) {
	t.Parallel()
	const key = "sk-ant-secret-0123456789"
	tests := []struct {
		name  string
		reply llmtest.Reply
		kind  llm.ErrorKind
	}{
		{"rate limited", llmtest.Reply{Status: 429}, llm.KindRateLimit},
		{"overloaded", llmtest.Reply{Status: 529}, llm.KindServer},
		{"server error", llmtest.Reply{Status: 500}, llm.KindServer},
		{"unknown model", llmtest.Reply{Status: 404, ErrorBody: `{"type":"error","error":{"type":"not_found_error","message":"model: claude-nope"}}`}, llm.KindBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := llmtest.NewServer(t)
			srv.Enqueue(tt.reply)
			p := newProvider(t, llm.KindAnthropic, srv, key)
			_, err := p.Stream(context.Background(), userRequest("hi"), nil)
			e := wantKind(t, err, tt.kind)
			if e.Status != tt.reply.Status || strings.Contains(e.Message, key) {
				t.Errorf("error = %+v", e)
			}
			if len(srv.Requests()) != 1 {
				t.Errorf("requests = %d, want 1 (no retries)", len(srv.Requests()))
			}
		})
	}
}

func TestAnthropicWrongKey(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t)
	srv.RequireKey = "sk-ant-right"
	p := newProvider(t, llm.KindAnthropic, srv, "sk-ant-wrong-key")
	_, err := p.Stream(context.Background(), userRequest("hi"), nil)
	e := wantKind(t, err, llm.KindAuth)
	if e.Message != "The model provider rejected the API key (HTTP 401: invalid x-api-key). Check the key in Settings → Providers." {
		t.Errorf("message = %q", e.Message)
	}
}

func TestAnthropicTimeoutsBreaksAndCancel(t *testing.T) {
	t.Parallel()
	t.Run("never starts", func(t *testing.T) {
		t.Parallel()
		srv := llmtest.NewServer(t)
		srv.Enqueue(llmtest.Reply{StallBeforeHeaders: time.Hour})
		start := time.Now()
		_, err := newProvider(t, llm.KindAnthropic, srv, "").Stream(context.Background(), userRequest("hi"), nil)
		wantKind(t, err, llm.KindTimeout)
		if d := time.Since(start); d > testTimeout+2*time.Second { // the timeout fired, not a hang
			t.Errorf("took %v", d)
		}
	})
	t.Run("stalls", func(t *testing.T) {
		t.Parallel()
		srv := llmtest.NewServer(t)
		srv.Enqueue(llmtest.Reply{Text: []string{"one ", "two ", "three"}, StallAfter: 2})
		resp, err := newProvider(t, llm.KindAnthropic, srv, "").Stream(context.Background(), userRequest("hi"), nil)
		wantKind(t, err, llm.KindTimeout)
		if resp.Content != "one two " {
			t.Errorf("partial = %q", resp.Content)
		}
	})
	t.Run("breaks", func(t *testing.T) {
		t.Parallel()
		srv := llmtest.NewServer(t)
		srv.Enqueue(llmtest.Reply{Text: []string{"one ", "two ", "three"}, BreakAfter: 1})
		resp, err := newProvider(t, llm.KindAnthropic, srv, "").Stream(context.Background(), userRequest("hi"), nil)
		wantKind(t, err, llm.KindBroken)
		if resp.Content != "one " {
			t.Errorf("partial = %q", resp.Content)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		srv := llmtest.NewServer(t)
		srv.Enqueue(llmtest.Reply{Text: []string{"a", "b", "c", "d"}, ChunkDelay: 30 * time.Millisecond})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		resp, err := newProvider(t, llm.KindAnthropic, srv, "").Stream(ctx, userRequest("hi"), func(e llm.Event) {
			if e.Text == "b" {
				cancel()
			}
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if resp.Content != "ab" {
			t.Errorf("partial = %q", resp.Content)
		}
	})
	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		p, err := llm.New(llm.Config{Kind: llm.KindAnthropic, BaseURL: "http://127.0.0.1:1/v1"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Stream(context.Background(), userRequest("hi"), nil)
		e := wantKind(t, err, llm.KindNetwork)
		if !strings.Contains(e.Message, "http://127.0.0.1:1: connection refused") {
			t.Errorf("message = %q", e.Message)
		}
	})
}

func TestAnthropicModels(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t)
	srv.Models = []string{"claude-sonnet-4-5", "claude-haiku-4-5"}
	srv.Windows = map[string]int{"claude-sonnet-4-5": 200000}
	got, err := newProvider(t, llm.KindAnthropic, srv, "k").Models(context.Background())
	want := []llm.Model{{ID: "claude-sonnet-4-5", Window: 200000}, {ID: "claude-haiku-4-5"}}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Models = %v, %v; want %v", got, err, want)
	}
	if r := srv.LastRequest(); r.Path != "/v1/models" || r.Header.Get("Authorization") != "Bearer k" {
		t.Errorf("request = %s %v", r.Path, r.Header)
	}
}

// The SDK reads ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN and ANTHROPIC_BASE_URL by default; the Config must win.
func TestAnthropicIgnoresEnvironment(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "token-from-env")
	t.Setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:1")
	srv := llmtest.NewServer(t)
	for _, key := range []string{"", "sk-ant-configured"} {
		p := newProvider(t, llm.KindAnthropic, srv, key)
		if _, err := p.Stream(context.Background(), userRequest("hi"), nil); err != nil {
			t.Fatalf("key %q: %v", key, err)
		}
		h := srv.LastRequest().Header
		if strings.Contains(h.Get("X-Api-Key")+h.Get("Authorization"), "from-env") {
			t.Errorf("key %q: the environment credential was sent: %v", key, h)
		}
		// anthropic-sdk-go v2 sends the API key as a bearer token.
		want := ""
		if key != "" {
			want = "Bearer " + key
		}
		if got := h.Get("Authorization"); got != want || h.Get("X-Api-Key") != "" {
			t.Errorf("Authorization = %q, X-Api-Key = %q, want %q", got, h.Get("X-Api-Key"), want)
		}
	}
}
