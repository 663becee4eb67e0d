package agent_test

import (
	"context"
	"strings"
	"testing"

	"atrium/internal/agent"
	"atrium/internal/contextwin"
	"atrium/internal/store"
)

// The user's custom instructions and the chat's own reach the model in the pinned
// system message, and the context report counts them on their own row.
func TestInstructionsReachTheModel(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, options{})
	if err := h.db.SetUserInstructions(ctx, h.session.OwnerID, store.Instructions{AboutMe: "I am a nurse.", AnswerStyle: "Be brief."}); err != nil {
		t.Fatal(err)
	}
	if err := h.db.SetSessionSystemPrompt(ctx, h.session.ID, h.session.OwnerID, "Answer in French."); err != nil {
		t.Fatal(err)
	}
	h.send(t, "hello")
	h.sink.waitFinal(t, 1)
	h.waitIdle(t)
	reqs := h.llm.Requests()
	if len(reqs) == 0 {
		t.Fatal("no model request")
	}
	sys := reqs[0].Chat.Messages[0]
	for _, want := range []string{"Instructions for this chat:\nAnswer in French.", "About the user:\nI am a nurse.", "How the user wants answers:\nBe brief."} {
		if sys.Role != "system" || !strings.Contains(sys.Content, want) {
			t.Errorf("system message lacks %q: %+v", want, sys)
		}
	}
	rep := h.sink.waitFor(t, agent.EventContext, 1).Report
	for _, z := range rep.Zones {
		if z.Name == contextwin.ZoneInstructions && z.Tokens == 0 {
			t.Errorf("instructions zone empty: %+v", rep.Zones)
		}
	}
}
