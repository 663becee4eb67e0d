package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"atrium/internal/llm"
	"atrium/internal/llm/llmtest"
)

// testTimeout is the providers' start and idle timeouts in these tests: 1 s, so that a
// loaded machine (load 40) never stalls a scripted 30 ms chunk gap past it, while the
// four stall tests stay quick.
const testTimeout = time.Second

// newProvider returns a provider of kind talking to srv with short timeouts.
func newProvider(t *testing.T, kind string, srv *llmtest.Server, key string) llm.Provider {
	t.Helper()
	p, err := llm.New(llm.Config{Kind: kind, BaseURL: srv.URL(), APIKey: key, StartTimeout: testTimeout, IdleTimeout: testTimeout})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

// recorder collects streamed events.
type recorder struct{ events []llm.Event }

func (r *recorder) on(e llm.Event) { r.events = append(r.events, e) }

func (r *recorder) texts(kind llm.EventKind) []string {
	var out []string
	for _, e := range r.events {
		if e.Kind == kind {
			out = append(out, e.Text)
		}
	}
	return out
}

func userRequest(text string) llm.Request {
	return llm.Request{Model: "fake-model", Messages: []llm.Message{
		{Role: llm.RoleSystem, Content: "You are terse."},
		{Role: llm.RoleUser, Content: text},
	}}
}

func wantKind(t *testing.T, err error, kind llm.ErrorKind) *llm.Error {
	t.Helper()
	e, ok := llm.AsError(err)
	if !ok {
		t.Fatalf("err = %v (%T), want *llm.Error of kind %v", err, err, kind)
	}
	if e.Kind != kind {
		t.Fatalf("kind = %v, want %v (message %q)", e.Kind, kind, e.Message)
	}
	return e
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestOpenAIStreamsTextInOrder(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t)
	words := llmtest.Words("Hello there, how are you today?")
	srv.Enqueue(llmtest.Reply{Text: words})
	p := newProvider(t, llm.KindOpenAI, srv, "sk-test")

	var rec recorder
	resp, err := p.Stream(context.Background(), userRequest("hi"), rec.on)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if got := rec.texts(llm.EventText); !equalStrings(got, words) {
		t.Errorf("text events = %q, want %q", got, words)
	}
	if resp.Content != "Hello there, how are you today?" || resp.FinishReason != "stop" {
		t.Errorf("response = %+v", resp)
	}
	r := srv.LastRequest()
	if r.Path != "/v1/chat/completions" || !r.Chat.Stream || r.Chat.Model != "fake-model" {
		t.Errorf("request = %s %+v", r.Path, r.Chat)
	}
	if len(r.Chat.Messages) != 2 || r.Chat.Messages[0].Role != "system" || r.Chat.LastUser() != "hi" {
		t.Errorf("messages sent = %+v", r.Chat.Messages)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer sk-test" {
		t.Errorf("Authorization = %q", got)
	}
	if !strings.Contains(string(r.Body), `"include_usage":true`) {
		t.Errorf("stream_options.include_usage not requested: %s", r.Body)
	}
}

func TestOpenAIReasoningAndUsage(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t)
	srv.Enqueue(llmtest.Reply{
		Reasoning: []string{"The user ", "greets me."},
		Text:      []string{"Hi", "!"},
		Usage:     &llm.Usage{InputTokens: 12, OutputTokens: 7},
	})
	p := newProvider(t, llm.KindOpenAI, srv, "")

	var rec recorder
	resp, err := p.Stream(context.Background(), userRequest("hello"), rec.on)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	var kinds []llm.EventKind
	for _, e := range rec.events {
		kinds = append(kinds, e.Kind)
	}
	want := []llm.EventKind{llm.EventReasoning, llm.EventReasoning, llm.EventText, llm.EventText}
	if len(kinds) != len(want) {
		t.Fatalf("event kinds = %v, want %v", kinds, want)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Fatalf("event kinds = %v, want %v", kinds, want)
		}
	}
	if resp.Reasoning != "The user greets me." || resp.Content != "Hi!" {
		t.Errorf("response = %+v", resp)
	}
	if resp.Usage != (llm.Usage{InputTokens: 12, OutputTokens: 7}) {
		t.Errorf("usage = %+v", resp.Usage)
	}
}

func TestOpenAIToolCallsAssembled(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t)
	calls := []llmtest.ToolCall{
		{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Zürich","unit":"celsius"}`},
		{ID: "call_2", Name: "search", Arguments: `{"query":"a \"quoted\" word","limit":3}`},
	}
	srv.Enqueue(llmtest.Reply{Text: []string{"Let me check."}, ToolCalls: calls})
	p := newProvider(t, llm.KindOpenAI, srv, "")

	req := userRequest("weather?")
	req.Tools = []llm.ToolSpec{{
		Name: "get_weather", Description: "Current weather",
		Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`),
	}}
	var rec recorder
	resp, err := p.Stream(context.Background(), req, rec.on)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if resp.FinishReason != "tool_calls" || len(resp.ToolCalls) != 2 {
		t.Fatalf("response = %+v", resp)
	}
	var emitted []llm.ToolCall
	for _, e := range rec.events {
		if e.Kind == llm.EventToolCall {
			emitted = append(emitted, *e.ToolCall)
		}
	}
	for i, want := range calls {
		got := resp.ToolCalls[i]
		if got.ID != want.ID || got.Name != want.Name || got.Arguments != want.Arguments {
			t.Errorf("call %d = %+v, want %+v", i, got, want)
		}
		if i >= len(emitted) || emitted[i] != got {
			t.Errorf("emitted calls = %+v", emitted)
		}
	}
	sent := srv.LastRequest().Chat.Tools
	if len(sent) != 1 || sent[0].Name != "get_weather" || !strings.Contains(string(sent[0].Parameters), `"city"`) {
		t.Errorf("tools sent = %+v", sent)
	}

	// The calls and their results go back in the next request.
	srv.Enqueue(llmtest.Reply{Text: []string{"Sunny."}})
	req.Messages = append(req.Messages,
		llm.Message{Role: llm.RoleAssistant, Content: resp.Content, ToolCalls: resp.ToolCalls},
		llm.Message{Role: llm.RoleTool, ToolCallID: "call_1", Content: `{"temp":21}`},
		llm.Message{Role: llm.RoleTool, ToolCallID: "call_2", Content: `[]`},
	)
	if _, err := p.Stream(context.Background(), req, nil); err != nil {
		t.Fatalf("second Stream: %v", err)
	}
	msgs := srv.LastRequest().Chat.Messages
	if len(msgs) != 5 || len(msgs[2].ToolCalls) != 2 || msgs[2].ToolCalls[1].Arguments != calls[1].Arguments ||
		msgs[3].Role != "tool" || msgs[3].ToolCallID != "call_1" || msgs[3].Content != `{"temp":21}` {
		t.Errorf("history sent = %+v", msgs)
	}
}

func TestOpenAIHTTPErrors(t *testing.T) {
	t.Parallel()
	const key = "sk-very-secret-key-123456"
	tests := []struct {
		name   string
		reply  llmtest.Reply
		kind   llm.ErrorKind
		status int
		hint   string
	}{
		{"unauthorized", llmtest.Reply{Status: 401, ErrorBody: `{"error":{"message":"Incorrect API key provided: ` + key + `."}}`}, llm.KindAuth, 401, "Check the key in Settings"},
		{"forbidden", llmtest.Reply{Status: 403}, llm.KindAuth, 403, "API key"},
		{"rate limited", llmtest.Reply{Status: 429, ErrorBody: `{"error":{"message":"Rate limit reached for requests"}}`}, llm.KindRateLimit, 429, "Wait a moment"},
		{"server error", llmtest.Reply{Status: 500}, llm.KindServer, 500, "Try again later"},
		{"bad gateway plain text", llmtest.Reply{Status: 502, ErrorBody: "upstream down"}, llm.KindServer, 502, "upstream down"},
		{"unknown model", llmtest.Reply{Status: 404, ErrorBody: `{"error":"model 'nope' not found"}`}, llm.KindBadRequest, 404, "model 'nope' not found"},
		{"bad request", llmtest.Reply{Status: 400}, llm.KindBadRequest, 400, "rejected the request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := llmtest.NewServer(t)
			srv.Enqueue(tt.reply)
			p := newProvider(t, llm.KindOpenAI, srv, key)
			start := time.Now()
			_, err := p.Stream(context.Background(), userRequest("hi"), nil)
			e := wantKind(t, err, tt.kind)
			if e.Status != tt.status {
				t.Errorf("status = %d, want %d", e.Status, tt.status)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.hint) || !strings.Contains(msg, "HTTP") {
				t.Errorf("message %q lacks %q", msg, tt.hint)
			}
			if strings.Contains(msg, key) || strings.Contains(msg, "very-secret") || strings.Contains(msg, "\n") {
				t.Errorf("message leaks the key or is not one line: %q", msg)
			}
			if len(srv.Requests()) != 1 {
				t.Errorf("requests = %d, want 1 (no retries)", len(srv.Requests()))
			}
			if time.Since(start) > time.Second {
				t.Errorf("took %v", time.Since(start))
			}
		})
	}
}

func TestOpenAIWrongKeyRejected(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t)
	srv.RequireKey = "sk-right"
	p := newProvider(t, llm.KindOpenAI, srv, "sk-wrong-key-abcdef")
	_, err := p.Stream(context.Background(), userRequest("hi"), nil)
	e := wantKind(t, err, llm.KindAuth)
	if e.Message != "The model provider rejected the API key (HTTP 401: Incorrect API key provided). Check the key in Settings → Providers." {
		t.Errorf("message = %q", e.Message)
	}
	if _, err := p.Models(context.Background()); err == nil {
		t.Error("Models with a wrong key: no error")
	} else {
		wantKind(t, err, llm.KindAuth)
	}
	ok := newProvider(t, llm.KindOpenAI, srv, "sk-right")
	if _, err := ok.Stream(context.Background(), userRequest("hi"), nil); err != nil {
		t.Errorf("right key: %v", err)
	}
}

func TestOpenAIStartTimeout(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t)
	srv.Enqueue(llmtest.Reply{StallBeforeHeaders: time.Hour})
	p := newProvider(t, llm.KindOpenAI, srv, "")
	start := time.Now()
	_, err := p.Stream(context.Background(), userRequest("hi"), nil)
	e := wantKind(t, err, llm.KindTimeout)
	if e.Message != "The model did not start answering within 1s." {
		t.Errorf("message = %q", e.Message)
	}
	if errors.Is(err, context.Canceled) {
		t.Error("timeout must not look like a user cancel")
	}
	if d := time.Since(start); d > testTimeout+2*time.Second { // the timeout fired, not a hang
		t.Errorf("took %v", d)
	}
}

func TestOpenAIIdleTimeoutKeepsPartialText(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t)
	srv.Enqueue(llmtest.Reply{Text: []string{"one ", "two ", "three"}, StallAfter: 2})
	p := newProvider(t, llm.KindOpenAI, srv, "")
	var rec recorder
	start := time.Now()
	resp, err := p.Stream(context.Background(), userRequest("count"), rec.on)
	e := wantKind(t, err, llm.KindTimeout)
	if !strings.Contains(e.Message, "for 1s") {
		t.Errorf("message = %q", e.Message)
	}
	if resp.Content != "one two " || len(rec.events) != 2 {
		t.Errorf("partial = %q, events %d", resp.Content, len(rec.events))
	}
	if d := time.Since(start); d > testTimeout+2*time.Second { // the timeout fired, not a hang
		t.Errorf("took %v", d)
	}
}

func TestOpenAIBrokenStreamKeepsPartialText(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t)
	srv.Enqueue(llmtest.Reply{Text: []string{"one ", "two ", "three"}, BreakAfter: 2})
	p := newProvider(t, llm.KindOpenAI, srv, "")
	resp, err := p.Stream(context.Background(), userRequest("count"), nil)
	e := wantKind(t, err, llm.KindBroken)
	if e.Message != "The connection to the provider broke mid-reply." {
		t.Errorf("message = %q", e.Message)
	}
	if resp.Content != "one two " {
		t.Errorf("partial = %q", resp.Content)
	}
}

func TestOpenAIBrokenToolCallIsDropped(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t)
	// Text chunk + first two of three argument fragments, then the connection dies.
	srv.Enqueue(llmtest.Reply{Text: []string{"ok"}, ToolCalls: []llmtest.ToolCall{{ID: "c", Name: "f", Arguments: `{"a":"bcdefgh"}`}}, BreakAfter: 3})
	p := newProvider(t, llm.KindOpenAI, srv, "")
	resp, err := p.Stream(context.Background(), userRequest("x"), nil)
	wantKind(t, err, llm.KindBroken)
	if len(resp.ToolCalls) != 0 || resp.Content != "ok" {
		t.Errorf("partial = %+v; a half-received call must not be returned", resp)
	}
}

func TestOpenAICancelReturnsPartialText(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t)
	srv.Enqueue(llmtest.Reply{Text: []string{"a", "b", "c", "d", "e"}, ChunkDelay: 30 * time.Millisecond})
	p := newProvider(t, llm.KindOpenAI, srv, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	resp, err := p.Stream(ctx, userRequest("letters"), func(llm.Event) {
		n++
		if n == 2 {
			cancel() // the user pressed Stop
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if _, ok := llm.AsError(err); ok {
		t.Error("a cancel must not be an *llm.Error")
	}
	if resp.Content != "ab" {
		t.Errorf("partial = %q", resp.Content)
	}
}

func TestOpenAIConnectionRefused(t *testing.T) {
	t.Parallel()
	p, err := llm.New(llm.Config{Kind: llm.KindOpenAI, BaseURL: "http://127.0.0.1:1/", StartTimeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Stream(context.Background(), userRequest("hi"), nil)
	e := wantKind(t, err, llm.KindNetwork)
	want := "Could not reach the provider at http://127.0.0.1:1/v1: connection refused. Check the base URL in Settings → Providers."
	if e.Message != want {
		t.Errorf("message = %q, want %q", e.Message, want)
	}
	_, err = p.Models(context.Background())
	wantKind(t, err, llm.KindNetwork)
}

func TestOpenAIModels(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t)
	p := newProvider(t, llm.KindOpenAI, srv, "")
	got, err := p.Models(context.Background())
	if err != nil || !slices.Equal(got, []llm.Model{{ID: "fake-model"}}) {
		t.Fatalf("Models = %v, %v", got, err)
	}
	srv.SetModels("llama3.2", "qwen3:8b")
	srv.SetWindows(map[string]int{"qwen3:8b": 40960})
	got, err = p.Models(context.Background())
	if want := []llm.Model{{ID: "llama3.2"}, {ID: "qwen3:8b", Window: 40960}}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("Models = %v, %v; want %v", got, err, want)
	}
	if r := srv.LastRequest(); r.Method != "GET" || r.Path != "/v1/models" {
		t.Errorf("request = %s %s", r.Method, r.Path)
	}
}

// Each server family names its context window differently; a negative or missing
// one is no window.
func TestOpenAIModelWindowFields(t *testing.T) {
	t.Parallel()
	body := `{"object":"list","data":[
		{"id":"vllm","max_model_len":32768},
		{"id":"openrouter","context_length":131072,"top_provider":{"context_length":65536}},
		{"id":"lmstudio","max_context_length":8192},
		{"id":"ollama","object":"model"},
		{"id":"odd","context_length":-5}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body)
	}))
	defer srv.Close()
	p, err := llm.New(llm.Config{Kind: llm.KindOpenAI, BaseURL: srv.URL + "/v1"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Models(context.Background())
	want := []llm.Model{{ID: "vllm", Window: 32768}, {ID: "openrouter", Window: 131072},
		{ID: "lmstudio", Window: 8192}, {ID: "ollama"}, {ID: "odd"}}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Models = %v, %v; want %v", got, err, want)
	}
}

func TestOpenAIBaseURLNormalised(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t)
	root := strings.TrimSuffix(srv.URL(), "/v1")
	for _, base := range []string{root, root + "/", srv.URL(), srv.URL() + "/", srv.URL() + "//"} {
		p, err := llm.New(llm.Config{Kind: llm.KindOpenAI, BaseURL: base})
		if err != nil {
			t.Fatalf("New(%q): %v", base, err)
		}
		if _, err := p.Stream(context.Background(), userRequest("hi"), nil); err != nil {
			t.Errorf("base %q: %v", base, err)
			continue
		}
		if path := srv.LastRequest().Path; path != "/v1/chat/completions" {
			t.Errorf("base %q: path %q", base, path)
		}
	}
}

// The SDK reads OPENAI_API_KEY and OPENAI_BASE_URL by default; the Config must win.
func TestOpenAIIgnoresEnvironment(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-from-env-must-not-be-sent")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	srv := llmtest.NewServer(t)
	for _, key := range []string{"", "sk-configured"} {
		p := newProvider(t, llm.KindOpenAI, srv, key)
		if _, err := p.Stream(context.Background(), userRequest("hi"), nil); err != nil {
			t.Fatalf("key %q: %v", key, err)
		}
		if _, err := p.Models(context.Background()); err != nil {
			t.Fatalf("key %q: Models: %v", key, err)
		}
		for _, r := range srv.Requests() {
			if strings.Contains(strings.Join(r.Header.Values("Authorization"), " "), "from-env") {
				t.Errorf("key %q: the environment key was sent to %s", key, r.Path)
			}
		}
		got := srv.LastRequest().Header.Get("Authorization")
		if key == "" && got != "" {
			t.Errorf("empty key: Authorization = %q, want none", got)
		}
		if key != "" && got != "Bearer "+key {
			t.Errorf("Authorization = %q, want the configured key", got)
		}
	}
}

func TestNewConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []llm.Config{
		{Kind: "gemini"},
		{Kind: ""},
		{Kind: llm.KindOpenAI, BaseURL: "localhost:11434"},
		{Kind: llm.KindOpenAI, BaseURL: "ftp://example.com"},
		{Kind: llm.KindAnthropic, StartTimeout: -time.Second},
		{Kind: llm.KindOpenAI, APIKey: "sk-a\nb"},
	}
	for _, cfg := range tests {
		_, err := llm.New(cfg)
		e := wantKind(t, err, llm.KindConfig)
		if !strings.Contains(e.Message, "Settings") && !strings.Contains(e.Message, "negative") {
			t.Errorf("%+v: message %q says nothing about what to fix", cfg, e.Message)
		}
	}
	if _, err := llm.New(llm.Config{Kind: "OpenAI"}); err != nil {
		t.Errorf("kind is case-insensitive: %v", err)
	}
}

func TestErrorKindsAreReadable(t *testing.T) {
	t.Parallel()
	if llm.KindRateLimit.String() != "rate_limit" || llm.EventToolCall.String() != "tool_call" {
		t.Errorf("String() = %q, %q", llm.KindRateLimit, llm.EventToolCall)
	}
	wrapped := errors.Join(errors.New("agent: turn"), &llm.Error{Kind: llm.KindServer, Message: "x"})
	if e, ok := llm.AsError(wrapped); !ok || e.Kind != llm.KindServer {
		t.Errorf("AsError(wrapped) = %v, %v", e, ok)
	}
	if _, ok := llm.AsError(context.Canceled); ok {
		t.Error("AsError(context.Canceled) = true")
	}
}

// rawSSE serves the given SSE body for chat completions, for wire shapes the
// fake server does not script.
func rawSSE(t *testing.T, body string) llm.Provider {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	p, err := llm.New(llm.Config{Kind: llm.KindOpenAI, BaseURL: srv.URL, StartTimeout: testTimeout, IdleTimeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOpenAIReasoningField(t *testing.T) {
	t.Parallel()
	p := rawSSE(t, `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","reasoning":"hmm"},"finish_reason":null}]}

data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"yes","reasoning":null},"finish_reason":"stop"}]}

data: [DONE]

`)
	var rec recorder
	resp, err := p.Stream(context.Background(), userRequest("?"), rec.on)
	if err != nil || resp.Reasoning != "hmm" || resp.Content != "yes" || len(rec.events) != 2 || rec.events[0].Kind != llm.EventReasoning {
		t.Errorf("resp = %+v, events %+v, err %v", resp, rec.events, err)
	}
}

func TestOpenAIStreamWithoutEndIsBroken(t *testing.T) {
	t.Parallel()
	p := rawSSE(t, `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"half"},"finish_reason":null}]}

`)
	resp, err := p.Stream(context.Background(), userRequest("?"), nil)
	wantKind(t, err, llm.KindBroken)
	if resp.Content != "half" {
		t.Errorf("partial = %q", resp.Content)
	}
}

func TestOpenAIErrorEventMidStream(t *testing.T) {
	t.Parallel()
	p := rawSSE(t, `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"par"},"finish_reason":null}]}

data: {"error":{"message":"Rate limit exceeded upstream","type":"rate_limit_exceeded"}}

`)
	resp, err := p.Stream(context.Background(), userRequest("?"), nil)
	e := wantKind(t, err, llm.KindRateLimit)
	if !strings.Contains(e.Message, "Rate limit exceeded upstream") || resp.Content != "par" {
		t.Errorf("message = %q, partial %q", e.Message, resp.Content)
	}
}

func TestOpenAIWholeToolCallsWithoutIndexes(t *testing.T) {
	t.Parallel()
	p := rawSSE(t, `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"id":"a","function":{"name":"f","arguments":"{\"n\":1}"}}]},"finish_reason":null}]}

data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"id":"b","function":{"name":"g","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}

data: [DONE]

`)
	resp, err := p.Stream(context.Background(), userRequest("?"), nil)
	if err != nil || len(resp.ToolCalls) != 2 || resp.ToolCalls[0] != (llm.ToolCall{ID: "a", Name: "f", Arguments: `{"n":1}`}) || resp.ToolCalls[1].Name != "g" {
		t.Errorf("calls = %+v, err %v", resp.ToolCalls, err)
	}
}
