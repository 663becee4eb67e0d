package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"atrium/internal/contextwin"
	"atrium/internal/llm"
	"atrium/internal/tools"
	"atrium/internal/trace"
)

// BenchmarkOpenRun measures opening a 200-span run in the viewer: GET /s/{id}/runs/{rid}
// through the real handler (login, ownership, reading the spans, opening each sealed,
// deflated payload, the page template). The run has 40 steps of context, tool
// selection, model request (a growing conversation, about 10 KB as sent), response and
// tool call. The goal is ≤ 50 ms; p50-ms is the median request. The page holds the
// outline only; a span's data loads when its row is expanded (BenchmarkOpenRunSpan).
//
//	go test ./web -run '^$' -bench 'OpenRun$' -benchtime 100x
func BenchmarkOpenRun(b *testing.B) {
	env := newTestEnv(b)
	admin := env.setup()
	id := admin.newSession()
	ctx := context.Background()
	u, err := env.db.UserByUsername(ctx, "admin")
	if err != nil {
		b.Fatal(err)
	}
	runID := seedRun(b, env, id, u.ID, 40)
	get := admin.serveGET()
	open := func() *httptest.ResponseRecorder { return get("/s/" + id + "/runs/" + runID) }
	rec := open()
	if n := strings.Count(rec.Body.String(), `data-testid="span"`); rec.Code != http.StatusOK || n != 200 {
		b.Fatalf("GET run: %d, %d spans", rec.Code, n)
	}
	b.Logf("page %d KB", rec.Body.Len()/1024)
	var took []time.Duration
	for b.Loop() {
		start := time.Now()
		if rec := open(); rec.Code != http.StatusOK {
			b.Fatalf("status %d", rec.Code)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
}

// BenchmarkOpenRunSpan measures expanding the largest span of that run: its last model
// request (80 messages, about 20 KB as sent), opened, pretty-printed and folded.
//
//	go test ./web -run '^$' -bench OpenRunSpan -benchtime 100x
func BenchmarkOpenRunSpan(b *testing.B) {
	env := newTestEnv(b)
	admin := env.setup()
	id := admin.newSession()
	u, err := env.db.UserByUsername(context.Background(), "admin")
	if err != nil {
		b.Fatal(err)
	}
	runID := seedRun(b, env, id, u.ID, 40)
	get := admin.serveGET()
	open := func() *httptest.ResponseRecorder { return get("/s/" + id + "/runs/" + runID + "/spans/198") }
	if rec := open(); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "Step 40: what is 40*7?") {
		b.Fatalf("GET span: %d %.300s", rec.Code, rec.Body.String())
	}
	var took []time.Duration
	for b.Loop() {
		start := time.Now()
		if rec := open(); rec.Code != http.StatusOK {
			b.Fatalf("status %d", rec.Code)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
}

// seedRun records a run of steps×5 spans through the real recorder (redacted, sealed).
func seedRun(tb testing.TB, env *testEnv, sessionID string, owner int64, steps int) string {
	tb.Helper()
	ctx := context.Background()
	runID := fmt.Sprintf("bench-run-%d", steps)
	run, err := env.app.Recorder.StartRun(ctx, runID, sessionID, owner, "fake-model")
	if err != nil {
		tb.Fatal(err)
	}
	msgs := []llm.Message{{Role: llm.RoleSystem, Content: strings.Repeat("You are a helpful assistant. ", 40)}}
	spec := llm.ToolSpec{Name: "calculator", Description: strings.Repeat("Evaluates arithmetic. ", 20),
		Parameters: json.RawMessage(`{"type":"object","properties":{"expression":{"type":"string"}}}`)}
	rec := func(kind, name string, data any) {
		if err := run.Record(ctx, kind, name, data, time.Time{}, "", nil, 100, 10); err != nil {
			tb.Fatal(err)
		}
	}
	for step := 1; step <= steps; step++ {
		msgs = append(msgs, llm.Message{Role: llm.RoleUser, Content: fmt.Sprintf("Step %d: what is %d*7? %s", step, step, strings.Repeat("context ", 20))})
		rec(trace.KindContext, fmt.Sprintf("step %d", step), map[string]any{
			"zones": []contextwin.Zone{{Name: "pinned", Tokens: 300, Budget: 1000}, {Name: "history", Tokens: 120 * step, Budget: 8000}},
			"cut":   []contextwin.Cut{{Seq: 1, Reason: "older than the window"}}, "included": []int64{2, 3, 4}})
		rec(trace.KindToolSelection, "all", tools.Selection{Offered: []string{"calculator", "datetime"}, Reason: "all"})
		req := llm.Request{Model: "fake-model", Messages: msgs, Tools: []llm.ToolSpec{spec}}
		body, _ := json.Marshal(map[string]any{"model": req.Model, "messages": msgs, "tools": req.Tools, "stream": true})
		rec(trace.KindModelRequest, "fake-model", trace.ModelRequest{Request: req,
			HTTP: llm.NewHTTPRequest(http.MethodPost, "http://model.test/v1/chat/completions", http.Header{"Content-Type": {"application/json"}}, body)})
		call := llm.ToolCall{ID: fmt.Sprint("c", step), Name: "calculator", Arguments: fmt.Sprintf(`{"expression":"%d*7"}`, step)}
		rec(trace.KindModelResponse, "fake-model", llm.Response{Reasoning: "I should compute it. " + strings.Repeat("Thinking. ", 30),
			ToolCalls: []llm.ToolCall{call}, FinishReason: "tool_calls"})
		rec(trace.KindToolCall, "calculator", map[string]any{"id": call.ID, "arguments": json.RawMessage(call.Arguments),
			"result": json.RawMessage(fmt.Sprintf(`{"result":%d}`, step*7))})
		msgs = append(msgs, llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{call}},
			llm.Message{Role: llm.RoleTool, ToolCallID: call.ID, Content: fmt.Sprintf(`{"result":%d}`, step*7)})
	}
	if err := run.End(ctx, trace.StatusComplete, nil, 4000, 400, steps); err != nil {
		tb.Fatal(err)
	}
	return runID
}
