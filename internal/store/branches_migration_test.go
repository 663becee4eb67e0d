package store

import (
	"context"
	"testing"
)

// A database written before migration 0033 becomes one branch per chat: each message's
// parent is the one before it, all on screen, and the chat's summary is kept under its
// watermark, so that a later edit above it and a flip back find it again.
func TestMigrationLinksBranches(t *testing.T) {
	ctx := context.Background()
	path, raw, exec := databaseBefore(t, 33)
	exec(`INSERT INTO users (username, password_hash, role, created_at, updated_at) VALUES ('ann', 'h', 'user', 0, 0)`)
	exec(`INSERT INTO sessions (id, owner_id, summary, summary_seq, created_at, updated_at) VALUES ('s1', 1, 'old facts', 2, 0, 0)`)
	exec(`INSERT INTO sessions (id, owner_id, created_at, updated_at) VALUES ('s2', 1, 0, 0)`)
	for i, role := range []string{"user", "assistant", "user", "assistant"} {
		exec(`INSERT INTO messages (id, session_id, seq, role, content, created_at, updated_at) VALUES (?, 's1', ?, ?, ?, 0, 0)`,
			10+i, i+1, role, role)
		exec(`INSERT INTO messages (id, session_id, seq, role, content, created_at, updated_at) VALUES (?, 's2', ?, ?, ?, 0, 0)`,
			20+i, i+1, role, role)
	}
	raw.Close()

	db, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, sid := range []string{"s1", "s2"} {
		msgs, err := db.AllMessages(ctx, sid)
		if err != nil || len(msgs) != 4 {
			t.Fatalf("%s: %d messages on screen, %v", sid, len(msgs), err)
		}
		for i, m := range msgs {
			want := int64(0)
			if i > 0 {
				want = msgs[i-1].ID
			}
			if m.ParentID != want {
				t.Errorf("%s message %d: parent %d, want %d", sid, m.ID, m.ParentID, want)
			}
		}
	}
	// Edit the second user message (seq 3): the summary up to seq 2 stays; edit the
	// first: none; flip back: it returns.
	if err := db.EditUserMessage(ctx, 12, &Message{SessionID: "s1", Role: RoleUser, Content: "again"}); err != nil {
		t.Fatal(err)
	}
	if err := db.EditUserMessage(ctx, 10, &Message{SessionID: "s1", Role: RoleUser, Content: "other"}); err != nil {
		t.Fatal(err)
	}
	if s, _ := db.SessionForOwner(ctx, "s1", 1); s.Summary != "" || s.SummarySeq != 0 {
		t.Fatalf("summary after editing the first message: %q up to %d", s.Summary, s.SummarySeq)
	}
	if err := db.SelectVersion(ctx, "s1", 10); err != nil {
		t.Fatal(err)
	}
	if s, _ := db.SessionForOwner(ctx, "s1", 1); s.Summary != "old facts" || s.SummarySeq != 2 {
		t.Fatalf("summary after flipping back: %q up to %d", s.Summary, s.SummarySeq)
	}
}
