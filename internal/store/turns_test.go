package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"atrium/internal/store"
)

// seedToolTurns appends n turns to session id, each: a user message, an assistant
// step calling a tool, its result, and the final reply (4 messages).
func seedToolTurns(tb testing.TB, db *store.DB, id string, n int) {
	tb.Helper()
	ctx := context.Background()
	text := strings.Repeat("x", 200)
	for i := 0; i < n; {
		var batch []*store.Message
		for ; i < n && len(batch) < 1000; i++ {
			step := &store.Message{SessionID: id, Role: store.RoleAssistant,
				ToolCalls: []byte(`[{"id":"call_1","name":"clock","arguments":"{}"}]`)}
			batch = append(batch,
				&store.Message{SessionID: id, Role: store.RoleUser, Content: fmt.Sprintf("turn %d", i)},
				step,
				&store.Message{SessionID: id, Role: store.RoleTool, ToolCallID: "call_1", Content: text},
				&store.Message{SessionID: id, Role: store.RoleAssistant, Content: text})
		}
		mustNil(tb, db.AppendMessages(ctx, batch))
	}
}

// BenchmarkMessagesBefore: the "Load older" page (50) in the middle of a chat of
// 2,500 tool turns (10,000 messages).
func BenchmarkMessagesBefore(b *testing.B) {
	db := mustOpen(b)
	ctx := context.Background()
	u := mustUser(b, db, "ann", store.RoleUser)
	s := mustSession(b, db, "bench", u.ID)
	seedToolTurns(b, db, s.ID, 2500)
	b.ReportAllocs()
	for b.Loop() {
		if msgs, _, err := db.MessagesBefore(ctx, s.ID, 5003, 50); err != nil || len(msgs) == 0 {
			b.Fatal(len(msgs), err)
		}
	}
}
