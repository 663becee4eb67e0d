package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"atrium/internal/errs"
	"atrium/internal/store"
)

func mustSession(tb testing.TB, db *store.DB, id string, owner int64) store.Session {
	tb.Helper()
	s := store.Session{ID: id, OwnerID: owner, Title: "title " + id}
	if err := db.CreateSession(context.Background(), &s); err != nil {
		tb.Fatalf("create session %s: %v", id, err)
	}
	return s
}

func TestSessionOwnership(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	ann := mustUser(t, db, "ann", store.RoleUser)
	bob := mustUser(t, db, "bob", store.RoleUser)
	s := mustSession(t, db, "s-ann", ann.ID)

	got, err := db.SessionForOwner(ctx, s.ID, ann.ID)
	mustNil(t, err)
	if string(got.State) != "{}" || got.Title != s.Title || !got.CreatedAt.Equal(s.CreatedAt) {
		t.Errorf("got %+v", got)
	}

	_, errForeign := db.SessionForOwner(ctx, s.ID, bob.ID)
	_, errMissing := db.SessionForOwner(ctx, "no-such", bob.ID)
	wantCode(t, errForeign, errs.NotFound)
	wantCode(t, errMissing, errs.NotFound)
	if errs.Message(errForeign) != errs.Message(errMissing) {
		t.Errorf("foreign and missing differ: %q vs %q", errs.Message(errForeign), errs.Message(errMissing))
	}

	foreign := []struct {
		name string
		op   func() error
	}{
		{"rename", func() error { return db.RenameSession(ctx, s.ID, bob.ID, "mine") }},
		{"model", func() error { return db.SetSessionModel(ctx, s.ID, bob.ID, "gpt") }},
		{"state", func() error { return db.SetSessionState(ctx, s.ID, bob.ID, []byte(`{"a":1}`)) }},
		{"summary", func() error { return db.SetSessionSummary(ctx, s.ID, bob.ID, "x", 1) }},
		{"delete", func() error { return db.DeleteSession(ctx, s.ID, bob.ID) }},
	}
	for _, tc := range foreign {
		t.Run("foreign "+tc.name, func(t *testing.T) { wantCode(t, tc.op(), errs.NotFound) })
	}
	if _, err := db.SessionForOwner(ctx, s.ID, ann.ID); err != nil {
		t.Fatalf("foreign ops touched the session: %v", err)
	}

	t.Run("create errors", func(t *testing.T) {
		wantCode(t, db.CreateSession(ctx, &store.Session{ID: s.ID, OwnerID: ann.ID}), errs.Conflict)
		wantCode(t, db.CreateSession(ctx, &store.Session{ID: "x", OwnerID: 999}), errs.NotFound)
		wantCode(t, db.CreateSession(ctx, &store.Session{ID: "y", OwnerID: ann.ID, State: []byte("{nope")}), errs.Invalid)
		wantCode(t, db.CreateSession(ctx, &store.Session{OwnerID: ann.ID}), errs.Invalid)
	})
}

func TestSessionUpdates(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	ann := mustUser(t, db, "ann", store.RoleUser)
	s := mustSession(t, db, "s1", ann.ID)

	mustNil(t, db.RenameSession(ctx, s.ID, ann.ID, "Trip to Lisbon"))
	mustNil(t, db.SetSessionModel(ctx, s.ID, ann.ID, "gpt-4o"))
	mustNil(t, db.SetSessionState(ctx, s.ID, ann.ID, []byte(`{"goal":"book"}`)))
	mustNil(t, db.SetSessionSummary(ctx, s.ID, ann.ID, "they talked", 12))
	wantCode(t, db.SetSessionState(ctx, s.ID, ann.ID, []byte(`not json`)), errs.Invalid)

	got, err := db.SessionForOwner(ctx, s.ID, ann.ID)
	mustNil(t, err)
	want := store.Session{ID: s.ID, OwnerID: ann.ID, Title: "Trip to Lisbon", Model: "gpt-4o",
		State: []byte(`{"goal":"book"}`), Summary: "they talked", SummarySeq: 12}
	if got.Title != want.Title || got.Model != want.Model || string(got.State) != string(want.State) ||
		got.Summary != want.Summary || got.SummarySeq != want.SummarySeq || !got.UpdatedAt.After(s.UpdatedAt) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestListSessionsPaging(t *testing.T) {
	db := mustOpen(t)
	clk := newClock()
	db.Now = clk.Now
	ctx := context.Background()
	ann := mustUser(t, db, "ann", store.RoleUser)
	bob := mustUser(t, db, "bob", store.RoleUser)
	mustSession(t, db, "bob-1", bob.ID)

	// Seven sessions; s3 and s4 and s5 share one timestamp to exercise the id tiebreak.
	base := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	stamps := []time.Duration{1, 2, 3, 3, 3, 4, 5}
	for i, d := range stamps {
		clk.Set(base.Add(d*time.Second - time.Millisecond)) // Now adds 1 ms
		mustSession(t, db, fmt.Sprintf("s%d", i), ann.ID)
	}
	// Touching s0 moves it to the top.
	clk.Set(base.Add(10 * time.Second))
	mustNil(t, db.RenameSession(ctx, "s0", ann.ID, "bumped"))
	want := []string{"s0", "s6", "s5", "s2", "s3", "s4", "s1"}

	for _, limit := range []int{1, 2, 3, 7, 50} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			var got []string
			var after *store.SessionCursor
			for pages := 0; ; pages++ {
				if pages > 10 {
					t.Fatal("paging does not end")
				}
				page, next, err := db.ListSessions(ctx, ann.ID, after, limit)
				mustNil(t, err)
				if len(page) > limit {
					t.Fatalf("page of %d > limit %d", len(page), limit)
				}
				for _, s := range page {
					got = append(got, s.ID)
				}
				if next == nil {
					break
				}
				// Round-trip the cursor through its URL form, as the web layer will.
				c, err := store.ParseSessionCursor(next.String())
				mustNil(t, err)
				after = &c
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("order %v, want %v", got, want)
			}
		})
	}
	t.Run("bad cursor", func(t *testing.T) {
		for _, s := range []string{"", "!!", "bm9kb3Q", "YWJjLmlk"} {
			_, err := store.ParseSessionCursor(s)
			wantCode(t, err, errs.Invalid)
		}
	})
	t.Run("exact page has no next", func(t *testing.T) {
		_, next, err := db.ListSessions(ctx, bob.ID, nil, 1)
		mustNil(t, err)
		if next != nil {
			t.Errorf("next = %v, want nil", next)
		}
	})
}

func TestDeleteSessionCascades(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	ann := mustUser(t, db, "ann", store.RoleUser)
	s := mustSession(t, db, "s1", ann.ID)
	keep := mustSession(t, db, "s2", ann.ID)
	for _, sid := range []string{s.ID, keep.ID} {
		for i := range 3 {
			mustNil(t, db.AppendMessage(ctx, &store.Message{SessionID: sid, Role: store.RoleUser, Content: fmt.Sprint("secret ", i)}))
		}
	}
	mustNil(t, db.DeleteSession(ctx, s.ID, ann.ID))
	mustNil(t, db.Checkpoint(ctx))
	_, err := db.SessionForOwner(ctx, s.ID, ann.ID)
	wantCode(t, err, errs.NotFound)
	wantCode(t, db.DeleteSession(ctx, s.ID, ann.ID), errs.NotFound)

	var n int
	mustNil(t, db.SQLForTest().QueryRowContext(ctx, `SELECT COUNT(*) FROM messages WHERE session_id = ?`, s.ID).Scan(&n))
	if n != 0 {
		t.Errorf("%d messages survived their session", n)
	}
	msgs, _, err := db.LatestMessages(ctx, keep.ID, 10)
	mustNil(t, err)
	if len(msgs) != 3 {
		t.Errorf("other session lost messages: %d left", len(msgs))
	}
}
