package agent_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"atrium/internal/agent"
	"atrium/internal/llm/llmtest"
	"atrium/internal/memory"
	"atrium/internal/store"
	"atrium/internal/trace"
)

// TestMemoriesReachThePinnedZone: a memory saved in another chat is looked up for the
// user's message, sent to the model in the pinned zone with its date, recorded as ids
// and scores (never its text) and counted as used; another user's memory is not.
func TestMemoriesReachThePinnedZone(t *testing.T) {
	h := newHarness(t, options{})
	ctx := context.Background()
	_, err := h.memory.Save(ctx, h.session.OwnerID, memory.KindPreference, "I prefer metric units",
		memory.Source{Kind: memory.SourceManual}, 0.9)
	if err != nil {
		t.Fatal(err)
	}
	fact, err := h.memory.Save(ctx, h.session.OwnerID, memory.KindFact, "My cat is called Pixel",
		memory.Source{Kind: memory.SourceManual}, 0.9)
	if err != nil {
		t.Fatal(err)
	}
	bob := &store.User{Username: "bob", PasswordHash: "x", Role: store.RoleUser}
	if err := h.db.CreateUser(ctx, bob); err != nil {
		t.Fatal(err)
	}
	if _, err := h.memory.Save(ctx, bob.ID, memory.KindFact, "My cat is called Tiger", memory.Source{Kind: memory.SourceManual}, 0.9); err != nil {
		t.Fatal(err)
	}
	h.llm.Enqueue(llmtest.Reply{Text: []string{"I know its name."}})

	h.send(t, "what is my cat called?")
	if final := h.sink.waitFinal(t, 1); !slices.Contains(final.Memories, fact.ID) {
		t.Errorf("the reply does not say it used the memory: %v", final.Memories)
	}
	ev := h.sink.waitFor(t, agent.EventMemory, 1)
	h.sink.waitFor(t, agent.EventRunEnded, 1)

	sys := h.llm.LastRequest().Chat.Messages[0]
	if sys.Role != "system" || !strings.Contains(sys.Content, "My cat is called Pixel ("+fact.UpdatedAt.Format("2006-01-02")+")") {
		t.Errorf("system message does not carry the memory with its date:\n%s", sys.Content)
	}
	if strings.Contains(sys.Content, "Tiger") {
		t.Errorf("another user's memory reached the model:\n%s", sys.Content)
	}
	if ev.Memory == nil || len(ev.Memory.Hits) == 0 || ev.Memory.Hits[0].ID != fact.ID || ev.Memory.Err != nil {
		t.Fatalf("memory event %+v", ev.Memory)
	}

	runs, err := h.trace.Runs(ctx, h.session.OwnerID, h.session.ID, 0)
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs %v %v", runs, err)
	}
	_, spans, err := h.trace.Run(ctx, h.session.OwnerID, runs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(spans, func(s trace.SpanInfo) bool { return s.Kind == trace.KindMemory })
	if i < 0 || !strings.Contains(string(spans[i].Data), fact.ID) || strings.Contains(string(spans[i].Data), "Pixel") {
		t.Fatalf("memory span %+v", spans)
	}
	// Used, the memory is still nowhere in the database files in the clear: the
	// recorded model request that carried it is sealed.
	for _, f := range []string{"atrium.db", "atrium.db-wal", "atrium.db-shm"} {
		b, err := os.ReadFile(filepath.Join(h.cfg.DataDir, f))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte("Pixel")) {
			t.Errorf("%s holds the memory's text in the clear", f)
		}
	}
	got, err := h.memory.Get(ctx, h.session.OwnerID, fact.ID)
	if err != nil || got.UseCount != 1 || got.LastUsedAt == nil {
		t.Errorf("after use: %+v %v", got, err)
	}

	// A preference goes in as a preference.
	h.llm.Enqueue(llmtest.Reply{Text: []string{"Metric."}})
	h.send(t, "which units do I prefer?")
	h.sink.waitFinal(t, 2)
	if sys := h.llm.LastRequest().Chat.Messages[0].Content; !strings.Contains(sys, "User preferences:\n- I prefer metric units (") {
		t.Errorf("system message does not carry the preference:\n%s", sys)
	}
}

// TestExplicitMemoryRequests: "remember …" and "记住…" save without a model call and
// say so; a secret is refused with a notice; "forget …" removes the memories that
// share its words, and nothing else; the model still answers every message.
func TestExplicitMemoryRequests(t *testing.T) {
	h := newHarness(t, options{})
	ctx := context.Background()
	owner := h.session.OwnerID
	for i := 0; i < 5; i++ {
		h.llm.Enqueue(llmtest.Reply{Text: []string{"OK."}})
	}
	finals, notices := 0, 0
	say := func(text, wantNotice string) {
		t.Helper()
		h.send(t, text)
		finals++
		h.sink.waitFinal(t, finals)
		notices++
		ev := h.sink.waitFor(t, agent.EventNotice, notices)
		if !strings.Contains(ev.Text, wantNotice) {
			t.Errorf("%q: notice %q, want %q", text, ev.Text, wantNotice)
		}
	}
	texts := func() []string {
		list, err := h.memory.List(ctx, owner)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range list {
			out = append(out, m.Kind+": "+m.Text)
		}
		slices.Sort(out)
		return out
	}

	say("Please remember that I prefer metric units", "Saved to memory")
	say("记住：我的猫叫小白", "Saved to memory")
	say("remember my password is hunter2hunter2", "Not saved to memory")
	if got, want := texts(), []string{"fact: 我的猫叫小白", "preference: I prefer metric units"}; !slices.Equal(got, want) {
		t.Fatalf("memories %q, want %q", got, want)
	}
	list, _ := h.memory.List(ctx, owner)
	for _, m := range list {
		if m.Source.Kind != memory.SourceChat || m.Source.SessionID != h.session.ID || m.Source.MessageSeq == nil {
			t.Errorf("source of %q: %+v", m.Text, m.Source)
		}
	}

	if _, err := h.memory.Save(ctx, owner, memory.KindPreference, "I prefer tea over coffee", memory.Source{Kind: memory.SourceManual}, 0.9); err != nil {
		t.Fatal(err)
	}
	say("forget that I prefer metric units", "Forgot 1 memory") // not the tea, which shares only "prefer"
	say("forget about my favourite colour", "nothing was forgotten")
	if got, want := texts(), []string{"fact: 我的猫叫小白", "preference: I prefer tea over coffee"}; !slices.Equal(got, want) {
		t.Fatalf("after forgetting: %q, want %q", got, want)
	}
	if n := len(h.llm.Requests()); n != 5 {
		t.Errorf("the model was called %d times for 5 messages", n)
	}

	// Questions and pronouns are not requests: nothing is saved or forgotten.
	for _, text := range []string{"Remember when we talked about Rome?", "forget it", "Forget it."} {
		h.llm.Enqueue(llmtest.Reply{Text: []string{"OK."}})
		h.send(t, text)
		finals++
		h.sink.waitFinal(t, finals)
	}
	if n := h.sink.count(agent.EventNotice); n != notices {
		t.Errorf("%d notices after questions and pronouns, want still 5", n)
	}
	if got, want := texts(), []string{"fact: 我的猫叫小白", "preference: I prefer tea over coffee"}; !slices.Equal(got, want) {
		t.Errorf("memories after non-requests: %q, want %q", got, want)
	}
}

// TestMemoryExtraction: after a reply, the model is asked (with the user's words and
// the nearest memories, numbered) what to keep. An update replaces the old fact in
// place, a duplicate add is dropped, nothing is written for small talk, and an answer
// that is not the expected JSON or names a memory it was not shown writes nothing.
func TestMemoryExtraction(t *testing.T) {
	h := newHarness(t, options{cfg: agent.Config{ExtractMemories: true}})
	ctx := context.Background()
	owner := h.session.OwnerID
	var mu sync.Mutex // the fake model answers on its own goroutines
	var extractions []llmtest.ChatRequest
	var answer func(prompt string) string
	h.llm.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		if strings.Contains(req.Messages[0].Content, "long-term memory") {
			mu.Lock()
			defer mu.Unlock()
			extractions = append(extractions, req)
			return llmtest.Reply{Text: []string{answer(req.Messages[1].Content)}}
		}
		return llmtest.Reply{Text: []string{"Nice to hear that, tell me more."}}
	})
	turns := 0
	turn := func(text string, ans func(prompt string) string) {
		t.Helper()
		mu.Lock()
		answer = ans
		mu.Unlock()
		h.send(t, text)
		turns++
		h.sink.waitFor(t, agent.EventRunEnded, turns)
	}
	texts := func() []string {
		list, err := h.memory.List(ctx, owner)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range list {
			out = append(out, m.Text)
		}
		slices.Sort(out)
		return out
	}
	// number finds the n a memory was shown as in the extraction prompt.
	number := func(prompt, text string) string {
		for _, line := range strings.Split(prompt, "\n") {
			if n, rest, ok := strings.Cut(line, ". "); ok && strings.HasSuffix(rest, text) {
				return n
			}
		}
		return "0"
	}

	turn("I moved to Berlin last month, and I am vegetarian.", func(string) string {
		return "```json\n" + `{"actions":[{"op":"add","kind":"fact","text":"I live in Berlin"},` +
			`{"op":"add","kind":"preference","text":"I am vegetarian"}]}` + "\n```"
	})
	if got, want := texts(), []string{"I am vegetarian", "I live in Berlin"}; !slices.Equal(got, want) {
		t.Fatalf("after the first turn: %q, want %q", got, want)
	}
	mu.Lock()
	first := extractions[0].Messages[1].Content
	mu.Unlock()
	if !strings.Contains(first, "I moved to Berlin last month") || strings.Contains(first, "tell me more") ||
		strings.Contains(first, "You are Atrium") {
		t.Errorf("the extraction saw more than the user's words:\n%s", first)
	}

	turn("Actually I moved again, I live in Munich now. And I am still vegetarian.", func(p string) string {
		return `{"actions":[{"op":"update","n":` + number(p, "I live in Berlin") + `,"text":"I live in Munich"},` +
			`{"op":"add","kind":"preference","text":"I am vegetarian"}]}`
	})
	if got, want := texts(), []string{"I am vegetarian", "I live in Munich"}; !slices.Equal(got, want) {
		t.Fatalf("after the update: %q, want %q (the old fact replaced, the duplicate dropped)", got, want)
	}

	turn("What a nice day.", func(string) string { return `{"actions":[]}` })
	turn("Hmm.", func(string) string { return "Sure! I will remember that." })
	turn("I stopped being vegetarian.", func(string) string { return `{"actions":[{"op":"delete","n":9}]}` })
	if got, want := texts(), []string{"I am vegetarian", "I live in Munich"}; !slices.Equal(got, want) {
		t.Fatalf("after small talk and bad answers: %q, want %q", got, want)
	}
	turn("I stopped being vegetarian.", func(p string) string {
		return `{"actions":[{"op":"delete","n":` + number(p, "I am vegetarian") + `}]}`
	})
	if got, want := texts(), []string{"I live in Munich"}; !slices.Equal(got, want) {
		t.Fatalf("after the delete: %q, want %q", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(extractions) != turns {
		t.Errorf("%d extraction calls for %d turns", len(extractions), turns)
	}
}

// TestForgottenMemoryLeavesNoTrace: a memory the model found with memory_search lives
// in the tool result and the run's trace; forgetting it scrubs both, so its text is
// nowhere in the database files afterwards.
func TestForgottenMemoryLeavesNoTrace(t *testing.T) {
	h := newHarness(t, options{})
	ctx := context.Background()
	m, err := h.memory.Save(ctx, h.session.OwnerID, memory.KindFact, "My bicycle is a green Gazelle <3",
		memory.Source{Kind: memory.SourceManual}, 0.9)
	if err != nil {
		t.Fatal(err)
	}
	h.llm.Enqueue(
		llmtest.Reply{ToolCalls: calls(llmtest.ToolCall{ID: "c1", Name: memory.ToolSearch, Arguments: `{"query":"bicycle"}`})},
		llmtest.Reply{Text: []string{"You ride a Dutch bike."}},
	)
	h.send(t, "what do I ride?")
	h.sink.waitFinal(t, 1)
	h.sink.waitFor(t, agent.EventRunEnded, 1)
	dbBytes := func() []byte {
		var all []byte
		for _, f := range []string{"atrium.db", "atrium.db-wal", "atrium.db-shm"} {
			b, err := os.ReadFile(filepath.Join(h.cfg.DataDir, f))
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			all = append(all, b...)
		}
		return all
	}
	var toolResult string
	for _, msg := range h.messages(t) {
		if msg.Role == store.RoleTool {
			toolResult = msg.Content
		}
	}
	if !strings.Contains(toolResult, "green Gazelle") {
		t.Fatalf("the search result does not hold the memory (the test would prove nothing): %q", toolResult)
	}

	if err := h.memory.Forget(ctx, h.session.OwnerID, m.ID); err != nil {
		t.Fatal(err)
	}
	for _, msg := range h.messages(t) {
		if msg.Role == store.RoleTool && (strings.Contains(msg.Content, "Gazelle") || !strings.Contains(msg.Content, "[forgotten memory]")) {
			t.Errorf("tool result after forgetting: %q", msg.Content)
		}
	}
	if b := dbBytes(); bytes.Contains(b, []byte("Gazelle")) {
		t.Error("the forgotten memory's text is still in the database files")
	}
}

// TestMemoryOffAndTemporaryChats: a temporary chat, and any chat of a user who turned
// memory off, neither reads nor writes memory: no lookup, no "remember" acted on, no
// extraction, and the memory tools are not offered.
func TestMemoryOffAndTemporaryChats(t *testing.T) {
	h := newHarness(t, options{cfg: agent.Config{ExtractMemories: true}})
	ctx := context.Background()
	owner := h.session.OwnerID
	if _, err := h.memory.Save(ctx, owner, memory.KindFact, "My cat is called Pixel", memory.Source{Kind: memory.SourceManual}, 0.9); err != nil {
		t.Fatal(err)
	}
	tmp := store.Session{ID: "temporary-1", OwnerID: owner, Temporary: true}
	if err := h.db.CreateSession(ctx, &tmp); err != nil {
		t.Fatal(err)
	}
	check := func(name string, s store.Session, finals int) {
		t.Helper()
		h.llm.Enqueue(llmtest.Reply{Text: []string{"OK."}})
		if err := h.agent.Send(ctx, s, "remember that my cat is called Pixel, what is my cat called?"); err != nil {
			t.Fatal(err)
		}
		h.sink.waitFinal(t, finals)
		h.sink.waitFor(t, agent.EventRunEnded, finals)
		req := h.llm.LastRequest().Chat
		if strings.Contains(req.Messages[0].Content, "Pixel") {
			t.Errorf("%s: the memory reached the model", name)
		}
		for _, tool := range req.Tools {
			if strings.HasPrefix(tool.Name, "memory_") {
				t.Errorf("%s: %s offered", name, tool.Name)
			}
		}
		if n := len(h.llm.Requests()); n != finals {
			t.Errorf("%s: %d model calls for %d replies (an extraction ran)", name, n, finals)
		}
		if list, _ := h.memory.List(ctx, owner); len(list) != 1 {
			t.Errorf("%s: %d memories, want the 1 saved before", name, len(list))
		}
	}
	check("temporary chat", tmp, 1)
	if err := h.memory.SetSettings(ctx, owner, memory.Settings{Enabled: false}); err != nil {
		t.Fatal(err)
	}
	check("memory off", h.session, 2)
	if n := h.sink.count(agent.EventMemory); n != 0 {
		t.Errorf("%d memory events where memory is off", n)
	}
}
