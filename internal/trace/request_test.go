package trace_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"atrium/internal/llm"
	"atrium/internal/llm/llmtest"
	"atrium/internal/trace"
)

// TestRebuildRequests runs a two-step tool-calling turn against the fake model
// server through each real provider, records the requests the way the agent does
// (CaptureTransport + a model_request span), and rebuilds them from the stored
// spans: the bodies must equal, byte for byte, what the server received.
func TestRebuildRequests(t *testing.T) {
	for _, kind := range []string{llm.KindOpenAI, llm.KindAnthropic} {
		t.Run(kind, func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			apiKey := "sk-test-" + strings.Repeat("k7", 12)
			f.red.AddSecret(apiKey)
			srv := llmtest.NewServer(t)
			srv.SetRequireKey(apiKey)
			srv.Enqueue(
				llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "lookup", Arguments: `{"token":"abc","q":"x"}`}}},
				llmtest.Reply{Text: llmtest.Words("Tom & Jerry <3 ünïcode 😀.")},
			)
			p, err := llm.New(llm.Config{Kind: kind, BaseURL: srv.URL(), APIKey: apiKey,
				HTTPClient: &http.Client{Transport: llm.CaptureTransport(nil)}})
			mustNil(t, err)

			tools := []llm.ToolSpec{{Name: "lookup", Description: "when to use: <always> & never",
				// Keys sorted and compact, as RebuildLLMRequests returns them.
				Parameters: json.RawMessage(`{"properties":{"q":{"type":"string"},"token":{"type":"string"}},"required":["token"],"type":"object"}`)}}
			msgs := []llm.Message{
				{Role: llm.RoleSystem, Content: "You are <b>helpful</b> & brief.\n\ttabs\u2028too"},
				{Role: llm.RoleUser, Content: `look up "x" — quickly, the bearer of bad news`},
			}
			run, err := f.rec.StartRun(ctx, "r", f.sess.ID, f.ann.ID, "fake-model")
			mustNil(t, err)
			var sent []llm.Request
			for step := 1; step <= 2; step++ {
				req := llm.Request{Model: "fake-model", Messages: append([]llm.Message(nil), msgs...), Tools: tools, MaxTokens: 300}
				sent = append(sent, req)
				span, err := run.Span(ctx, trace.KindModelRequest, req.Model, trace.ModelRequest{Request: req})
				mustNil(t, err)
				var mu sync.Mutex
				var wire *llm.HTTPRequest
				sctx := llm.WithCapture(ctx, func(h *llm.HTTPRequest) { mu.Lock(); wire = h; mu.Unlock() })
				started := time.Now()
				resp, err := p.Stream(sctx, req, func(llm.Event) {})
				mustNil(t, err)
				mu.Lock()
				mustNil(t, span.End(ctx, "", nil, resp.Usage.InputTokens, resp.Usage.OutputTokens, map[string]any{"http": wire}))
				mu.Unlock()
				mustNil(t, run.Record(ctx, trace.KindModelResponse, req.Model, resp, started, "", nil, 0, 0))
				msgs = append(msgs, llm.Message{Role: llm.RoleAssistant, Content: resp.Content, ToolCalls: resp.ToolCalls})
				for _, c := range resp.ToolCalls {
					msgs = append(msgs, llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, Content: `{"answer":"<42>"}`})
				}
			}
			mustNil(t, run.End(ctx, "", nil, 0, 0, 2))

			_, spans, err := f.rec.Run(ctx, f.ann.ID, "r")
			mustNil(t, err)
			bodies, err := trace.RebuildRequests(spans)
			mustNil(t, err)
			got := srv.Requests()
			if len(bodies) != 2 || len(got) != 2 {
				t.Fatalf("rebuilt %d bodies, server got %d requests", len(bodies), len(got))
			}
			for i := range got {
				if !bytes.Equal(bodies[i], got[i].Body) {
					t.Errorf("request %d differs:\nrebuilt %s\nsent    %s", i+1, bodies[i], got[i].Body)
				}
			}
			if !bytes.Contains(bodies[0], []byte(`"token"`)) {
				t.Errorf("the tool schema is missing from the body: %s", bodies[0])
			}

			rebuilt, err := trace.RebuildLLMRequests(spans)
			mustNil(t, err)
			if !reflect.DeepEqual(rebuilt, sent) {
				t.Errorf("rebuilt llm requests\n%+v\nwant\n%+v", rebuilt, sent)
			}

			for _, s := range spans {
				if bytes.Contains(s.Data, []byte(apiKey)) {
					t.Errorf("span %d (%s) stores the API key: %s", s.Seq, s.Kind, s.Data)
				}
			}
		})
	}
}

func TestRebuildRequestsEdgeCases(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.red.AddSecret("cfg-secret-0042")
	run, err := f.rec.StartRun(ctx, "r", f.sess.ID, f.ann.ID, "m")
	mustNil(t, err)
	binary := []byte{0xff, 0xfe, 0x00, 'a', '\n'}
	withSecret := []byte(`{"messages":[{"content":"my password is cfg-secret-0042"}]}`)
	for _, body := range [][]byte{binary, withSecret, nil} {
		mustNil(t, run.Record(ctx, trace.KindModelRequest, "m",
			trace.ModelRequest{HTTP: trace.NewHTTPRequest("POST", "http://x/v1", nil, body)}, time.Time{}, "", nil, 0, 0))
	}
	mustNil(t, run.Record(ctx, trace.KindModelResponse, "m", "ignored", time.Time{}, "", nil, 0, 0))
	_, spans, err := f.rec.Run(ctx, f.ann.ID, "r")
	mustNil(t, err)
	bodies, err := trace.RebuildRequests(spans)
	mustNil(t, err)
	if len(bodies) != 3 {
		t.Fatalf("%d bodies, want 3", len(bodies))
	}
	if !bytes.Equal(bodies[0], binary) {
		t.Errorf("binary body = %q", bodies[0])
	}
	// A body holding a configured secret is the one documented exception.
	if want := `{"messages":[{"content":"my password is [REDACTED]"}]}`; string(bodies[1]) != want {
		t.Errorf("body with a secret = %s, want %s", bodies[1], want)
	}
	if len(bodies[2]) != 0 {
		t.Errorf("empty body = %q", bodies[2])
	}

	mustNil(t, run.Record(ctx, trace.KindModelRequest, "m", trace.ModelRequest{}, time.Time{}, "", nil, 0, 0))
	_, spans, err = f.rec.Run(ctx, f.ann.ID, "r")
	mustNil(t, err)
	if _, err := trace.RebuildRequests(spans); err == nil {
		t.Error("a model_request span without a body was rebuilt")
	}
}

// BenchmarkRecordModelRequest measures redacting and storing one model_request
// span with a body of about 100 KB (a long context), start and end.
func BenchmarkRecordModelRequest(b *testing.B) {
	ctx := context.Background()
	f := newFixture(b)
	f.red.AddSecret("cfg-secret-0042")
	run, err := f.rec.StartRun(ctx, "r", f.sess.ID, f.ann.ID, "m")
	mustNil(b, err)
	var msgs []llm.Message
	for i := range 200 {
		msgs = append(msgs, llm.Message{Role: llm.RoleUser, Content: strings.Repeat("word ", 50) + strconv.Itoa(i)})
	}
	req := llm.Request{Model: "m", Messages: msgs}
	body, err := json.Marshal(req)
	mustNil(b, err)
	h := trace.NewHTTPRequest("POST", "http://x/v1/chat/completions", http.Header{"Authorization": {"Bearer k"}}, body)
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for b.Loop() {
		s, err := run.Span(ctx, trace.KindModelRequest, "m", trace.ModelRequest{Request: req})
		mustNil(b, err)
		mustNil(b, s.End(ctx, "", nil, 0, 0, map[string]any{"http": h}))
	}
}
