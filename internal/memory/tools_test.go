package memory

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"atrium/internal/llm"
	"atrium/internal/tools"
)

// TestMemoryTools: the model saves, finds and forgets the calling user's memories; a
// secret, a bad kind and an unknown or foreign id come back as structured errors.
func TestMemoryTools(t *testing.T) {
	f := newFixture(t)
	reg := tools.NewRegistry(nil, nil)
	ok(t, RegisterTools(reg, f.svc))
	ctx := context.Background()
	call := func(owner int64, name, args string) tools.Result {
		return reg.Dispatch(ctx, "s1", owner, llm.ToolCall{ID: "c", Name: name, Arguments: args})
	}

	res := call(f.ann, ToolSave, `{"text":"I prefer tea over coffee","kind":"preference"}`)
	var saved struct{ Saved string }
	if res.IsError || json.Unmarshal([]byte(res.Content), &saved) != nil || saved.Saved == "" {
		t.Fatalf("save: %+v", res)
	}
	m, err := f.svc.Get(ctx, f.ann, saved.Saved)
	if err != nil || m.Source.Kind != SourceTool || m.Source.SessionID != "s1" {
		t.Fatalf("saved memory %+v %v", m, err)
	}
	if res := call(f.ann, ToolSave, `{"text":"my api key is sk-abcdefghijklmnopqrstuvwx","kind":"fact"}`); !res.IsError || res.Code != tools.CodeExecutionFailed {
		t.Errorf("a secret was saved: %+v", res)
	}
	if res := call(f.ann, ToolSave, `{"text":"x","kind":"gossip"}`); res.Code != tools.CodeInvalidArguments {
		t.Errorf("bad kind: %+v", res)
	}

	res = call(f.ann, ToolSearch, `{"query":"tea or coffee?"}`)
	if res.IsError || !strings.Contains(res.Content, saved.Saved) || !strings.Contains(res.Content, "tea over coffee") {
		t.Errorf("search: %+v", res)
	}
	if res := call(f.bob, ToolSearch, `{"query":"tea or coffee?"}`); strings.Contains(res.Content, "tea") {
		t.Errorf("bob found ann's memory: %+v", res)
	}

	if res := call(f.bob, ToolForget, `{"id":"`+saved.Saved+`"}`); !res.IsError {
		t.Errorf("bob forgot ann's memory: %+v", res)
	}
	if res := call(f.ann, ToolForget, `{"id":"`+saved.Saved+`"}`); res.IsError {
		t.Errorf("forget: %+v", res)
	}
	if _, err := f.svc.Get(ctx, f.ann, saved.Saved); err == nil {
		t.Error("the memory is still there after memory_forget")
	}
	if res := call(f.ann, ToolForget, `{"id":"`+saved.Saved+`"}`); !res.IsError || !strings.Contains(res.Content, "not") {
		t.Errorf("forgetting twice: %+v", res)
	}
}
