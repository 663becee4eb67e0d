package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"atrium/internal/store"
)

func TestLoadContextMessages(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	u := store.User{Username: "ann", PasswordHash: "h", Role: store.RoleUser}
	mustNil(t, db.CreateUser(ctx, &u))
	s := store.Session{ID: "s1", OwnerID: u.ID}
	mustNil(t, db.CreateSession(ctx, &s))
	sid := s.ID
	var batch []*store.Message
	for i := range 30 {
		m := &store.Message{SessionID: sid, Role: store.RoleUser, Content: fmt.Sprint("m", i+1), Tokens: i + 1}
		if i%3 == 1 {
			m.Role, m.ToolCalls = store.RoleAssistant, []byte(`[{"id":"c","name":"calc","arguments":"{}"}]`)
		}
		batch = append(batch, m)
	}
	if err := db.AppendMessages(ctx, batch); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		after      int64
		max        int
		first, len int64
	}{
		{after: 10, max: 5, first: 26, len: 5},
		{after: 10, max: 0, first: 11, len: 20},
		{after: 28, max: 5, first: 29, len: 2},
		{after: 30, max: 5, len: 0},
	} {
		msgs, err := db.LoadContextMessages(ctx, sid, tc.after, tc.max)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(msgs)) != tc.len || (tc.len > 0 && msgs[0].Seq != tc.first) {
			t.Errorf("LoadContextMessages(after %d, max %d): %d messages from %v", tc.after, tc.max, len(msgs), msgs)
			continue
		}
		for i, m := range msgs {
			if m.Seq != tc.first+int64(i) || m.Content != fmt.Sprint("m", m.Seq) || m.Tokens != int(m.Seq) || m.SessionID != sid || m.Status != store.StatusComplete {
				t.Errorf("message %d: %+v", i, m)
			}
			if m.Seq%3 == 2 && string(m.ToolCalls) != `[{"id":"c","name":"calc","arguments":"{}"}]` {
				t.Errorf("tool calls %q", m.ToolCalls)
			}
		}
	}
	// The range scan uses the (session_id, seq) index: cost does not grow with the session.
	rows, err := db.SQLForTest().QueryContext(ctx, `EXPLAIN QUERY PLAN SELECT id, content, tokens FROM messages WHERE session_id = ? AND seq > ? ORDER BY seq DESC LIMIT ?`, sid, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if p := strings.Join(plan, "; "); !strings.Contains(p, "USING INDEX") || strings.Contains(p, "TEMP B-TREE") {
		t.Errorf("query plan %q", p)
	}
}
