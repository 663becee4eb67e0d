package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"atrium/internal/agent"
	"atrium/internal/errs"
	"atrium/internal/llm"
	"atrium/internal/llm/llmtest"
	"atrium/internal/store"
)

// replyRequests are the chat requests of replies (not of memory extraction or titles):
// those that start with the system prompt.
func replyRequests(h *harness) []llmtest.ChatRequest {
	var out []llmtest.ChatRequest
	for _, r := range h.llm.Requests() {
		if len(r.Chat.Messages) > 0 && strings.HasPrefix(r.Chat.Messages[0].Content, "You are Atrium") {
			out = append(out, r.Chat)
		}
	}
	return out
}

// conversation is a request's messages after the system prompt, as "role: content".
func conversation(req llmtest.ChatRequest) []string {
	var out []string
	for _, m := range req.Messages {
		if m.Role != "system" {
			out = append(out, m.Role+": "+m.Content)
		}
	}
	return out
}

func checkConversation(t *testing.T, req llmtest.ChatRequest, want ...string) {
	t.Helper()
	got := conversation(req)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the model got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// onScreenText is the branch on screen as "role: content" lines.
func onScreenText(t *testing.T, h *harness) []string {
	var out []string
	for _, m := range h.messages(t) {
		out = append(out, m.Role+": "+m.Content)
	}
	return out
}

func TestEditAnswersFromTheEditedBranch(t *testing.T) {
	h := newHarness(t, options{})
	ctx := context.Background()
	h.llm.Enqueue(llmtest.Reply{Text: []string{"Nice cat."}}, llmtest.Reply{Text: []string{"Pixel."}})
	h.send(t, "My cat is Pixel.")
	h.sink.waitFor(t, agent.EventRunEnded, 1)
	h.send(t, "What is my cat called?")
	h.sink.waitFor(t, agent.EventRunEnded, 2)
	second := h.messages(t)[2]

	h.llm.Enqueue(llmtest.Reply{Text: []string{"You did not say."}})
	if err := h.agent.Edit(ctx, h.session, second.ID, "What is my dog called?"); err != nil {
		t.Fatal(err)
	}
	ev := h.sink.waitFor(t, agent.EventBranch, 1)
	if ev.Message == nil || ev.Message.Content != "What is my dog called?" || ev.Message.ParentID != h.messages(t)[1].ID {
		t.Fatalf("branch event %+v", ev.Message)
	}
	final := h.sink.waitFinal(t, 3)
	h.sink.waitFor(t, agent.EventRunEnded, 3)
	reqs := replyRequests(h)
	checkConversation(t, reqs[len(reqs)-1], "user: My cat is Pixel.", "assistant: Nice cat.", "user: What is my dog called?")
	if final.Content != "You did not say." {
		t.Fatalf("reply %q", final.Content)
	}
	if got := strings.Join(onScreenText(t, h), " | "); got != "user: My cat is Pixel. | assistant: Nice cat. | user: What is my dog called? | assistant: You did not say." {
		t.Fatalf("on screen: %s", got)
	}

	// Flip back: the old question and its answer, and the next reply is built from them.
	if err := h.agent.SelectVersion(ctx, h.session, second.ID); err != nil {
		t.Fatal(err)
	}
	if ev := h.sink.waitFor(t, agent.EventBranch, 2); ev.Message != nil || ev.RunID != "" {
		t.Fatalf("a flip announced a run: %+v", ev)
	}
	h.llm.Enqueue(llmtest.Reply{Text: []string{"A cat."}})
	h.send(t, "And what is it?")
	h.sink.waitFor(t, agent.EventRunEnded, 4)
	reqs = replyRequests(h)
	checkConversation(t, reqs[len(reqs)-1], "user: My cat is Pixel.", "assistant: Nice cat.", "user: What is my cat called?",
		"assistant: Pixel.", "user: And what is it?")
}

func TestRegenerateAsksAgainWithoutTheOldReply(t *testing.T) {
	h := newHarness(t, options{})
	ctx := context.Background()
	h.llm.Enqueue(llmtest.Reply{Text: []string{"First."}}, llmtest.Reply{Text: []string{"Two."}})
	h.send(t, "Hello")
	h.sink.waitFor(t, agent.EventRunEnded, 1)
	h.send(t, "Count to two")
	old := h.sink.waitFinal(t, 2)
	h.sink.waitFor(t, agent.EventRunEnded, 2)

	h.llm.Enqueue(llmtest.Reply{Text: []string{"One, two."}})
	if err := h.agent.Regenerate(ctx, h.session, old.ID); err != nil {
		t.Fatal(err)
	}
	ev := h.sink.waitFor(t, agent.EventBranch, 1)
	if ev.Message == nil || ev.Message.Content != "Count to two" || ev.Versions == nil ||
		*ev.Versions != (store.Versions{Index: 2, Count: 2, Prev: old.ID}) {
		t.Fatalf("branch event: message %+v versions %+v", ev.Message, ev.Versions)
	}
	final := h.sink.waitFinal(t, 3)
	h.sink.waitFor(t, agent.EventRunEnded, 3)
	reqs := replyRequests(h)
	checkConversation(t, reqs[len(reqs)-1], "user: Hello", "assistant: First.", "user: Count to two")
	if final.Content != "One, two." || final.ParentID != old.ParentID {
		t.Fatalf("new reply %q with parent %d, want a version of %d's", final.Content, final.ParentID, old.ID)
	}
	if got := strings.Join(onScreenText(t, h), " | "); got != "user: Hello | assistant: First. | user: Count to two | assistant: One, two." {
		t.Fatalf("on screen: %s", got)
	}
	// The user message is not stored again, and not acted on again.
	if n := len(h.messages(t)); n != 4 {
		t.Fatalf("%d messages on screen", n)
	}
}

// Retry after a model error: the failed reply stays as a version, and the request is
// the question alone, without the failed reply's placeholder.
func TestRetryAfterModelError(t *testing.T) {
	h := newHarness(t, options{})
	ctx := context.Background()
	h.llm.Enqueue(llmtest.Reply{Status: 500, ErrorBody: `{"error":{"message":"overloaded"}}`})
	h.send(t, "What is 2+2?")
	failed := h.sink.waitFinal(t, 1)
	h.sink.waitFor(t, agent.EventRunEnded, 1)
	if failed.Status != store.StatusError {
		t.Fatalf("first reply status %q", failed.Status)
	}
	h.llm.Enqueue(llmtest.Reply{Text: []string{"4"}, Usage: &llm.Usage{InputTokens: 3, OutputTokens: 1}})
	if err := h.agent.Regenerate(ctx, h.session, failed.ID); err != nil {
		t.Fatal(err)
	}
	final := h.sink.waitFinal(t, 2)
	h.sink.waitFor(t, agent.EventRunEnded, 2)
	reqs := replyRequests(h)
	if len(reqs) != 2 {
		t.Fatalf("%d reply requests, want 2", len(reqs))
	}
	checkConversation(t, reqs[1], "user: What is 2+2?")
	if final.Status != store.StatusComplete || final.Content != "4" {
		t.Fatalf("retried reply %+v", final)
	}
	if got := strings.Join(onScreenText(t, h), " | "); got != "user: What is 2+2? | assistant: 4" {
		t.Fatalf("on screen: %s", got)
	}
	// The failed reply is one flip away.
	if err := h.agent.SelectVersion(ctx, h.session, failed.ID); err != nil {
		t.Fatal(err)
	}
	if msgs := h.messages(t); len(msgs) != 2 || msgs[1].ID != failed.ID || msgs[1].Status != store.StatusError {
		t.Fatalf("after flipping back: %+v", msgs)
	}
}

// One reply at a time: an edit, a regenerate or a flip while a reply streams is refused
// with a clear reason, and nothing is written.
func TestBranchMovesRefusedWhileAnswering(t *testing.T) {
	h := newHarness(t, options{})
	ctx := context.Background()
	h.llm.Enqueue(llmtest.Reply{Text: []string{"Hi."}})
	h.send(t, "Hello")
	first := h.sink.waitFinal(t, 1)
	h.sink.waitFor(t, agent.EventRunEnded, 1)
	user := h.messages(t)[0]

	h.llm.Enqueue(llmtest.Reply{Text: llmtest.Words(strings.Repeat("slow ", 40)), ChunkDelay: 50 * time.Millisecond})
	h.send(t, "Tell me more")
	h.sink.waitFor(t, agent.EventText, 2)
	before := len(h.messages(t))
	for name, err := range map[string]error{
		"edit":       h.agent.Edit(ctx, h.session, user.ID, "Hello again"),
		"regenerate": h.agent.Regenerate(ctx, h.session, first.ID),
		"flip":       h.agent.SelectVersion(ctx, h.session, first.ID),
	} {
		if !errs.Is(err, errs.Busy) || !strings.Contains(errs.Message(err), "still answering") {
			t.Errorf("%s while answering: %v, want busy", name, err)
		}
	}
	if n := len(h.messages(t)); n != before {
		t.Fatalf("refused moves wrote: %d messages, had %d", n, before)
	}
	h.agent.Stop(h.session.ID)
	stopped := h.sink.waitFinal(t, 2)
	h.sink.waitFor(t, agent.EventRunEnded, 2)
	// Retry after Stop answers the same question again.
	h.llm.Enqueue(llmtest.Reply{Text: []string{"More."}})
	if err := h.agent.Regenerate(ctx, h.session, stopped.ID); err != nil {
		t.Fatal(err)
	}
	h.sink.waitFor(t, agent.EventRunEnded, 3)
	reqs := replyRequests(h)
	checkConversation(t, reqs[len(reqs)-1], "user: Hello", "assistant: Hi.", "user: Tell me more")
}

func TestBranchMovesRefuseBadInput(t *testing.T) {
	h := newHarness(t, options{cfg: agent.Config{MaxMessageBytes: 100}})
	ctx := context.Background()
	h.llm.Enqueue(llmtest.Reply{Text: []string{"Hi."}})
	h.send(t, "Hello")
	reply := h.sink.waitFinal(t, 1)
	h.sink.waitFor(t, agent.EventRunEnded, 1)
	user := h.messages(t)[0]
	other := &store.Session{ID: "session-2", OwnerID: h.session.OwnerID}
	if err := h.db.CreateSession(ctx, other); err != nil {
		t.Fatal(err)
	}
	elsewhere := &store.Message{SessionID: other.ID, Role: store.RoleUser, Content: "elsewhere"}
	if err := h.db.AppendMessage(ctx, elsewhere); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		err  error
		code string
	}{
		{"edit another chat's message", h.agent.Edit(ctx, h.session, elsewhere.ID, "x"), errs.NotFound},
		{"edit a reply", h.agent.Edit(ctx, h.session, reply.ID, "x"), errs.Invalid},
		{"empty edit", h.agent.Edit(ctx, h.session, user.ID, "  \n"), errs.Invalid},
		{"oversized edit", h.agent.Edit(ctx, h.session, user.ID, strings.Repeat("x", 101)), errs.TooLarge},
		{"regenerate a user message", h.agent.Regenerate(ctx, h.session, user.ID), errs.Invalid},
		{"regenerate another chat's message", h.agent.Regenerate(ctx, h.session, elsewhere.ID), errs.NotFound},
		{"flip to another chat's message", h.agent.SelectVersion(ctx, h.session, elsewhere.ID), errs.NotFound},
	}
	for _, tc := range cases {
		if errs.Code(tc.err) != tc.code {
			t.Errorf("%s: %v, want %s", tc.name, tc.err, tc.code)
		}
	}
	if got := strings.Join(onScreenText(t, h), " | "); got != "user: Hello | assistant: Hi." {
		t.Fatalf("refusals changed the chat: %s", got)
	}
	if n := h.sink.count(agent.EventBranch); n != 0 {
		t.Fatalf("%d branch events for refused moves", n)
	}
	if n := len(replyRequests(h)); n != 1 {
		t.Fatalf("%d reply requests", n)
	}
}

// Memory extraction reads the edited text (a new message), and is not run again for a
// regenerated reply (its message was read the first time).
func TestBranchMemoryExtraction(t *testing.T) {
	h, _ := extractHarness(t)
	ctx := context.Background()
	extracted := func() []string {
		var out []string
		for _, r := range h.llm.Requests() {
			if m := r.Chat.Messages; len(m) > 1 && strings.Contains(m[0].Content, "long-term memory") {
				out = append(out, m[1].Content)
			}
		}
		return out
	}
	h.send(t, "I live in Berlin.")
	h.sink.waitFor(t, agent.EventRunEnded, 1)
	user := h.messages(t)[0]
	if err := h.agent.Edit(ctx, h.session, user.ID, "I live in Lisbon."); err != nil {
		t.Fatal(err)
	}
	h.sink.waitFor(t, agent.EventRunEnded, 2)
	got := extracted()
	if len(got) != 2 || !strings.Contains(got[0], "Berlin") || !strings.Contains(got[1], "Lisbon") || strings.Contains(got[1], "Berlin") {
		t.Fatalf("extraction prompts: %q", got)
	}
	if err := h.agent.Regenerate(ctx, h.session, h.messages(t)[1].ID); err != nil {
		t.Fatal(err)
	}
	h.sink.waitFor(t, agent.EventRunEnded, 3)
	if n := len(extracted()); n != 2 {
		t.Fatalf("%d extraction calls after a regenerate, want still 2", n)
	}
}
