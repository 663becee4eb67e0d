package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"atrium/internal/store"
)

// BenchmarkLatestSpanData is the context meter's query, run on every chat open
// and websocket (re)connect: opening one chat must cost the same whatever the
// size of the owner's other history (10 chats, 1,000 chats, 17,500 runs).
func BenchmarkLatestSpanData(b *testing.B) {
	for _, size := range []struct{ chats, runsEach int }{{10, 1}, {1000, 1}, {1000, 17}} {
		b.Run(fmt.Sprintf("chats=%d/runs=%d", size.chats, size.chats*size.runsEach), func(b *testing.B) {
			db := mustOpen(b)
			ctx := context.Background()
			u := mustUser(b, db, "ann", store.RoleUser)
			start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
			for c := range size.chats {
				sid := fmt.Sprint("s", c)
				mustSession(b, db, sid, u.ID)
				for r := range size.runsEach {
					run := store.RunStart{ID: fmt.Sprintf("%s-r%d", sid, r), SessionID: sid, OwnerID: u.ID,
						StartedAt: start.Add(time.Duration(c*size.runsEach+r) * time.Second)}
					if _, err := db.InsertSpan(ctx, &run, store.SpanRow{RunID: run.ID, Seq: 1, Kind: "context",
						StartedAt: run.StartedAt, Data: []byte(`{"zones":[]}`)}); err != nil {
						b.Fatal(err)
					}
				}
			}
			// The oldest chat: a walk of the owner's runs newest first finds it last.
			b.ResetTimer()
			for b.Loop() {
				ref, err := db.LatestSpanData(ctx, u.ID, "s0", "context")
				if err != nil || ref.Data == nil {
					b.Fatalf("%s %v", ref.Data, err)
				}
			}
		})
	}
}

// The newest run of a session is found by session, not by walking the owner's
// runs (which made opening a chat cost time linear in the owner's history).
func TestLatestSpanDataUsesSessionIndex(t *testing.T) {
	db := mustOpen(t)
	rows, err := db.SQLForTest().Query(`EXPLAIN QUERY PLAN `+store.LatestSpanQueryForTest, 1, "s", "context")
	mustNil(t, err)
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		mustNil(t, rows.Scan(&id, &parent, &unused, &detail))
		plan = append(plan, detail)
	}
	all := strings.Join(plan, "\n")
	if !strings.Contains(all, "runs_session_recent") || strings.Contains(all, "runs_owner_recent") {
		t.Errorf("plan does not go by session:\n%s", all)
	}
}
