package store_test

import (
	"context"
	"fmt"
	"testing"

	"atrium/internal/store"
)

// windowSpan lists the seqs of msgs as "first-last" (and the count), for short failures.
func windowSpan(msgs []store.Message) string {
	if len(msgs) == 0 {
		return "none"
	}
	return fmt.Sprintf("%d-%d (%d)", msgs[0].Seq, msgs[len(msgs)-1].Seq, len(msgs))
}

// TestMessagesAroundWholeTurns: the window around a message starts at a user message and
// ends before one, so a tool step is never cut from its result, and "older"/"newer" say
// what is left outside; the newer pages continue from it to the end.
func TestMessagesAroundWholeTurns(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	ann := mustUser(t, db, "ann", store.RoleUser)
	mustSession(t, db, "s", ann.ID)
	// 40 turns of 4 messages: user, assistant calling a tool, the tool result, the answer.
	var msgs []*store.Message
	for i := range 40 {
		msgs = append(msgs,
			&store.Message{SessionID: "s", Role: store.RoleUser, Content: fmt.Sprint("question ", i)},
			&store.Message{SessionID: "s", Role: store.RoleAssistant, ToolCalls: []byte(`[{"id":"c","name":"t","arguments":"{}"}]`)},
			&store.Message{SessionID: "s", Role: store.RoleTool, ToolCallID: "c", Content: "result"},
			&store.Message{SessionID: "s", Role: store.RoleAssistant, Content: fmt.Sprint("answer ", i)})
	}
	mustNil(t, db.AppendMessages(ctx, msgs))

	for _, tc := range []struct {
		seq, limit   int64
		want         string
		older, newer bool
	}{
		{seq: 60, limit: 20, want: "49-72 (24)", older: true, newer: true}, // 50..70 widened to turns 49.. and ..72
		{seq: 3, limit: 20, want: "1-16 (16)", older: false, newer: true},
		{seq: 158, limit: 20, want: "145-160 (16)", older: true, newer: false},
		{seq: 63, limit: 1, want: "61-64 (4)", older: true, newer: true}, // at least the message's own turn
	} {
		got, older, newer, err := db.MessagesAround(ctx, "s", tc.seq, int(tc.limit))
		mustNil(t, err)
		if windowSpan(got) != tc.want || older != tc.older || newer != tc.newer {
			t.Errorf("around %d (limit %d): %s older=%v newer=%v, want %s older=%v newer=%v",
				tc.seq, tc.limit, windowSpan(got), older, newer, tc.want, tc.older, tc.newer)
		}
	}
	if got, _, _, err := db.MessagesAround(ctx, "s", 999, 20); err != nil || len(got) != 0 {
		t.Errorf("around a missing seq: %s, %v", windowSpan(got), err)
	}
	if got, _, _, err := db.MessagesAround(ctx, "other", 5, 20); err != nil || len(got) != 0 {
		t.Errorf("around in another session: %s, %v", windowSpan(got), err)
	}

	// Load newer from the end of the window, page after page, reaches the last message
	// without gaps or repeats, each page ending before a user message.
	next := int64(72)
	for pages := 0; ; pages++ {
		page, newer, err := db.MessagesAfterPage(ctx, "s", next, 20)
		mustNil(t, err)
		if len(page) == 0 || page[0].Seq != next+1 {
			t.Fatalf("page after %d: %s", next, windowSpan(page))
		}
		next = page[len(page)-1].Seq
		if newer && next%4 != 0 {
			t.Fatalf("page ends at %d, inside a turn", next)
		}
		if !newer {
			break
		}
		if pages > 10 {
			t.Fatal("newer pages never end")
		}
	}
	if next != 160 {
		t.Errorf("newer pages end at %d, want 160", next)
	}
}

// TestMessageWindowsAcrossBranchGap: an edit leaves the versions it replaced off screen,
// so the seqs on screen can jump by more than a page. The windows count the messages on
// screen, not seq numbers: "Load newer" from before the gap still reaches the end, and
// the window around a message after the gap still holds about a page.
func TestMessageWindowsAcrossBranchGap(t *testing.T) {
	db, s, m := branchChat(t) // u1 a1 u2 a2, seqs 1–4
	ctx := context.Background()
	for i := range 30 { // an old branch of 60 messages after u2
		mustNil(t, db.AppendMessages(ctx, []*store.Message{
			{SessionID: s.ID, Role: store.RoleUser, Content: fmt.Sprint("old ", i)}, reply(s, fmt.Sprint("old answer ", i))}))
	}
	edited := &store.Message{SessionID: s.ID, Role: store.RoleUser, Content: "u2' edited"}
	mustNil(t, db.EditUserMessage(ctx, m[2].ID, edited))
	mustNil(t, db.AppendMessage(ctx, reply(s, "a2'")))
	for i := range 20 {
		mustNil(t, db.AppendMessages(ctx, []*store.Message{
			{SessionID: s.ID, Role: store.RoleUser, Content: fmt.Sprint("new ", i)}, reply(s, fmt.Sprint("new answer ", i))}))
	}
	// On screen: u1 a1 (1–2), u2' a2' (65–66), 40 more (67–106).
	next, seen := m[1].Seq, 2
	for pages := 0; ; pages++ {
		page, newer, err := db.MessagesAfterPage(ctx, s.ID, next, 10)
		mustNil(t, err)
		if len(page) == 0 {
			t.Fatalf("empty page after %d (newer=%v): the rest of the chat cannot be reached", next, newer)
		}
		if len(page) > 12 {
			t.Errorf("page after %d has %d messages for a limit of 10", next, len(page))
		}
		seen += len(page)
		next = page[len(page)-1].Seq
		if !newer {
			break
		}
		if pages > 10 {
			t.Fatal("newer pages never end")
		}
	}
	if seen != 44 || next != 106 {
		t.Errorf("newer pages showed %d messages ending at %d, want 44 ending at 106", seen, next)
	}
	got, older, newer, err := db.MessagesAround(ctx, s.ID, edited.Seq, 20)
	mustNil(t, err)
	if windowSpan(got) != "1-76 (14)" || older || !newer {
		t.Errorf("around the edit: %s older=%v newer=%v, want 1-76 (14) older=false newer=true", windowSpan(got), older, newer)
	}
}
