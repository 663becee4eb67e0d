package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"atrium/internal/agent"
	"atrium/internal/llm"
	"atrium/internal/llm/llmtest"
	"atrium/internal/store"
	"atrium/internal/testkit"
	"atrium/internal/tools"
)

// wireMessage is one entry of the "messages" array of an OpenAI chat request, as the
// fake server received it on the wire.
type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// text returns the message's content: a string, or the text parts joined.
func (m wireMessage) text(t *testing.T) string {
	t.Helper()
	if len(m.Content) == 0 || string(m.Content) == "null" {
		return ""
	}
	var s string
	if err := json.Unmarshal(m.Content, &s); err == nil {
		return s
	}
	var parts []struct{ Text string }
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		t.Fatalf("content %s is neither a string nor text parts: %v", m.Content, err)
	}
	var sb strings.Builder
	for _, p := range parts {
		sb.WriteString(p.Text)
	}
	return sb.String()
}

// wireMessages decodes the messages of a raw request body.
func wireMessages(t *testing.T, body []byte) []wireMessage {
	t.Helper()
	var req struct {
		Messages []wireMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("request body is not JSON: %v\n%s", err, body)
	}
	return req.Messages
}

// resultAfterCall finds the assistant message that made call id in msgs and returns
// the message right after it, which must be that call's result.
func resultAfterCall(t *testing.T, msgs []wireMessage, id string) wireMessage {
	t.Helper()
	for i, m := range msgs {
		if m.Role != "assistant" {
			continue
		}
		for j, c := range m.ToolCalls {
			if c.ID != id {
				continue
			}
			// Results follow in the order of the calls.
			k := i + 1 + j
			if k >= len(msgs) {
				t.Fatalf("call %s is the last message; its result is missing", id)
			}
			if got := msgs[k]; got.Role != "tool" || got.ToolCallID != id {
				t.Fatalf("message after the call %s is role %q tool_call_id %q, want its tool result", id, got.Role, got.ToolCallID)
			}
			return msgs[k]
		}
	}
	t.Fatalf("no assistant message calls %s", id)
	return wireMessage{}
}

// toolError decodes a failed tool result's content.
func toolError(t *testing.T, content string) (code, detail string) {
	t.Helper()
	var e struct {
		Error  string `json:"error"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal([]byte(content), &e); err != nil {
		t.Fatalf("tool result %q is not JSON: %v", content, err)
	}
	return e.Error, e.Detail
}

// shape is the stored transcript as "role" or "role(tool_calls)" / "tool(error)".
func shape(msgs []store.Message) []string {
	var out []string
	for _, m := range msgs {
		s := m.Role
		switch {
		case len(m.ToolCalls) > 0:
			s += "(tool_calls)"
		case m.Role == store.RoleTool && m.Status == store.StatusError:
			s += "(error)"
		case m.Role == store.RoleTool:
			s += "(ok)"
		}
		out = append(out, s)
	}
	return out
}

// waitIdle waits until the session's run (reply, summary fold and trace included)
// has ended.
// waitIdle waits for the session's run and its after-reply jobs to end, and for the
// recording of what they published to be written.
func (h *harness) waitIdle(t *testing.T) {
	t.Helper()
	waitIdle(t, h.agent, h.session.ID)
	h.record.Flush()
}

func waitIdle(t *testing.T, a *agent.Agent, sessionID string) {
	t.Helper()
	testkit.Eventually(t, 5*time.Second, "the run to end", func() bool { return !a.Busy(sessionID) })
}

func calls(c ...llmtest.ToolCall) []llmtest.ToolCall { return c }

// argsRecorder is a tool executor that keeps the arguments it ran with.
type argsRecorder struct {
	mu   sync.Mutex
	args []string
}

func (r *argsRecorder) ran() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.args)
}

// ageTool is a tool whose schema needs a number.
func ageTool(rec *argsRecorder) tools.Tool {
	return tools.Tool{
		Name:        "save_age",
		Description: "When to use: the user tells their age. What it does: saves it. Parameters: age in years.",
		Schema:      json.RawMessage(`{"type":"object","properties":{"age":{"type":"number"}},"required":["age"]}`),
		Execute: func(ctx context.Context, call tools.Call) (string, error) {
			rec.mu.Lock()
			rec.args = append(rec.args, string(call.Args))
			rec.mu.Unlock()
			return `{"saved":true}`, nil
		},
	}
}

// failingTool is a tool whose executor fails with err, or panics when err is nil.
func failingTool(name string, err error) tools.Tool {
	return tools.Tool{
		Name:        name,
		Description: "When to use: never. What it does: fails. Parameters: none.",
		Schema:      json.RawMessage(`{"type":"object"}`),
		Execute: func(ctx context.Context, call tools.Call) (string, error) {
			if err == nil {
				panic("runtime error: index out of range [3] with length 3\n\ngoroutine 7 [running]:\natrium/internal/x.f()\n\t/home/build/atrium/internal/x/x.go:42 +0x1d")
			}
			return "", err
		},
	}
}

// TestUnknownToolResultGoesBackToModel: a call to a tool that does not exist is
// answered with a structured error that the model sees right after its call, and the
// turn goes on to a final reply.
func TestUnknownToolResultGoesBackToModel(t *testing.T) {
	h := newHarness(t, options{})
	h.llm.Enqueue(
		llmtest.Reply{ToolCalls: calls(llmtest.ToolCall{ID: "call_nope", Name: "nope", Arguments: `{"x":1}`})},
		llmtest.Reply{Text: []string{"I have no tool called nope."}},
	)

	h.send(t, "Use the nope tool")
	final := h.sink.waitFinal(t, 1)

	if final.Status != store.StatusComplete || final.Content != "I have no tool called nope." {
		t.Fatalf("final %q %q (error %q), want the complete second reply", final.Status, final.Content, final.Error)
	}
	msgs := h.messages(t)
	if got, want := shape(msgs), []string{"user", "assistant(tool_calls)", "tool(error)", "assistant"}; !slices.Equal(got, want) {
		t.Fatalf("stored %v, want %v", got, want)
	}
	res := msgs[2]
	if res.ToolCallID != "call_nope" || res.Error != tools.CodeUnknownTool {
		t.Errorf("tool message call id %q error %q", res.ToolCallID, res.Error)
	}
	if !strings.HasPrefix(res.Content, `{"error":"unknown_tool",`) {
		t.Errorf("tool message content %q", res.Content)
	}
	if code, detail := toolError(t, res.Content); code != tools.CodeUnknownTool || !strings.Contains(detail, "nope") {
		t.Errorf("tool error %q %q", code, detail)
	}

	reqs := h.llm.Requests()
	if len(reqs) != 2 {
		t.Fatalf("the model was called %d times, want 2", len(reqs))
	}
	var offered []string
	for _, tool := range reqs[0].Chat.Tools {
		offered = append(offered, tool.Name)
	}
	if want := []string{"calculator", "datetime", "memory_forget", "memory_save", "memory_search", "task_get", "task_update"}; !slices.Equal(offered, want) {
		t.Errorf("offered tools %v, want %v", offered, want)
	}
	wire := wireMessages(t, reqs[1].Body)
	got := resultAfterCall(t, wire, "call_nope")
	if got.text(t) != res.Content {
		t.Errorf("the model got tool result %q, want the stored %q", got.text(t), res.Content)
	}
	if last := wire[len(wire)-1]; last.Role != "tool" {
		t.Errorf("the second request ends with a %q message, want the tool result", last.Role)
	}
}

// TestBadArgumentsThenCorrected: arguments that fail the schema never reach the
// executor; the model gets a validation error it can act on and its corrected call runs.
func TestBadArgumentsThenCorrected(t *testing.T) {
	ran := &argsRecorder{}
	h := newHarness(t, options{tools: []tools.Tool{ageTool(ran)}})
	h.llm.Enqueue(
		llmtest.Reply{ToolCalls: calls(llmtest.ToolCall{ID: "call_1", Name: "save_age", Arguments: `{"age":"forty"}`})},
		llmtest.Reply{ToolCalls: calls(llmtest.ToolCall{ID: "call_2", Name: "save_age", Arguments: `{"age":40}`})},
		llmtest.Reply{Text: []string{"Saved: 40."}},
	)

	h.send(t, "I am forty")
	final := h.sink.waitFinal(t, 1)

	if final.Status != store.StatusComplete || final.Content != "Saved: 40." {
		t.Fatalf("final %q %q (error %q)", final.Status, final.Content, final.Error)
	}
	msgs := h.messages(t)
	want := []string{"user", "assistant(tool_calls)", "tool(error)", "assistant(tool_calls)", "tool(ok)", "assistant"}
	if got := shape(msgs); !slices.Equal(got, want) {
		t.Fatalf("stored %v, want %v", got, want)
	}
	code, detail := toolError(t, msgs[2].Content)
	if code != tools.CodeInvalidArguments || !strings.Contains(detail, "age") || msgs[2].Error != tools.CodeInvalidArguments {
		t.Errorf("first result %q (error column %q), want invalid_arguments about age", msgs[2].Content, msgs[2].Error)
	}
	if want := "age: expected number, got string"; detail != want {
		t.Errorf("validation detail %q, want %q", detail, want)
	}
	if msgs[2].ToolCallID != "call_1" || msgs[4].ToolCallID != "call_2" {
		t.Errorf("results answer %q and %q", msgs[2].ToolCallID, msgs[4].ToolCallID)
	}
	if msgs[4].Content != `{"saved":true}` || msgs[4].Status != store.StatusComplete {
		t.Errorf("second result %+v", msgs[4])
	}
	if got := ran.ran(); !slices.Equal(got, []string{`{"age":40}`}) {
		t.Errorf("the executor ran with %q, want only the corrected arguments", got)
	}

	reqs := h.llm.Requests()
	if len(reqs) != 3 {
		t.Fatalf("the model was called %d times, want 3", len(reqs))
	}
	if got := resultAfterCall(t, wireMessages(t, reqs[1].Body), "call_1").text(t); got != msgs[2].Content {
		t.Errorf("the model got %q for the bad call", got)
	}
	wire := wireMessages(t, reqs[2].Body)
	resultAfterCall(t, wire, "call_1")
	if got := resultAfterCall(t, wire, "call_2").text(t); got != `{"saved":true}` {
		t.Errorf("the model got %q for the corrected call", got)
	}
}

// TestExecutorFailuresReachModelSafely: a tool that fails or panics gives the model
// execution_failed without internals, and the turn goes on.
func TestExecutorFailuresReachModelSafely(t *testing.T) {
	internal := errors.New("open /home/build/atrium/data/secret.db: permission denied\ngoroutine 12 [running]:\nmain.go:17")
	h := newHarness(t, options{tools: []tools.Tool{
		failingTool("plain_error", internal),
		failingTool("model_error", tools.Errorf("the city %q is unknown; try a larger town nearby", "Xyz")),
		failingTool("panics", nil),
	}})
	h.llm.Enqueue(
		llmtest.Reply{ToolCalls: calls(
			llmtest.ToolCall{ID: "c1", Name: "plain_error", Arguments: `{}`},
			llmtest.ToolCall{ID: "c2", Name: "model_error", Arguments: `{}`},
			llmtest.ToolCall{ID: "c3", Name: "panics", Arguments: `{}`},
		)},
		llmtest.Reply{Text: []string{"The tools failed, sorry."}},
	)

	h.send(t, "Try the tools")
	final := h.sink.waitFinal(t, 1)
	if final.Status != store.StatusComplete || final.Content != "The tools failed, sorry." {
		t.Fatalf("final %q %q (error %q)", final.Status, final.Content, final.Error)
	}
	msgs := h.messages(t)
	want := []string{"user", "assistant(tool_calls)", "tool(error)", "tool(error)", "tool(error)", "assistant"}
	if got := shape(msgs); !slices.Equal(got, want) {
		t.Fatalf("stored %v, want %v", got, want)
	}
	wire := wireMessages(t, h.llm.LastRequest().Body)
	tests := []struct {
		id, detail string
	}{
		{"c1", "the tool failed"},
		{"c2", `the city "Xyz" is unknown; try a larger town nearby`},
		{"c3", "the tool failed"},
	}
	for i, tt := range tests {
		m := msgs[2+i]
		if m.ToolCallID != tt.id {
			t.Errorf("result %d answers %q, want %q", i, m.ToolCallID, tt.id)
		}
		code, detail := toolError(t, m.Content)
		if code != tools.CodeExecutionFailed || detail != tt.detail {
			t.Errorf("%s: result %q, want execution_failed %q", tt.id, m.Content, tt.detail)
		}
		for _, leak := range []string{"/home", ".go", "goroutine", "secret", "permission", "index out of range"} {
			if strings.Contains(m.Content, leak) {
				t.Errorf("%s: result %q leaks %q", tt.id, m.Content, leak)
			}
		}
		if got := resultAfterCall(t, wire, tt.id).text(t); got != m.Content {
			t.Errorf("%s: the model got %q, want %q", tt.id, got, m.Content)
		}
	}
	for _, ev := range h.sink.all() {
		if ev.Kind == agent.EventToolResult && strings.Contains(ev.Result.Content, "/home") {
			t.Errorf("a tool result event leaks a path: %q", ev.Result.Content)
		}
	}
}

// TestToolTimeout: a tool that does not finish in time gives the model a timeout
// error and the turn continues right away.
//
// tools.Register refuses timeouts under 10s, and the hook that shortens them
// (SetTimeoutForTest) is test-only in package tools, so this test takes 10s. It runs
// in CI (E2E_REQUIRED=1) and when ATRIUM_SLOW_TESTS is set, and runs in parallel with
// the other tests.
func TestToolTimeout(t *testing.T) {
	if os.Getenv("ATRIUM_SLOW_TESTS") == "" && os.Getenv("E2E_REQUIRED") == "" {
		testkit.Skip(t, "takes 10s (the minimum tool timeout); set ATRIUM_SLOW_TESTS=1 to run")
	}
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	h := newHarness(t, options{tools: []tools.Tool{{
		Name:        "slow",
		Description: "When to use: never. What it does: hangs. Parameters: none.",
		Schema:      json.RawMessage(`{"type":"object"}`),
		Timeout:     tools.MinTimeout,
		Execute: func(ctx context.Context, call tools.Call) (string, error) {
			<-release // ignores ctx: Dispatch must still return at the timeout
			return "too late", nil
		},
	}}})
	h.llm.Enqueue(
		llmtest.Reply{ToolCalls: calls(llmtest.ToolCall{ID: "c1", Name: "slow", Arguments: `{}`})},
		llmtest.Reply{Text: []string{"It timed out."}},
	)

	start := time.Now()
	h.send(t, "Run the slow tool")
	res := h.sink.waitForWithin(t, agent.EventToolResult, 1, tools.MinTimeout+5*time.Second)
	took := time.Since(start)
	if took < tools.MinTimeout || took > tools.MinTimeout+2*time.Second {
		t.Errorf("the tool result came after %s, want about %s", took, tools.MinTimeout)
	}
	if code, _ := toolError(t, res.Message.Content); code != tools.CodeTimeout {
		t.Errorf("tool result %q, want a timeout", res.Message.Content)
	}
	if reply := h.sink.waitFinal(t, 1); reply.Status != store.StatusComplete || reply.Content != "It timed out." {
		t.Errorf("final %+v", reply)
	}
	if got := resultAfterCall(t, wireMessages(t, h.llm.LastRequest().Body), "c1").text(t); !strings.Contains(got, `"timeout"`) {
		t.Errorf("the model got %q", got)
	}
}

// TestSampleOutlivingItsCall: an MCP server may still be sampling when it answers the
// call. The call's end cancels the sample and waits for it: its response is recorded
// before the tool result, and nothing of the run follows the run's end (nor races the
// turn's token counts, under -race).
func TestSampleOutlivingItsCall(t *testing.T) {
	asked := make(chan struct{})
	var askedOnce sync.Once
	sampled := make(chan error, 1)
	h := newHarness(t, options{tools: []tools.Tool{{
		Name:        "sampler",
		Description: "When to use: never. What it does: has the model sampled in the background. Parameters: none.",
		Schema:      json.RawMessage(`{"type":"object"}`),
		Execute: func(ctx context.Context, call tools.Call) (string, error) {
			go func() {
				_, err := call.Hooks.Sample(context.Background(), "srv",
					llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "sample slowly"}}})
				sampled <- err
			}()
			select { // returns once the sample is on its way
			case <-asked:
			case <-ctx.Done():
			}
			return "started", nil
		},
	}}})
	h.llm.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		switch {
		case req.LastUser() == "sample slowly":
			askedOnce.Do(func() { close(asked) })
			return llmtest.Reply{Text: llmtest.Words("one two three four five six seven eight nine ten"),
				ChunkDelay: 200 * time.Millisecond, Usage: &llm.Usage{InputTokens: 3, OutputTokens: 10}}
		case req.Messages[len(req.Messages)-1].Role == "tool":
			return llmtest.Reply{Text: []string{"Done."}}
		default:
			return llmtest.Reply{ToolCalls: calls(llmtest.ToolCall{ID: "c1", Name: "sampler", Arguments: `{}`})}
		}
	})

	h.send(t, "Sample in the background")
	h.sink.waitFor(t, agent.EventRunEnded, 1)
	select {
	case <-sampled:
	case <-time.After(10 * time.Second):
		t.Fatal("the sample never returned")
	}
	h.waitIdle(t)
	evs := h.sink.all()
	var kinds []string
	response, result := -1, -1
	for i, ev := range evs {
		kinds = append(kinds, ev.Kind.String())
		switch {
		case ev.Kind == agent.EventModelResponse && ev.Purpose == agent.PurposeSampling+":srv":
			response = i
		case ev.Kind == agent.EventToolResult:
			result = i
		}
	}
	if evs[len(evs)-1].Kind != agent.EventRunEnded {
		t.Errorf("events after the run ended: %v", kinds)
	}
	if response < 0 || result < 0 || response > result {
		t.Errorf("the sample's response is not recorded before the tool result: %v", kinds)
	}
}

// TestStepLimit: a model that never stops calling tools is cut off at MaxSteps model
// calls with a final message saying so.
func TestStepLimit(t *testing.T) {
	h := newHarness(t, options{cfg: agent.Config{MaxSteps: 3}})
	var n atomic.Int32
	h.llm.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		id := fmt.Sprintf("call_%d", n.Add(1))
		return llmtest.Reply{ToolCalls: calls(llmtest.ToolCall{ID: id, Name: "datetime", Arguments: `{}`})}
	})

	h.send(t, "What time is it? Keep checking.")
	final := h.sink.waitFinal(t, 1)
	h.waitIdle(t)

	if n := len(h.llm.Requests()); n != 3 {
		t.Errorf("the model was called %d times, want 3", n)
	}
	if final.Status != store.StatusComplete || !strings.Contains(final.Content, "step limit") || !strings.Contains(final.Content, "3 steps") {
		t.Errorf("final %q %q, want a message about stopping at the step limit of 3", final.Status, final.Content)
	}
	if len(final.ToolCalls) != 0 {
		t.Errorf("final message carries tool calls %s", final.ToolCalls)
	}
	want := []string{"user",
		"assistant(tool_calls)", "tool(ok)",
		"assistant(tool_calls)", "tool(ok)",
		"assistant(tool_calls)", "tool(ok)",
		"assistant"}
	msgs := h.messages(t)
	if got := shape(msgs); !slices.Equal(got, want) {
		t.Fatalf("stored %v, want %v", got, want)
	}
	if last := msgs[len(msgs)-1]; last.Seq != final.Seq || last.Content != final.Content {
		t.Errorf("stored final %+v", last)
	}
	if n := h.sink.count(agent.EventFinal); n != 1 {
		t.Errorf("%d final events", n)
	}
}

// TestBuiltinToolsThroughTheLoop: the calculator answers; task_update saves the goal
// and stage, tells the UI, and the next model request has them in its pinned zone.
func TestBuiltinToolsThroughTheLoop(t *testing.T) {
	h := newHarness(t, options{cfg: agent.Config{SystemPrompt: "Be brief."}})
	h.llm.Enqueue(
		llmtest.Reply{ToolCalls: calls(
			llmtest.ToolCall{ID: "c1", Name: "calculator", Arguments: `{"expression":"(2 + 3)^2 * sqrt(16)"}`},
			llmtest.ToolCall{ID: "c2", Name: "task_update", Arguments: `{"goal":"Plan a weekend in Lyon","stage":"comparing trains"}`},
		)},
		llmtest.Reply{Text: []string{"100; noted the plan."}},
		llmtest.Reply{Text: []string{"Still on it."}},
	)

	h.send(t, "Compute (2+3)^2*sqrt(16) and remember I'm planning Lyon")
	final := h.sink.waitFinal(t, 1)
	if final.Status != store.StatusComplete || final.Content != "100; noted the plan." {
		t.Fatalf("final %q %q (error %q)", final.Status, final.Content, final.Error)
	}

	msgs := h.messages(t)
	if got, want := shape(msgs), []string{"user", "assistant(tool_calls)", "tool(ok)", "tool(ok)", "assistant"}; !slices.Equal(got, want) {
		t.Fatalf("stored %v, want %v", got, want)
	}
	var calc struct{ Result float64 }
	if err := json.Unmarshal([]byte(msgs[2].Content), &calc); err != nil || calc.Result != 100 {
		t.Errorf("calculator result %q, want 100", msgs[2].Content)
	}

	sess, err := h.db.SessionForOwner(context.Background(), h.session.ID, h.session.OwnerID)
	if err != nil {
		t.Fatal(err)
	}
	state, err := tools.ParseTaskState(sess.State)
	if err != nil || state.Goal != "Plan a weekend in Lyon" || state.Stage != "comparing trains" || state.UpdatedAt.IsZero() {
		t.Errorf("stored state %s (%v)", sess.State, err)
	}
	ev := h.sink.waitFor(t, agent.EventTaskState, 1)
	if !strings.Contains(string(ev.State), "Plan a weekend in Lyon") || !strings.Contains(string(ev.State), "comparing trains") {
		t.Errorf("task state event %s", ev.State)
	}

	reqs := h.llm.Requests()
	if len(reqs) != 2 {
		t.Fatalf("the model was called %d times, want 2", len(reqs))
	}
	if sys := reqs[0].Chat.Messages[0]; sys.Role != "system" || strings.Contains(sys.Content, "Task goal") {
		t.Errorf("first request's system message %q has a goal before one was set", sys.Content)
	}
	pinned := func(req llmtest.Recorded) string {
		t.Helper()
		wire := wireMessages(t, req.Body)
		if len(wire) == 0 || wire[0].Role != "system" {
			t.Fatalf("request does not start with a system message: %s", req.Body)
		}
		return wire[0].text(t)
	}
	for _, want := range []string{"Be brief.", "Task goal: Plan a weekend in Lyon", "Stage: comparing trains"} {
		if got := pinned(reqs[1]); !strings.Contains(got, want) {
			t.Errorf("second request's system message %q lacks %q", got, want)
		}
	}

	// The next turn starts from the saved stage too.
	h.waitIdle(t)
	h.send(t, "Where were we?")
	h.sink.waitFinal(t, 2)
	if got := pinned(h.llm.LastRequest()); !strings.Contains(got, "Stage: comparing trains") {
		t.Errorf("next turn's system message %q lacks the stage", got)
	}
}

// TestStopDuringToolCall: a Stop while a tool runs ends the turn: the call's result
// says it was cancelled, and the stopped reply is a new message, not a second copy
// of the assistant message that made the call.
func TestStopDuringToolCall(t *testing.T) {
	started := make(chan struct{})
	h := newHarness(t, options{tools: []tools.Tool{{
		Name:        "wait",
		Description: "When to use: never. What it does: waits until cancelled. Parameters: none.",
		Schema:      json.RawMessage(`{"type":"object"}`),
		Execute: func(ctx context.Context, call tools.Call) (string, error) {
			close(started)
			<-ctx.Done()
			return "", ctx.Err()
		},
	}}})
	h.llm.Enqueue(llmtest.Reply{Text: []string{"Let me wait."}, ToolCalls: calls(llmtest.ToolCall{ID: "c1", Name: "wait", Arguments: `{}`})})

	h.send(t, "Wait for me")
	<-started
	if !h.agent.Stop(h.session.ID) {
		t.Fatal("Stop found no run")
	}
	final := h.sink.waitFinal(t, 1)
	h.waitIdle(t)

	if final.Status != store.StatusStopped || len(final.ToolCalls) != 0 {
		t.Errorf("final status %q tool calls %s, want stopped without tool calls", final.Status, final.ToolCalls)
	}
	msgs := h.messages(t)
	if got, want := shape(msgs), []string{"user", "assistant(tool_calls)", "tool(error)", "assistant"}; !slices.Equal(got, want) {
		t.Fatalf("stored %v, want %v", got, want)
	}
	if msgs[1].Status != store.StatusComplete || msgs[1].Content != "Let me wait." {
		t.Errorf("the step message became %q %q", msgs[1].Status, msgs[1].Content)
	}
	if code, _ := toolError(t, msgs[2].Content); code != tools.CodeCanceled {
		t.Errorf("tool result %q, want canceled", msgs[2].Content)
	}
	if last := msgs[3]; last.Seq != final.Seq || last.Status != store.StatusStopped {
		t.Errorf("stored final %+v", last)
	}
	if n := len(h.llm.Requests()); n != 1 {
		t.Errorf("the model was called %d times after Stop", n)
	}
}
