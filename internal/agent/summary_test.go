package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"atrium/internal/agent"
	"atrium/internal/contextwin"
	"atrium/internal/llm"
	"atrium/internal/llm/llmtest"
	"atrium/internal/store"
	"atrium/internal/trace"
)

// seedTurns stores finished question/answer turns in the harness's session.
func seedTurns(t *testing.T, h *harness, names ...string) {
	t.Helper()
	for _, n := range names {
		for _, m := range []*store.Message{
			{SessionID: h.session.ID, Role: store.RoleUser, Content: n + " question"},
			{SessionID: h.session.ID, Role: store.RoleAssistant, Content: n + " answer", Model: "fake-model"},
		} {
			if err := h.db.AppendMessage(context.Background(), m); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func (h *harness) storedSession(t *testing.T) store.Session {
	t.Helper()
	s, err := h.db.SessionForOwner(context.Background(), h.session.ID, h.session.OwnerID)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// contents lists the contents of a received request's messages.
func contents(req llmtest.Recorded) []string {
	var out []string
	for _, m := range req.Chat.Messages {
		out = append(out, m.Content)
	}
	return out
}

var smallWindow = agent.Config{SystemPrompt: "Be brief.", Budgets: contextwin.Budgets{RecentTurns: 2}}

// TestOldTurnsAreFoldedIntoSummary: turns that leave the verbatim window are folded
// into the rolling summary by a model call the user never sees, and later requests
// carry the summary instead of those turns.
func TestOldTurnsAreFoldedIntoSummary(t *testing.T) {
	h := newHarness(t, options{cfg: smallWindow})
	seedTurns(t, h, "first", "second", "third")
	const summary = "The user asked a first and a second question; both were answered."
	h.llm.Enqueue(
		llmtest.Reply{Text: []string{"fourth answer"}},
		llmtest.Reply{Text: llmtest.Words(summary)},
	)

	h.send(t, "fourth question")
	h.sink.waitFinal(t, 1)
	h.waitIdle(t)

	reqs := h.llm.Requests()
	if len(reqs) != 2 {
		t.Fatalf("the model was called %d times, want the reply and one summary", len(reqs))
	}
	// The reply still had every turn: nothing was summarised yet.
	want := []string{"Be brief.", "first question", "first answer", "second question", "second answer",
		"third question", "third answer", "fourth question"}
	if got := contents(reqs[0]); !slices.Equal(got, want) {
		t.Errorf("reply request %q\nwant %q", got, want)
	}
	fold := reqs[1].Chat
	if len(fold.Tools) != 0 || len(fold.Messages) != 2 || fold.Messages[0].Role != "system" || fold.Messages[1].Role != "user" {
		t.Fatalf("summary request %+v, want a system and a user message and no tools", fold)
	}
	prompt := fold.Messages[1].Content
	for _, s := range []string{"first question", "first answer", "second question", "second answer"} {
		if !strings.Contains(prompt, s) {
			t.Errorf("summary prompt lacks %q:\n%s", s, prompt)
		}
	}
	for _, s := range []string{"third", "fourth"} {
		if strings.Contains(prompt, s) {
			t.Errorf("summary prompt folds the recent %s turn:\n%s", s, prompt)
		}
	}

	sess := h.storedSession(t)
	if sess.Summary != summary || sess.SummarySeq != 4 {
		t.Errorf("session summary %q up to seq %d, want %q up to 4", sess.Summary, sess.SummarySeq, summary)
	}
	// The summary is not a message and was not streamed to the user.
	for _, m := range h.messages(t) {
		if strings.Contains(m.Content, "both were answered") {
			t.Errorf("summary stored as a %s message", m.Role)
		}
	}
	var streamed strings.Builder
	for _, ev := range h.sink.all() {
		if ev.Kind == agent.EventText {
			streamed.WriteString(ev.Text)
		}
	}
	if streamed.String() != "fourth answer" {
		t.Errorf("streamed %q, want only the reply", streamed.String())
	}
	if n := h.sink.count(agent.EventFinal); n != 1 {
		t.Errorf("%d final events", n)
	}

	// The next reply gets the summary instead of the folded turns.
	h.llm.Enqueue(llmtest.Reply{Text: []string{"fifth answer"}}, llmtest.Reply{Text: []string{"Updated summary."}})
	h.send(t, "fifth question")
	h.sink.waitFinal(t, 2)
	h.waitIdle(t)
	want = []string{"Be brief.", contextwin.SummaryHeader + summary, "third question", "third answer",
		"fourth question", "fourth answer", "fifth question"}
	if got := contents(h.llm.Requests()[2]); !slices.Equal(got, want) {
		t.Errorf("next request %q\nwant %q", got, want)
	}
	if sess := h.storedSession(t); sess.SummarySeq != 6 || sess.Summary != "Updated summary." {
		t.Errorf("after the next turn the summary is %q up to %d, want the update up to 6", sess.Summary, sess.SummarySeq)
	}
}

// TestFailedSummaryKeepsTurnsVerbatim: when the summary call fails the watermark
// stays, the failure is recorded, and the next request still carries the old turns.
func TestFailedSummaryKeepsTurnsVerbatim(t *testing.T) {
	h := newHarness(t, options{cfg: smallWindow})
	seedTurns(t, h, "first", "second", "third")
	h.llm.Enqueue(
		llmtest.Reply{Text: []string{"fourth answer"}},
		llmtest.Reply{Status: 500},
	)

	h.send(t, "fourth question")
	if final := h.sink.waitFinal(t, 1); final.Status != store.StatusComplete || final.Content != "fourth answer" {
		t.Fatalf("final %+v", final)
	}
	h.waitIdle(t)

	if n := len(h.llm.Requests()); n != 2 {
		t.Fatalf("the model was called %d times, want the reply and the failed summary", n)
	}
	if sess := h.storedSession(t); sess.SummarySeq != 0 || sess.Summary != "" {
		t.Errorf("after a failed summary the session has %q up to %d, want nothing", sess.Summary, sess.SummarySeq)
	}

	ctx := context.Background()
	runs, err := h.trace.Runs(ctx, h.session.OwnerID, h.session.ID, 0)
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs %+v (%v)", runs, err)
	}
	ri, spans, err := h.trace.Run(ctx, h.session.OwnerID, runs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if ri.Status != trace.StatusComplete {
		t.Errorf("run status %q: the reply itself succeeded", ri.Status)
	}
	var sum *trace.SpanInfo
	for i := range spans {
		if spans[i].Kind == trace.KindSummary {
			sum = &spans[i]
		}
	}
	if sum == nil {
		t.Fatalf("no summary span in %v", spanKinds(spans))
	}
	if sum.Status != trace.SpanError || !strings.Contains(sum.Error, "500") {
		t.Errorf("summary span status %q error %q, want error mentioning the 500", sum.Status, sum.Error)
	}
	if sum.Seq != len(spans) {
		t.Errorf("summary span is #%d of %d, want last (after the final reply)", sum.Seq, len(spans))
	}

	// Nothing was dropped: the next reply sees every old turn verbatim.
	h.llm.Enqueue(llmtest.Reply{Text: []string{"fifth answer"}})
	h.send(t, "fifth question")
	h.sink.waitFinal(t, 2)
	h.waitIdle(t)
	want := []string{"Be brief.", "first question", "first answer", "second question", "second answer",
		"third question", "third answer", "fourth question", "fourth answer", "fifth question"}
	if got := contents(h.llm.Requests()[2]); !slices.Equal(got, want) {
		t.Errorf("next request %q\nwant %q", got, want)
	}
	// That turn backed off (no fold after one failure); the next one retries, and its
	// fold covers everything outside the last two turns.
	if n := len(h.llm.Requests()); n != 3 {
		t.Errorf("%d model calls, want no fold on the turn after a failure", n)
	}
	h.llm.Enqueue(llmtest.Reply{Text: []string{"sixth answer"}}, llmtest.Reply{Text: []string{"A summary."}})
	h.send(t, "sixth question")
	h.sink.waitFinal(t, 3)
	h.waitIdle(t)
	if sess := h.storedSession(t); sess.SummarySeq != 8 || sess.Summary != "A summary." {
		t.Errorf("after the retry the summary is %q up to %d, want it up to 8", sess.Summary, sess.SummarySeq)
	}
}

// TestFailedFoldBacksOff is issue 10 item 2: a summarizer that keeps failing is not
// asked again on every turn (the prompt grew each time), but after a growing number
// of turns.
func TestFailedFoldBacksOff(t *testing.T) {
	h := newHarness(t, options{cfg: smallWindow})
	seedTurns(t, h, "first", "second", "third")
	var folds atomic.Int32
	h.llm.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		if strings.HasPrefix(req.Messages[0].Content, "You maintain the rolling summary") {
			folds.Add(1)
			return llmtest.Reply{Status: 500}
		}
		return llmtest.Reply{Text: []string{"ok"}}
	})
	const turns = 8
	for i := range turns {
		h.send(t, fmt.Sprintf("question %d", i))
		h.sink.waitFinal(t, i+1)
		h.waitIdle(t)
	}
	// Every turn had unsummarised turns. Backoff: tries at turns 1, 3, 7 (waits 1, 3).
	if folds.Load() != 3 {
		t.Errorf("%d fold attempts in %d turns, want 3 (backing off 1, then 3 turns)", folds.Load(), turns)
	}
	if sess := h.storedSession(t); sess.SummarySeq != 0 {
		t.Errorf("summary advanced to %d although every fold failed", sess.SummarySeq)
	}
}

// TestFoldPromptCutsLongToolArguments is issue 10 item 2: tool-call arguments are cut
// in the fold prompt as long results are.
func TestFoldPromptCutsLongToolArguments(t *testing.T) {
	var got []llm.Message
	sum := func(_ context.Context, msgs []llm.Message) (string, error) { got = msgs; return "short", nil }
	long := `{"text":"` + strings.Repeat("lorem ipsum dolor sit amet ", 2000) + `"}`
	calls, _ := json.Marshal([]llm.ToolCall{{ID: "c1", Name: "write", Arguments: long}})
	turns := []store.Message{
		{Seq: 1, Role: store.RoleUser, Content: "save it"},
		{Seq: 2, Role: store.RoleAssistant, ToolCalls: calls},
		{Seq: 3, Role: store.RoleTool, ToolCallID: "c1", Content: "saved"},
	}
	tok := contextwin.NewTokenizer()
	if _, err := contextwin.Fold(context.Background(), sum, "", turns, contextwin.DefaultBudgets(), tok); err != nil {
		t.Fatal(err)
	}
	prompt := got[1].Content
	if n := tok.Count(prompt); n > 1500 || !strings.Contains(prompt, "tokens omitted") {
		t.Errorf("fold prompt is %d tokens (the arguments alone are %d), want them cut with a marker", n, tok.Count(long))
	}
}
