package store_test

import (
	"context"
	"testing"
	"time"

	"atrium/internal/errs"
	"atrium/internal/store"
	"atrium/internal/store/storetest"
)

// ForkSession copies the messages up to a seq, and the summary only when it covers
// copied messages alone; a foreign source or nothing to copy creates no session.
func TestForkSession(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	ann := mustUser(t, db, "ann", store.RoleUser)
	bob := mustUser(t, db, "bob", store.RoleUser)
	src := mustSession(t, db, "src", ann.ID)
	for _, m := range []store.Message{{Role: store.RoleUser, Content: "one"}, {Role: store.RoleAssistant, Content: "two"},
		{Role: store.RoleUser, Content: "three"}, {Role: store.RoleAssistant, Content: "four", ToolCalls: []byte(`[{"ID":"c"}]`)}} {
		m.SessionID = src.ID
		mustNil(t, db.AppendMessage(ctx, &m))
	}
	mustNil(t, db.SetSessionSummary(ctx, src.ID, ann.ID, "one and two", 2))

	seq, err := db.LastUserSeq(ctx, src.ID, 4)
	mustNil(t, err)
	if seq != 3 {
		t.Fatalf("last user message up to 4: %d, want 3", seq)
	}
	dst := store.Session{ID: "fork", Title: "Fork of src", Model: "1:m"}
	mustNil(t, db.ForkSession(ctx, ann.ID, src.ID, 3, &dst))
	msgs, _, err := db.LatestMessages(ctx, "fork", 10)
	mustNil(t, err)
	if len(msgs) != 3 || msgs[0].Content != "one" || msgs[2].Content != "three" || msgs[2].Seq != 3 {
		t.Fatalf("fork holds %+v", msgs)
	}
	got, err := db.SessionForOwner(ctx, "fork", ann.ID)
	mustNil(t, err)
	if got.Summary != "one and two" || got.SummarySeq != 2 || got.Model != "1:m" {
		t.Errorf("fork session %+v", got)
	}
	// The fork is a chat of its own: it takes new messages after the copied ones.
	next := store.Message{SessionID: "fork", Role: store.RoleAssistant, Content: "new"}
	mustNil(t, db.AppendMessage(ctx, &next))
	if next.Seq != 4 {
		t.Errorf("the fork's next message has seq %d, want 4", next.Seq)
	}

	early := store.Session{ID: "early"}
	mustNil(t, db.ForkSession(ctx, ann.ID, src.ID, 1, &early))
	if got, _ := db.SessionForOwner(ctx, "early", ann.ID); got.Summary != "" || got.SummarySeq != 0 {
		t.Errorf("a fork before the summary's end took it: %+v", got)
	}

	wantCode(t, db.ForkSession(ctx, bob.ID, src.ID, 3, &store.Session{ID: "stolen"}), errs.NotFound)
	wantCode(t, db.ForkSession(ctx, ann.ID, src.ID, 0, &store.Session{ID: "empty"}), errs.NotFound)
	for _, id := range []string{"stolen", "empty"} {
		if _, err := db.SessionForOwner(ctx, id, ann.ID); err == nil {
			t.Errorf("session %s was created", id)
		}
		if _, err := db.SessionForOwner(ctx, id, bob.ID); err == nil {
			t.Errorf("session %s was created for bob", id)
		}
	}
}

// A replay run must replay a run of its own owner.
func TestReplayRunOfAnotherOwnerRefused(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	ann := mustUser(t, db, "ann", store.RoleUser)
	bob := mustUser(t, db, "bob", store.RoleUser)
	now := time.Now()
	mustNil(t, db.CreateRun(ctx, store.RunStart{ID: "turn", OwnerID: ann.ID, StartedAt: now}))
	wantCode(t, db.CreateRun(ctx, store.RunStart{ID: "r-bob", OwnerID: bob.ID, StartedAt: now, ReplayOf: "turn", ReplaySpan: 1}), errs.NotFound)
	mustNil(t, db.CreateRun(ctx, store.RunStart{ID: "r-ann", OwnerID: ann.ID, StartedAt: now, ReplayOf: "turn", ReplaySpan: 1}))
	ri, err := db.RunForOwner(ctx, ann.ID, "r-ann")
	mustNil(t, err)
	if ri.ReplayOf != "turn" || ri.ReplaySpan != 1 {
		t.Errorf("replay run %+v", ri)
	}
	// Pruning the source keeps the replay, without its link.
	storetest.Exec(t, db, `DELETE FROM runs WHERE id = 'turn'`)
	ri, err = db.RunForOwner(ctx, ann.ID, "r-ann")
	mustNil(t, err)
	if ri.ReplayOf != "" || ri.ReplaySpan != 1 {
		t.Errorf("replay run after its source went: %+v", ri)
	}
}

// A fork's tool results answer the fork's copies of their calls: call keys name the
// step message by id, and the copies have new ids.
func TestForkKeepsToolPairs(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	ann := mustUser(t, db, "ann", store.RoleUser)
	src := mustSession(t, db, "src", ann.ID)
	step := store.Message{SessionID: src.ID, Role: store.RoleAssistant, ToolCalls: []byte(`[{"ID":"call_1","Name":"clock"},{"ID":"call_1","Name":"echo"}]`)}
	user := store.Message{SessionID: src.ID, Role: store.RoleUser, Content: "time?"}
	mustNil(t, db.AppendMessage(ctx, &user))
	mustNil(t, db.AppendMessage(ctx, &step))
	for i := range 2 {
		r := store.Message{SessionID: src.ID, Role: store.RoleTool, ToolCallID: "call_1", Content: "r", CallKey: store.ToolCallKey(step.ID, i)}
		mustNil(t, db.AppendMessage(ctx, &r))
	}
	dst := store.Session{ID: "fork"}
	mustNil(t, db.ForkSession(ctx, ann.ID, src.ID, 4, &dst))
	msgs, err := db.MessagesAfter(ctx, "fork", 0)
	mustNil(t, err)
	if len(msgs) != 4 || msgs[1].ID == step.ID {
		t.Fatalf("fork holds %+v", msgs)
	}
	for i, m := range msgs[2:] {
		if want := store.ToolCallKey(msgs[1].ID, i); m.CallKey != want {
			t.Errorf("forked result %d: call key %q, want %q (the copied step's)", i, m.CallKey, want)
		}
	}
}
