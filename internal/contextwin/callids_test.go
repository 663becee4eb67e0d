package contextwin_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"atrium/internal/contextwin"
	"atrium/internal/llm"
	"atrium/internal/store"
)

// reusedIDTurns is a chat with a provider that reuses its call ids: "call_1" in every
// turn, "0", "" (twice in one step), and "call_1" twice in one step. Each result's
// text names the call it answers (message id and index), and results are stored in
// call order as the agent does.
func reusedIDTurns() []store.Message {
	steps := [][]string{{"call_1"}, {"call_1"}, {"0"}, {"", ""}, {"call_1", "call_1"}, {"call_1"}}
	var msgs []store.Message
	seq := int64(0)
	next := func(m store.Message) store.Message {
		seq++
		m.ID, m.Seq, m.Status = seq, seq, store.StatusComplete
		msgs = append(msgs, m)
		return m
	}
	for i, ids := range steps {
		next(store.Message{Role: store.RoleUser, Content: fmt.Sprintf("question %d", i)})
		var parts []string
		for k, id := range ids {
			parts = append(parts, fmt.Sprintf(`{"id":%q,"name":"tool%d","arguments":"{}"}`, id, k))
		}
		step := next(store.Message{Role: store.RoleAssistant, ToolCalls: []byte("[" + strings.Join(parts, ",") + "]")})
		for k, id := range ids {
			next(store.Message{Role: store.RoleTool, ToolCallID: id, CallKey: store.ToolCallKey(step.ID, k),
				Content: fmt.Sprintf("result of %d/%d", step.ID, k)})
		}
		next(store.Message{Role: store.RoleAssistant, Content: fmt.Sprintf("answer %d", i)})
	}
	return msgs
}

// TestAssembleReusedCallIDs: with a provider that reuses call ids, every result in the
// request follows its own call (its text names that call), every call id of the
// request is distinct and not empty, and a provider id is kept where it is unique.
func TestAssembleReusedCallIDs(t *testing.T) {
	in := contextwin.Input{Messages: reusedIDTurns()}
	out, rep := contextwin.Assemble(in, contextwin.DefaultBudgets(), wordTok{})
	checkInvariants(t, in, out, rep)
	if len(rep.Interrupted) > 0 {
		t.Errorf("calls filled in as interrupted: %v", rep.Interrupted)
	}
	seen := map[string]bool{}
	results := 0
	var step *llm.Message
	var stepSeq int64
	for i := range out {
		m := &out[i]
		switch {
		case m.Role == llm.RoleAssistant && len(m.ToolCalls) > 0:
			step = m
			stepSeq = rep.Included[i] // the request is all history here, so positions match the seqs
			for _, c := range m.ToolCalls {
				if c.ID == "" || seen[c.ID] {
					t.Errorf("call id %q is empty or used twice in the request: %s", c.ID, roles(out))
				}
				seen[c.ID] = true
			}
		case m.Role == llm.RoleTool:
			results++
			k := -1
			for j, c := range step.ToolCalls {
				if c.ID == m.ToolCallID {
					k = j
				}
			}
			if want := fmt.Sprintf("result of %d/%d", stepSeq, k); k < 0 || m.Content != want {
				t.Errorf("result %q answers call %q (index %d of step %d), want %q", m.Content, m.ToolCallID, k, stepSeq, want)
			}
		}
	}
	if results != 8 {
		t.Errorf("%d results in the request, want 8", results)
	}
	if out[1].ToolCalls[0].ID != "call_1" || out[9].ToolCalls[0].ID != "0" {
		t.Errorf("first call_1 sent as %q, the only 0 as %q: a unique provider id is kept", out[1].ToolCalls[0].ID, out[9].ToolCalls[0].ID)
	}
}

// TestFoldReusedCallIDs: the fold prompt names the tool of each result, although
// every call has the id "call_1".
func TestFoldReusedCallIDs(t *testing.T) {
	var prompt string
	sum := func(_ context.Context, msgs []llm.Message) (string, error) {
		prompt = msgs[1].Content
		return "ok", nil
	}
	if _, err := contextwin.Fold(context.Background(), sum, "", reusedIDTurns(), contextwin.DefaultBudgets(), wordTok{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Result of tool0: result of 2/0", "Result of tool0: result of 14/0", "Result of tool1: result of 14/1",
		"Result of tool0: result of 19/0", "Result of tool1: result of 19/1", "Result of tool0: result of 24/0"} {
		if !strings.Contains(prompt, want) {
			t.Errorf("fold prompt lacks %q:\n%s", want, prompt)
		}
	}
}
