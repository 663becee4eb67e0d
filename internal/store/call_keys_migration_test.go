package store

import (
	"context"
	"testing"
)

// A database written before migration 0025, where the provider reused its call ids
// ("call_1" every step, twice in one step, "" for all), gets each tool result keyed to
// the call it answers: the nearest earlier step, the n-th result of an id answering
// the n-th call with that id. A result with no such call stays unkeyed.
func TestMigrationKeysToolResults(t *testing.T) {
	ctx := context.Background()
	path, raw, exec := databaseBefore(t, 25)
	exec(`INSERT INTO users (username, password_hash, role, created_at, updated_at) VALUES ('ann', 'h', 'user', 0, 0)`)
	exec(`INSERT INTO sessions (id, owner_id, created_at, updated_at) VALUES ('s1', 1, 0, 0)`)
	rows := []struct {
		id              int64
		role, calls, to string
	}{
		{10, "user", "", ""},
		{11, "assistant", `[{"ID":"call_1","Name":"clock","Arguments":"{}"}]`, ""}, // as the agent stores calls
		{12, "tool", "", "call_1"},
		{13, "assistant", "", ""},
		{14, "user", "", ""},
		{15, "assistant", `[{"ID":"call_1","Name":"clock","Arguments":"{}"},{"ID":"call_1","Name":"echo","Arguments":"{}"}]`, ""},
		{16, "tool", "", "call_1"},
		{17, "tool", "", "call_1"},
		{18, "assistant", `[{"id":"","name":"clock","arguments":"{}"},{"id":"0","name":"echo","arguments":"{}"},{"id":"","name":"echo","arguments":"{}"}]`, ""},
		{19, "tool", "", ""},
		{20, "tool", "", "0"},
		{21, "tool", "", ""},
		{22, "tool", "", "nope"}, // answers no call of step 18
	}
	for i, r := range rows {
		var calls any
		if r.calls != "" {
			calls = r.calls
		}
		exec(`INSERT INTO messages (id, session_id, seq, role, tool_calls, tool_call_id, created_at, updated_at)
			VALUES (?, 's1', ?, ?, ?, ?, 0, 0)`, r.id, i+1, r.role, calls, r.to)
	}
	raw.Close()

	db, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	msgs, err := db.MessagesAfter(ctx, "s1", 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]string{12: ToolCallKey(11, 0), 16: ToolCallKey(15, 0), 17: ToolCallKey(15, 1),
		19: ToolCallKey(18, 0), 20: ToolCallKey(18, 1), 21: ToolCallKey(18, 2), 22: ""}
	for _, m := range msgs {
		if m.Role != RoleTool {
			if m.CallKey != "" {
				t.Errorf("message %d (%s) has call key %q", m.ID, m.Role, m.CallKey)
			}
			continue
		}
		if m.CallKey != want[m.ID] {
			t.Errorf("tool result %d (provider id %q): call key %q, want %q", m.ID, m.ToolCallID, m.CallKey, want[m.ID])
		}
	}
}
