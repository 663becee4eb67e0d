package store_test

import (
	"context"
	"encoding/json"
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

// BenchmarkMessagesBefore: a page of the last 50 messages before the middle of a chat
// of 2,500 tool turns (10,000 messages): what "Load older" served before issue 10 item 4.
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

// BenchmarkTurnsBefore: the same "Load older" page as BenchmarkMessagesBefore, cut at
// whole turns (what the chat serves since issue 10 item 4).
func BenchmarkTurnsBefore(b *testing.B) {
	db := mustOpen(b)
	ctx := context.Background()
	u := mustUser(b, db, "ann", store.RoleUser)
	s := mustSession(b, db, "bench", u.ID)
	seedToolTurns(b, db, s.ID, 2500)
	b.ReportAllocs()
	for b.Loop() {
		if msgs, _, err := db.TurnsBefore(ctx, s.ID, 5003, 50); err != nil || len(msgs) == 0 {
			b.Fatal(len(msgs), err)
		}
	}
}

// seedVariedTurns appends n tool turns of different lengths: turn i has i%4 steps, the
// odd ones calling two tools, every call with the provider id "call_1". It returns
// the messages as stored.
func seedVariedTurns(tb testing.TB, db *store.DB, id string, n int) []store.Message {
	tb.Helper()
	ctx := context.Background()
	for i := range n {
		mustNil(tb, db.AppendMessage(ctx, &store.Message{SessionID: id, Role: store.RoleUser, Content: fmt.Sprintf("turn %d", i)}))
		for s := range i % 4 {
			calls := `[{"id":"call_1","name":"clock","arguments":"{}"}]`
			if s%2 == 1 {
				calls = `[{"id":"call_1","name":"clock","arguments":"{}"},{"id":"call_1","name":"echo","arguments":"{}"}]`
			}
			step := &store.Message{SessionID: id, Role: store.RoleAssistant, ToolCalls: []byte(calls)}
			mustNil(tb, db.AppendMessage(ctx, step))
			for k := range 1 + s%2 {
				mustNil(tb, db.AppendMessage(ctx, &store.Message{SessionID: id, Role: store.RoleTool, ToolCallID: "call_1",
					CallKey: store.ToolCallKey(step.ID, k), Content: "result"}))
			}
		}
		mustNil(tb, db.AppendMessage(ctx, &store.Message{SessionID: id, Role: store.RoleAssistant, Content: "done"}))
	}
	all, err := db.MessagesAfter(ctx, id, 0)
	mustNil(tb, err)
	return all
}

// TestPagesHoldWholeTurns: paging back through a chat of tool turns, at page sizes
// that would cut turns, every page starts with a user message and ends where a turn
// ends, so each tool result is on the page of its call; together the pages are the
// chat, each message once, and a page is over its size only when one turn is.
func TestPagesHoldWholeTurns(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	u := mustUser(t, db, "ann", store.RoleUser)
	s := mustSession(t, db, "turns", u.ID)
	all := seedVariedTurns(t, db, s.ID, 23)
	turnEnd := map[int64]bool{} // seqs after which a new turn starts (or the chat ends)
	for i, m := range all {
		if i+1 == len(all) || all[i+1].Role == store.RoleUser {
			turnEnd[m.Seq] = true
		}
	}
	for _, size := range []int{1, 2, 3, 5, 7, 8, 13, 50} {
		t.Run(fmt.Sprint("page ", size), func(t *testing.T) {
			var got []int64
			page, hasOlder, err := db.LatestTurns(ctx, s.ID, size)
			for pages := 0; ; pages++ {
				mustNil(t, err)
				if len(page) == 0 || pages > len(all) {
					t.Fatalf("page %d is empty or too many pages (hasOlder %v)", pages, hasOlder)
				}
				if page[0].Role != store.RoleUser {
					t.Errorf("page starting at %d starts with a %s message", page[0].Seq, page[0].Role)
				}
				if last := page[len(page)-1].Seq; !turnEnd[last] {
					t.Errorf("page ending at %d ends inside a turn", last)
				}
				keys := map[string]bool{}
				users := 0
				for _, m := range page {
					calls, _ := callsOf(m)
					for i := range calls {
						keys[store.ToolCallKey(m.ID, i)] = true
					}
					if m.Role == store.RoleTool && !keys[m.CallKey] {
						t.Errorf("result %d is on a page without its call", m.Seq)
					}
					if m.Role == store.RoleUser {
						users++
					}
				}
				if len(page) > size && users > 1 {
					t.Errorf("page of %d messages (%d turns) for size %d", len(page), users, size)
				}
				got = append(seqs(page), got...)
				if !hasOlder {
					break
				}
				page, hasOlder, err = db.TurnsBefore(ctx, s.ID, page[0].Seq, size)
			}
			if want := seqs(all); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("pages together: %v\nwant %v", got, want)
			}
		})
	}
}

// callsOf is the tool calls of a stored message, undecoded.
func callsOf(m store.Message) ([]json.RawMessage, error) {
	var calls []json.RawMessage
	if len(m.ToolCalls) == 0 {
		return nil, nil
	}
	err := json.Unmarshal(m.ToolCalls, &calls)
	return calls, err
}

// TestPagesBeforeFirstUserMessage: messages before the first user message (a greeting)
// go with the oldest page, also when a long turn follows them.
func TestPagesBeforeFirstUserMessage(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	u := mustUser(t, db, "ann", store.RoleUser)
	s := mustSession(t, db, "greeting", u.ID)
	mustNil(t, db.AppendMessage(ctx, &store.Message{SessionID: s.ID, Role: store.RoleAssistant, Content: "Hello!"}))
	all := seedVariedTurns(t, db, s.ID, 4)
	for _, size := range []int{1, 2, 4} {
		page, hasOlder, err := db.LatestTurns(ctx, s.ID, size)
		got := seqs(page)
		for hasOlder {
			mustNil(t, err)
			page, hasOlder, err = db.TurnsBefore(ctx, s.ID, page[0].Seq, size)
			got = append(seqs(page), got...)
		}
		mustNil(t, err)
		if fmt.Sprint(got) != fmt.Sprint(seqs(all)) {
			t.Errorf("size %d: pages together %v, want %v", size, got, seqs(all))
		}
		if first, _, _ := db.TurnsBefore(ctx, s.ID, 2, size); len(first) != 1 || first[0].Content != "Hello!" {
			t.Errorf("size %d: the page before the first turn is %v, want the greeting", size, seqs(first))
		}
	}
}
