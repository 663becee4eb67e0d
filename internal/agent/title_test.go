package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"atrium/internal/agent"
	"atrium/internal/llm/llmtest"
	"atrium/internal/store"
)

// titleModel answers title requests with answer and everything else with "ok".
func titleModel(answer llmtest.Reply) func(llmtest.ChatRequest) llmtest.Reply {
	return func(req llmtest.ChatRequest) llmtest.Reply {
		if len(req.Messages) > 0 && strings.HasPrefix(req.Messages[0].Content, "Write a title for this conversation") {
			return answer
		}
		return llmtest.Reply{Text: []string{"Here is a plan for your trip."}}
	}
}

// titleRequests counts the title requests the model got.
func titleRequests(h *harness) int {
	n := 0
	for _, r := range h.llm.Requests() {
		if len(r.Chat.Messages) > 0 && strings.HasPrefix(r.Chat.Messages[0].Content, "Write a title for this conversation") {
			n++
		}
	}
	return n
}

func (h *harness) title(t *testing.T) store.Session {
	t.Helper()
	s, err := h.db.SessionForOwner(context.Background(), h.session.ID, h.session.OwnerID)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestGeneratedTitle: after the first reply the model's title replaces the first-line
// title (cleaned of reasoning, a "Title:" prefix and quotes) and is announced; later
// replies do not ask again; a title the user typed is never replaced; a failed title
// call leaves the first line, once.
func TestGeneratedTitle(t *testing.T) {
	ctx := context.Background()
	start := func(t *testing.T, answer llmtest.Reply) *harness {
		h := newHarness(t, options{cfg: agent.Config{GenerateTitles: true}})
		h.llm.SetHandler(titleModel(answer))
		if ok, err := h.db.SetFirstLineTitle(ctx, h.session.ID, h.session.OwnerID, "plan a trip to paris for me please"); err != nil || !ok {
			t.Fatalf("first-line title: %v %v", ok, err)
		}
		return h
	}
	turn := func(t *testing.T, h *harness, n int) {
		h.send(t, "plan a trip to paris for me please")
		h.sink.waitFinal(t, n)
		h.waitIdle(t)
	}

	t.Run("model title", func(t *testing.T) {
		h := start(t, llmtest.Reply{Text: []string{"<think>The user wants Paris.</think>\n", `**Title: "Paris Trip Plan".**`}})
		turn(t, h, 1)
		if s := h.title(t); s.Title != "Paris Trip Plan" || s.TitleSource != store.TitleByModel {
			t.Fatalf("title %q (%s), want the model's, cleaned", s.Title, s.TitleSource)
		}
		ev := h.sink.waitFor(t, agent.EventTitle, 1)
		if ev.Session == nil || ev.Session.Title != "Paris Trip Plan" {
			t.Errorf("title event %+v", ev)
		}
		turn(t, h, 2)
		if n := titleRequests(h); n != 1 {
			t.Errorf("%d title requests after two replies, want 1", n)
		}
	})

	t.Run("user title wins", func(t *testing.T) {
		h := start(t, llmtest.Reply{Text: []string{"Paris Trip Plan"}, ChunkDelay: 300 * time.Millisecond})
		h.send(t, "plan a trip to paris for me please")
		h.sink.waitFinal(t, 1)
		// Renamed while the title call is under way.
		if err := h.db.RenameSession(ctx, h.session.ID, h.session.OwnerID, "My own title"); err != nil {
			t.Fatal(err)
		}
		h.waitIdle(t)
		if s := h.title(t); s.Title != "My own title" || s.TitleSource != store.TitleByUser {
			t.Fatalf("title %q (%s) after the user renamed the chat", s.Title, s.TitleSource)
		}
	})

	t.Run("failed title keeps the first line", func(t *testing.T) {
		h := start(t, llmtest.Reply{Status: 500})
		turn(t, h, 1)
		turn(t, h, 2)
		if s := h.title(t); s.Title != "plan a trip to paris for me please" || s.TitleSource != store.TitleByModel {
			t.Fatalf("title %q (%s) after a failed title call", s.Title, s.TitleSource)
		}
		if n := titleRequests(h); n != 1 {
			t.Errorf("%d title requests, want 1 (no retry on every reply)", n)
		}
	})

	t.Run("empty answer keeps the first line", func(t *testing.T) {
		h := start(t, llmtest.Reply{Text: []string{"\n  \"\" \n"}})
		turn(t, h, 1)
		if s := h.title(t); s.Title != "plan a trip to paris for me please" {
			t.Fatalf("title %q after an empty answer", s.Title)
		}
	})
}
