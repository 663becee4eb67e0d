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
