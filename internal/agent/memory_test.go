package agent_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	h.sink.waitFinal(t, 1)
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

	say("forget that I prefer metric units", "Forgot 1 memory")
	say("forget about my favourite colour", "nothing was forgotten")
	if got, want := texts(), []string{"fact: 我的猫叫小白"}; !slices.Equal(got, want) {
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
	if got, want := texts(), []string{"fact: 我的猫叫小白"}; !slices.Equal(got, want) {
		t.Errorf("memories after non-requests: %q, want %q", got, want)
	}
}
