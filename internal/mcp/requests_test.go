package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"atrium/internal/agent"
	"atrium/internal/llm"
	"atrium/internal/llm/llmtest"
	"atrium/internal/mcp"
	"atrium/internal/store"
	"atrium/internal/testkit"
	"atrium/internal/tools"
	"atrium/internal/trace"
)

// askerFunc answers servers' questions in the tests, keeping each question.
type askerFunc struct {
	mu     sync.Mutex
	asked  []mcp.Question
	answer func(mcp.Question) mcp.Answer
}

func (a *askerFunc) Ask(ctx context.Context, q mcp.Question) (mcp.Answer, error) {
	a.mu.Lock()
	a.asked = append(a.asked, q)
	a.mu.Unlock()
	return a.answer(q), nil
}

func (a *askerFunc) questions() []mcp.Question {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]mcp.Question(nil), a.asked...)
}

// callWith dispatches a tool with hooks, as the agent does.
func (h *harness) callWith(tb testing.TB, hooks tools.Hooks, name string, args any) tools.Result {
	tb.Helper()
	b, err := json.Marshal(args)
	if err != nil {
		tb.Fatal(err)
	}
	ctx := tools.WithHooks(context.Background(), hooks)
	return h.reg.Dispatch(ctx, "session-1", 7, llm.ToolCall{ID: "c1", Name: name, Arguments: string(b)})
}

// everythingEach runs f against server-everything over stdio, streamable HTTP and SSE.
func everythingEach(t *testing.T, tweak func(*mcp.ServerConfig), f func(t *testing.T, h *harness, asker *askerFunc)) {
	node := needNode(t)
	for _, tr := range []string{"stdio", "http", "sse"} {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			asker := &askerFunc{answer: func(mcp.Question) mcp.Answer { return mcp.Answer{Action: mcp.ActionDecline} }}
			h.sup.Asker = asker
			cfg := everythingStdio(node, "everything")
			switch tr {
			case "http":
				cfg = mcp.ServerConfig{Name: "everything", Transport: mcp.TransportHTTP, URL: startEverythingHTTP(t, node), Enabled: true}
			case "sse":
				cfg = mcp.ServerConfig{Name: "everything", Transport: mcp.TransportSSE, URL: startEverythingSSE(t, node), Enabled: true}
			}
			if tweak != nil {
				tweak(&cfg)
			}
			h.cfg = cfg
			h.sup.Apply(context.Background(), []mcp.ServerConfig{cfg})
			h.waitState(t, "everything", 30*time.Second, mcp.StateReady)
			f(t, h, asker)
		})
	}
}

func TestElicitationFormReachesServer(t *testing.T) {
	everythingEach(t, nil, func(t *testing.T, h *harness, asker *askerFunc) {
		asker.answer = func(q mcp.Question) mcp.Answer {
			content, problems := q.Form.Answer(map[string][]string{"name": {"Ada Lovelace"}, "check": {"on"}, "integer": {"7"}})
			if problems != nil {
				t.Errorf("problems with a valid answer: %v", problems)
			}
			return mcp.Answer{Action: mcp.ActionAccept, Content: content}
		}
		res := h.callWith(t, tools.Hooks{CallKey: "k1"}, "everything__trigger-elicitation-request", map[string]any{})
		if res.IsError || !strings.Contains(res.Content, "Name: Ada Lovelace") || !strings.Contains(res.Content, "Favorite Integer: 7") {
			t.Fatalf("result %q, want the answer", res.Content)
		}
		qs := asker.questions()
		if len(qs) != 1 || qs[0].Kind != mcp.AskForm || qs[0].SessionID != "session-1" || qs[0].OwnerID != 7 || qs[0].CallKey != "k1" || qs[0].Server != "everything" {
			t.Fatalf("questions %+v", qs)
		}
		// Defaults are filled; the required field comes first.
		f := qs[0].Form
		if f.Fields[0].Name != "name" || !f.Fields[0].Required {
			t.Errorf("first field %+v", f.Fields[0])
		}
		for _, fld := range f.Fields {
			if fld.Name == "firstLine" && (len(fld.Default) != 1 || fld.Default[0] != "It was a dark and stormy night.") {
				t.Errorf("firstLine default %q", fld.Default)
			}
		}

		asker.answer = func(mcp.Question) mcp.Answer { return mcp.Answer{Action: mcp.ActionDecline} }
		res = h.callWith(t, tools.Hooks{}, "everything__trigger-elicitation-request", map[string]any{})
		if !strings.Contains(res.Content, "declined") {
			t.Fatalf("declined: result %q", res.Content)
		}
	})
}

func TestSamplingWithConsent(t *testing.T) {
	everythingEach(t, nil, func(t *testing.T, h *harness, asker *askerFunc) {
		var got []llm.Request
		var mu sync.Mutex
		hooks := tools.Hooks{Sample: func(ctx context.Context, _ string, req llm.Request) (llm.Response, error) {
			mu.Lock()
			got = append(got, req)
			mu.Unlock()
			return llm.Response{Content: "sampled: the sky is blue", FinishReason: "stop"}, nil
		}}
		asker.answer = func(mcp.Question) mcp.Answer { return mcp.Answer{Action: mcp.ActionAccept} }
		res := h.callWith(t, hooks, "everything__trigger-sampling-request", map[string]any{"prompt": "why blue?", "maxTokens": 50})
		if res.IsError || !strings.Contains(res.Content, "sampled: the sky is blue") {
			t.Fatalf("approved: result %q", res.Content)
		}
		mu.Lock()
		if len(got) != 1 || got[0].MaxTokens != 50 || len(got[0].Messages) != 2 || got[0].Messages[0].Role != llm.RoleSystem ||
			!strings.Contains(got[0].Messages[1].Content, "why blue?") {
			t.Fatalf("the model got %+v", got)
		}
		mu.Unlock()
		qs := asker.questions()
		if len(qs) != 1 || qs[0].Kind != mcp.AskSampling || qs[0].Sampling.MaxTokens != 50 {
			t.Fatalf("questions %+v", qs)
		}

		asker.answer = func(mcp.Question) mcp.Answer { return mcp.Answer{Action: mcp.ActionDecline} }
		res = h.callWith(t, hooks, "everything__trigger-sampling-request", map[string]any{"prompt": "again", "maxTokens": 50})
		if !res.IsError || !strings.Contains(res.Content, "User rejected sampling request") {
			t.Fatalf("declined: result %q", res.Content)
		}
		mu.Lock()
		if len(got) != 1 {
			t.Fatalf("the model ran after a refusal: %d calls", len(got))
		}
		mu.Unlock()

		// Too many tokens is refused before anyone is asked.
		res = h.callWith(t, hooks, "everything__trigger-sampling-request", map[string]any{"prompt": "big", "maxTokens": mcp.MaxSamplingTokens + 1})
		if !res.IsError || !strings.Contains(res.Content, "maxTokens must be between") || len(asker.questions()) != 2 {
			t.Fatalf("over the bound: result %q, %d questions", res.Content, len(asker.questions()))
		}
	})
}

func TestSamplingAlwaysSkipsTheQuestion(t *testing.T) {
	everythingEach(t, func(c *mcp.ServerConfig) { c.SamplingAlways = true }, func(t *testing.T, h *harness, asker *askerFunc) {
		hooks := tools.Hooks{Sample: func(ctx context.Context, _ string, req llm.Request) (llm.Response, error) {
			return llm.Response{Content: "auto"}, nil
		}}
		res := h.callWith(t, hooks, "everything__trigger-sampling-request", map[string]any{"prompt": "x", "maxTokens": 5})
		if res.IsError || !strings.Contains(res.Content, "auto") || len(asker.questions()) != 0 {
			t.Fatalf("result %q, questions %d", res.Content, len(asker.questions()))
		}
	})
}

func TestRootsListAndChange(t *testing.T) {
	everythingEach(t, func(c *mcp.ServerConfig) { c.Roots = []string{"file:///srv/one"} }, func(t *testing.T, h *harness, _ *askerFunc) {
		res := h.call(t, "everything__get-roots-list", map[string]any{})
		if !strings.Contains(res.Content, "URI: file:///srv/one") || !strings.Contains(res.Content, "(1 total)") {
			t.Fatalf("roots: %q", res.Content)
		}
		pid := h.sup.ChildPID("everything") // 0 for a remote server
		cfg := h.cfg
		cfg.Roots = []string{"file:///srv/one", "file:///srv/two"}
		h.sup.Apply(context.Background(), []mcp.ServerConfig{cfg})
		testkit.Eventually(t, 10*time.Second, "the server to ask for the new roots", func() bool {
			res = h.call(t, "everything__get-roots-list", map[string]any{})
			return strings.Contains(res.Content, "URI: file:///srv/two")
		})
		if got := h.sup.ChildPID("everything"); got != pid {
			t.Fatalf("a roots change restarted the server (pid %d → %d)", pid, got)
		}
		if st := h.status("everything"); st.State != mcp.StateReady {
			t.Fatalf("state %s after the roots change", st.State)
		}
	})
}

func TestProgressShownAndExtendsTimeout(t *testing.T) {
	everythingEach(t, func(c *mcp.ServerConfig) {
		c.CallTimeout = tools.MinTimeout
		c.ProgressMax = time.Minute
	}, func(t *testing.T, h *harness, _ *askerFunc) {
		var mu sync.Mutex
		var seen []tools.Progress
		hooks := tools.Hooks{Progress: func(p tools.Progress) {
			mu.Lock()
			seen = append(seen, p)
			mu.Unlock()
		}}
		// 13 s in 13 steps: past the 10 s timeout, alive all along.
		start := time.Now()
		res := h.callWith(t, hooks, "everything__trigger-long-running-operation", map[string]any{"duration": 13, "steps": 13})
		if res.IsError || !strings.Contains(res.Content, "Long running operation completed") {
			t.Fatalf("after %s: result %q", time.Since(start), res.Content)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != 13 || seen[0].Progress != 1 || seen[0].Total != 13 || seen[12].Progress != 13 {
			t.Fatalf("progress %+v", seen)
		}
	})
}

// A server that logs what it receives sees initialize first (no server/discover
// before it), and an unknown request of its own answered -32601 and logged below ERROR.
func TestHandshakeFirstAndUnknownMethods(t *testing.T) {
	node := needNode(t)
	var logs strings.Builder
	var logMu sync.Mutex
	h := newHarnessLog(t, slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return logs.Write(p)
	}), &slog.HandlerOptions{Level: slog.LevelDebug})))
	h.sup.Apply(context.Background(), []mcp.ServerConfig{{Name: "logged", Transport: mcp.TransportStdio, Command: node,
		Args: []string{filepath.Join(testdataDir, "logmethods.js")}, Enabled: true}})
	h.waitState(t, "logged", 20*time.Second, mcp.StateReady)
	testkit.Eventually(t, 10*time.Second, "the server's requests to be answered", func() bool {
		st := h.status("logged").Stderr
		return slices.Contains(st, "reply s1 -32601") && slices.Contains(st, "reply s2 ok")
	})
	st := h.status("logged").Stderr
	if len(st) == 0 || st[0] != "recv initialize" {
		t.Fatalf("the first thing the server received: %q", st)
	}
	for _, l := range st {
		if strings.Contains(l, "discover") {
			t.Fatalf("server/discover was sent: %q", st)
		}
	}
	logMu.Lock()
	defer logMu.Unlock()
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("an ERROR was logged:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "method not offered") {
		t.Fatalf("the refusal was not logged:\n%s", logs.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A person answering past the call's timeout does not lose the call: its clock is held
// while the question is open.
func TestElicitationHoldsTheCallTimeout(t *testing.T) {
	node := needNode(t)
	h := newHarness(t)
	asker := &askerFunc{answer: func(q mcp.Question) mcp.Answer {
		time.Sleep(tools.MinTimeout + time.Second) // the person takes longer than the call may
		content, _ := q.Form.Answer(map[string][]string{"name": {"Slow Poke"}})
		return mcp.Answer{Action: mcp.ActionAccept, Content: content}
	}}
	h.sup.Asker = asker
	cfg := everythingStdio(node, "everything")
	cfg.CallTimeout = tools.MinTimeout
	h.sup.Apply(context.Background(), []mcp.ServerConfig{cfg})
	h.waitState(t, "everything", 30*time.Second, mcp.StateReady)
	res := h.callWith(t, tools.Hooks{}, "everything__trigger-elicitation-request", map[string]any{})
	if res.IsError || !strings.Contains(res.Content, "Name: Slow Poke") {
		t.Fatalf("result %q", res.Content)
	}
}

func TestRootsValidated(t *testing.T) {
	for _, r := range []string{"/srv", "http://x/y", "file://host/srv", "file:///srv/../etc", "file:///srv?x=1", "file:srv", "file:///a\nb"} {
		c := mcp.ServerConfig{Name: "x", Transport: mcp.TransportStdio, Command: "x", Roots: []string{r}}
		if err := c.Validate(); err == nil {
			t.Errorf("root %q accepted", r)
		}
	}
	c := mcp.ServerConfig{Name: "x", Transport: mcp.TransportStdio, Command: "x", Roots: []string{"file:///srv/one", "file:///", "file://localhost/home/me/"}}
	if err := c.Validate(); err != nil {
		t.Errorf("good roots refused: %v", err)
	}
}

// A sampling request approved during a turn runs on the chat's model and is recorded in
// the run as a model request span (sealed like the others), with who asked.
func TestAgentSamplingRecorded(t *testing.T) {
	node := needNode(t)
	c := newChat(t)
	c.sup.Asker = &askerFunc{answer: func(mcp.Question) mcp.Answer { return mcp.Answer{Action: mcp.ActionAccept} }}
	c.sup.Apply(context.Background(), []mcp.ServerConfig{everythingStdio(node, "everything")})
	c.waitState(t, "everything", 30*time.Second, mcp.StateReady)
	c.llm.Enqueue(
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "call_s", Name: "everything__trigger-sampling-request",
			Arguments: `{"prompt":"why is the sky blue?","maxTokens":40}`}}},
		llmtest.Reply{Text: llmtest.Words("Rayleigh scattering.")}, // the sampling request
		llmtest.Reply{Text: llmtest.Words("Done.")},
	)
	final := c.send(t, "sample please")
	if final.Status != store.StatusComplete {
		t.Fatalf("final %+v", final)
	}
	tool := c.turnMessages(t, "sample please")[1]
	if !strings.Contains(tool.Content, "Rayleigh scattering.") {
		t.Fatalf("tool result %q", tool.Content)
	}
	ctx := context.Background()
	runs, err := c.recorder.Runs(ctx, c.session.OwnerID, c.session.ID, 1)
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs %v %v", runs, err)
	}
	_, spans, err := c.recorder.Run(ctx, c.session.OwnerID, runs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	var sampling *store.SpanInfo
	for i, s := range spans {
		if s.Kind == trace.KindModelRequest && strings.Contains(string(s.Data), `"purpose":"mcp_sampling:everything"`) {
			sampling = &spans[i]
		}
	}
	if sampling == nil || !strings.Contains(string(sampling.Data), "why is the sky blue?") || !strings.Contains(string(sampling.Data), "Rayleigh scattering.") {
		t.Fatalf("no sampling span with the request and the answer among %d spans", len(spans))
	}
	raw, err := c.db.RunSpans(ctx, runs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range raw {
		if strings.Contains(string(s.Data), "why is the sky blue?") {
			t.Fatalf("span %d (%s) holds the sampling prompt in the clear", s.Seq, s.Kind)
		}
	}
}

// URL mode: the link is shown (http(s) only) and the answer goes back as the spec says.
func TestElicitationURLMode(t *testing.T) {
	everythingEach(t, nil, func(t *testing.T, h *harness, asker *askerFunc) {
		asker.answer = func(mcp.Question) mcp.Answer { return mcp.Answer{Action: mcp.ActionAccept} }
		res := h.callWith(t, tools.Hooks{}, "everything__trigger-url-elicitation", map[string]any{"url": "https://example.com/consent?x=1", "message": "Sign in"})
		qs := asker.questions()
		if len(qs) != 1 || qs[0].Kind != mcp.AskURL || qs[0].URL != "https://example.com/consent?x=1" || qs[0].Message != "Sign in" {
			t.Fatalf("questions %+v", qs)
		}
		if res.IsError || !strings.Contains(res.Content, "accept") {
			t.Fatalf("result %q", res.Content)
		}
		res = h.callWith(t, tools.Hooks{}, "everything__trigger-url-elicitation", map[string]any{"url": "javascript:alert(1)"})
		if !res.IsError || !strings.Contains(res.Content, "only http(s) links") || len(asker.questions()) != 1 {
			t.Fatalf("a javascript: link: result %q, %d questions", res.Content, len(asker.questions()))
		}
	})
}

// Progress reports reach the run's events (the tool card's frames) with the call's key,
// and none comes after the call's result.
func TestAgentProgressEvents(t *testing.T) {
	node := needNode(t)
	c := newChat(t)
	c.sup.Apply(context.Background(), []mcp.ServerConfig{everythingStdio(node, "everything")})
	c.waitState(t, "everything", 30*time.Second, mcp.StateReady)
	c.llm.Enqueue(
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "call_p", Name: "everything__trigger-long-running-operation",
			Arguments: `{"duration":1,"steps":3}`}}},
		llmtest.Reply{Text: llmtest.Words("Done.")},
	)
	c.send(t, "run long")
	step := c.turnMessages(t, "run long")[0]
	c.sink.mu.Lock()
	defer c.sink.mu.Unlock()
	var got []float64
	resultAt := -1
	for i, ev := range c.sink.events {
		switch ev.Kind {
		case agent.EventToolProgress:
			if ev.Text != store.ToolCallKey(step.ID, 0) || ev.Progress.Total != 3 || resultAt >= 0 {
				t.Errorf("progress event %d: key %q, %+v (result at %d)", i, ev.Text, ev.Progress, resultAt)
			}
			got = append(got, ev.Progress.Progress)
		case agent.EventToolResult:
			resultAt = i
		}
	}
	if fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("progress %v", got)
	}
}
