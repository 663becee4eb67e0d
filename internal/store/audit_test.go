package store_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"atrium/internal/store"
)

func TestAuditLog(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	alice := mustUser(t, db, "alice", store.RoleAdmin)
	ann := mustUser(t, db, "ann", store.RoleUser)
	bob := mustUser(t, db, "bob", store.RoleUser)

	for _, e := range []store.AuditEntry{
		{ActorID: alice.ID, SubjectID: ann.ID, Action: store.AuditReveal, Detail: "3 memories"},
		{ActorID: alice.ID, SubjectID: ann.ID, Action: store.AuditDelete, Detail: "mem_a"},
		{ActorID: alice.ID, SubjectID: bob.ID, Action: store.AuditDeleteAll, Detail: "2 memories"},
	} {
		mustNil(t, db.AddAudit(ctx, &e))
		if e.ID == 0 || e.At.IsZero() {
			t.Errorf("entry %+v has no id or time", e)
		}
	}
	if err := db.AddAudit(ctx, &store.AuditEntry{ActorID: alice.ID, SubjectID: ann.ID, Action: "peek"}); err == nil {
		t.Error("an unknown action was logged")
	}

	got, err := db.AuditAbout(ctx, ann.ID, 10)
	mustNil(t, err)
	if len(got) != 2 || got[0].Action != store.AuditDelete || got[1].Action != store.AuditReveal || got[0].ActorName != "alice" {
		t.Fatalf("ann's entries: %+v", got)
	}
	if got, _ := db.AuditAbout(ctx, ann.ID, 1); len(got) != 1 {
		t.Errorf("limit 1 gave %d entries", len(got))
	}

	// The entries outlive their actor (anonymised) and go with their subject.
	_, err = db.SQLForTest().Exec(`DELETE FROM users WHERE id = ?`, alice.ID)
	mustNil(t, err)
	got, err = db.AuditAbout(ctx, ann.ID, 10)
	mustNil(t, err)
	if len(got) != 2 || got[0].ActorID != 0 || got[0].ActorName != "" {
		t.Errorf("after the actor's deletion: %+v", got)
	}
	_, err = db.SQLForTest().Exec(`DELETE FROM users WHERE id = ?`, ann.ID)
	mustNil(t, err)
	if n := countRows(t, db, `SELECT COUNT(*) FROM audit_log WHERE subject_id = ?`, ann.ID); n != 0 {
		t.Errorf("%d entries left about a deleted user", n)
	}
}

func TestMemoryStatsByOwner(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	ann := mustUser(t, db, "ann", store.RoleUser)
	bob := mustUser(t, db, "bob", store.RoleUser)
	r := rand.New(rand.NewPCG(7, 8))
	for _, id := range []string{"a1", "a2"} {
		ix, _ := testIndex(r, "w")
		insertMem(t, db, ann.ID, id, ix)
	}
	mustNil(t, db.MarkMemoriesUsed(ctx, ann.ID, []string{"a2"}))
	st, err := db.MemoryStatsByOwner(ctx)
	mustNil(t, err)
	a := st[ann.ID]
	if len(st) != 1 || a == nil || st[bob.ID] != nil {
		t.Fatalf("stats: %+v", st)
	}
	want := int64(len("sealed-a1") + len("sealed-a2"))
	if a.Count != 2 || a.Kinds["fact"] != 2 || a.SealedBytes != want || a.LastUsed == nil || a.Oldest.After(a.Newest) {
		t.Errorf("ann's stats: %+v", a)
	}
}
