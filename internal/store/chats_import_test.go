package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"atrium/internal/store"
)

// TestImportChatsAllOrNothing: each chat of an import is its own transaction (a large
// import never holds the writer for long), and a chat that fails takes back the ones
// stored before it: nothing of the import stays, text included.
func TestImportChatsAllOrNothing(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	ann := mustUser(t, db, "ann", store.RoleUser)
	chat := func(id, text string, state []byte) store.ImportedChat {
		return store.ImportedChat{ID: id, Title: id, State: state, Messages: []store.Message{
			{Role: store.RoleUser, Content: text}, {Role: store.RoleAssistant, Content: "ok"}}}
	}
	// The third chat fails inside its transaction: its id is the first's.
	err := db.ImportChats(ctx, ann.ID, []store.ImportedChat{
		chat("c1", "first secret-alpha", nil), chat("c2", "second", nil), chat("c1", "third", nil)})
	if err == nil {
		t.Fatal("an import with a failing third chat succeeded")
	}
	if ss, err := db.OwnerSessions(ctx, ann.ID); err != nil || len(ss) != 0 {
		t.Errorf("after the failed import: %d chats (%v), want none", len(ss), err)
	}
	if hits, err := db.SearchChats(ctx, ann.ID, "secret-alpha", 10); err != nil || len(hits) != 0 {
		t.Errorf("the taken-back chat is still found: %d hits (%v)", len(hits), err)
	}
	mustNil(t, db.ImportChats(ctx, ann.ID, []store.ImportedChat{chat("c1", "first", nil), chat("c2", "second", nil)}))
	if ss, err := db.OwnerSessions(ctx, ann.ID); err != nil || len(ss) != 2 {
		t.Errorf("a good import stored %d chats (%v), want 2", len(ss), err)
	}
}

// BenchmarkImportChats: an import of 100 chats × 1,000 messages, and the longest the
// writer is held (one chat's transaction) while it runs, measured as the wait of a
// small write issued in the middle.
//
//	go test ./internal/store -run x -bench ImportChats -benchtime 1x
func BenchmarkImportChats(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		db := mustOpen(b)
		ctx := context.Background()
		ann := mustUser(b, db, "ann", store.RoleUser)
		mustSession(b, db, "other", ann.ID)
		chats := make([]store.ImportedChat, 100)
		for i := range chats {
			msgs := make([]store.Message, 1000)
			for j := range msgs {
				msgs[j] = store.Message{Role: store.RoleUser, Content: fmt.Sprintf("message %d of chat %d", j, i)}
				if j%2 == 1 {
					msgs[j].Role = store.RoleAssistant
				}
			}
			chats[i] = store.ImportedChat{ID: fmt.Sprintf("chat-%d", i), Title: "t", Messages: msgs}
		}
		b.StartTimer()
		start := time.Now()
		waited := make(chan time.Duration)
		go func() {
			time.Sleep(500 * time.Millisecond)
			t0 := time.Now()
			mustNil(b, db.AppendMessage(ctx, &store.Message{SessionID: "other", Role: store.RoleUser, Content: "meanwhile"}))
			waited <- time.Since(t0)
		}()
		mustNil(b, db.ImportChats(ctx, ann.ID, chats))
		took := time.Since(start)
		w := <-waited
		b.ReportMetric(took.Seconds(), "import-s")
		b.ReportMetric(float64(w.Milliseconds()), "write-wait-ms")
	}
}
