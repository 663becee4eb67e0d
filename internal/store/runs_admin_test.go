package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"atrium/internal/errs"
	"atrium/internal/store"
)

// adminRunsFixture is two users, a chat each and runs with known metadata,
// written both through InsertRuns and through the recorder's path
// (CreateRun/InsertSpan/EndRun), so that the tool filter covers the trigger.
type adminRunsFixture struct {
	db       *store.DB
	ann, bob int64
	annChat  string
	t0       time.Time
}

func newAdminRunsFixture(t *testing.T) adminRunsFixture {
	t.Helper()
	db := mustOpen(t)
	ctx := context.Background()
	f := adminRunsFixture{db: db, t0: time.UnixMilli(1_780_000_000_000)}
	for _, name := range []string{"ann", "bob"} {
		u := &store.User{Username: name, PasswordHash: "h", Role: store.RoleUser}
		mustNil(t, db.CreateUser(ctx, u))
		if name == "ann" {
			f.ann = u.ID
		} else {
			f.bob = u.ID
		}
	}
	s := &store.Session{ID: "11111111-1111-4111-8111-111111111111", OwnerID: f.ann, Title: "garden plans"}
	mustNil(t, db.CreateSession(ctx, s))
	f.annChat = s.ID
	at := func(min int) time.Time { return f.t0.Add(time.Duration(min) * time.Minute) }
	run := func(id string, owner int64, session, model, status, errText string, start time.Time, dur time.Duration, tools ...string) store.ImportedRun {
		r := store.ImportedRun{RunInfo: store.RunInfo{ID: id, OwnerID: owner, SessionID: session, Model: model, Status: status,
			Error: errText, StartedAt: start, EndedAt: start.Add(dur)}}
		for i, tool := range tools {
			r.Spans = append(r.Spans, store.ImportedSpan{SpanRow: store.SpanRow{RunID: id, Seq: i + 1, Kind: "tool_call",
				Name: tool, StartedAt: start, EndedAt: start}})
		}
		return r
	}
	mustNil(t, db.InsertRuns(ctx, []store.ImportedRun{
		run("r1", f.ann, f.annChat, "m-small", "complete", "", at(1), 2*time.Second, "search", "search"),
		run("r2", f.bob, "", "m-big", "error", "model failed", at(2), 30*time.Second),
		run("r3", f.ann, f.annChat, "m-big", "complete", "", at(3), 500*time.Millisecond, "clock"),
		run("r4", f.bob, "", "m-small", "stopped", "stopped by user", at(4), 10*time.Second, "search"),
	}))
	// r5 the way the recorder writes it: the trigger fills run_tools.
	mustNil(t, db.CreateRun(ctx, store.RunStart{ID: "r5", SessionID: f.annChat, OwnerID: f.ann, Model: "m-small", StartedAt: at(5)}))
	_, err := db.InsertSpan(ctx, nil, store.SpanRow{RunID: "r5", Seq: 1, Kind: "tool_call", Name: "clock", StartedAt: at(5)})
	mustNil(t, err)
	_, err = db.InsertSpan(ctx, nil, store.SpanRow{RunID: "r5", Seq: 2, Kind: "final", Name: "search", StartedAt: at(5)})
	mustNil(t, err)
	mustNil(t, db.EndRun(ctx, nil, store.RunEnd{ID: "r5", Status: "complete", EndedAt: at(5).Add(4 * time.Second)}))
	return f
}

func adminRunIDs(list []store.AdminRun) []string {
	var ids []string
	for _, r := range list {
		ids = append(ids, r.ID)
	}
	return ids
}

func TestAllRunsFilters(t *testing.T) {
	f := newAdminRunsFixture(t)
	day := time.Date(2026, 5, 28, 0, 0, 0, 0, time.UTC) // f.t0 is 2026-05-28 20:26 UTC
	for _, tc := range []struct {
		name   string
		filter store.RunFilter
		want   []string
	}{
		{"none", store.RunFilter{}, []string{"r5", "r4", "r3", "r2", "r1"}},
		{"user", store.RunFilter{OwnerID: f.bob}, []string{"r4", "r2"}},
		{"chat", store.RunFilter{SessionID: f.annChat}, []string{"r5", "r3", "r1"}},
		{"from", store.RunFilter{From: f.t0.Add(3 * time.Minute)}, []string{"r5", "r4", "r3"}},
		{"to", store.RunFilter{To: f.t0.Add(3 * time.Minute)}, []string{"r2", "r1"}},
		{"day", store.RunFilter{From: day, To: day.AddDate(0, 0, 1)}, []string{"r5", "r4", "r3", "r2", "r1"}},
		{"other day", store.RunFilter{From: day.AddDate(0, 0, 1)}, nil},
		{"status", store.RunFilter{Status: "complete"}, []string{"r5", "r3", "r1"}},
		{"model", store.RunFilter{Model: "m-big"}, []string{"r3", "r2"}},
		{"tool", store.RunFilter{Tool: "search"}, []string{"r4", "r1"}}, // r5's "search" is a final span
		{"tool by trigger", store.RunFilter{Tool: "clock"}, []string{"r5", "r3"}},
		{"failed", store.RunFilter{FailedOnly: true}, []string{"r4", "r2"}},
		{"min duration", store.RunFilter{MinDuration: 4 * time.Second}, []string{"r5", "r4", "r2"}},
		{"tool and user", store.RunFilter{Tool: "search", OwnerID: f.ann}, []string{"r1"}},
		{"model and failed", store.RunFilter{Model: "m-small", FailedOnly: true}, []string{"r4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list, next, err := f.db.AllRuns(context.Background(), tc.filter, nil, 50)
			mustNil(t, err)
			if got := adminRunIDs(list); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			if next != nil {
				t.Errorf("a next page after %v", next)
			}
		})
	}
	list, _, err := f.db.AllRuns(context.Background(), store.RunFilter{SessionID: f.annChat}, nil, 1)
	mustNil(t, err)
	if list[0].Owner != "ann" || list[0].ChatTitle != "garden plans" || list[0].Status != "complete" || list[0].EndedAt.Sub(list[0].StartedAt) != 4*time.Second {
		t.Errorf("row: %+v", list[0])
	}
}

// Paging walks every run once, newest first, also through runs that started in
// the same millisecond (ordered by id), with and without a filter.
func TestAllRunsPages(t *testing.T) {
	f := newAdminRunsFixture(t)
	ctx := context.Background()
	same := f.t0.Add(10 * time.Minute)
	var batch []store.ImportedRun
	for _, id := range []string{"s-a", "s-c", "s-b"} {
		batch = append(batch, store.ImportedRun{RunInfo: store.RunInfo{ID: id, OwnerID: f.bob, Model: "m-small", Status: "complete",
			StartedAt: same, EndedAt: same},
			Spans: []store.ImportedSpan{{SpanRow: store.SpanRow{RunID: id, Seq: 1, Kind: "tool_call", Name: "search", StartedAt: same}}}})
	}
	mustNil(t, f.db.InsertRuns(ctx, batch))
	for _, tc := range []struct {
		filter store.RunFilter
		want   []string
	}{
		{store.RunFilter{}, []string{"s-c", "s-b", "s-a", "r5", "r4", "r3", "r2", "r1"}},
		{store.RunFilter{Tool: "search"}, []string{"s-c", "s-b", "s-a", "r4", "r1"}},
		{store.RunFilter{OwnerID: f.bob}, []string{"s-c", "s-b", "s-a", "r4", "r2"}},
	} {
		var got []string
		var after *store.RunCursor
		for page := 0; ; page++ {
			if page > 10 {
				t.Fatal("paging does not end")
			}
			list, next, err := f.db.AllRuns(ctx, tc.filter, after, 2)
			mustNil(t, err)
			got = append(got, adminRunIDs(list)...)
			if next == nil {
				break
			}
			cur, err := store.ParseRunCursor(next.String())
			mustNil(t, err)
			after = &cur
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%+v: pages gave %v, want %v", tc.filter, got, tc.want)
		}
	}
	for _, bad := range []string{"", "x", "12", "12.", "a.b"} {
		if _, err := store.ParseRunCursor(bad); !errs.Is(err, errs.Invalid) {
			t.Errorf("cursor %q: %v", bad, err)
		}
	}
}

// InsertRuns writes all or nothing; a span whose parent does not precede it is
// refused.
func TestInsertRunsAllOrNothing(t *testing.T) {
	f := newAdminRunsFixture(t)
	ctx := context.Background()
	fresh := store.ImportedRun{RunInfo: store.RunInfo{ID: "new", OwnerID: f.ann, Status: "complete", StartedAt: f.t0}}
	taken := store.ImportedRun{RunInfo: store.RunInfo{ID: "r1", OwnerID: f.ann, Status: "complete", StartedAt: f.t0}}
	if err := f.db.InsertRuns(ctx, []store.ImportedRun{fresh, taken}); !errs.Is(err, errs.Conflict) {
		t.Fatalf("a taken id: %v", err)
	}
	if _, err := f.db.RunByID(ctx, "new"); !errs.Is(err, errs.NotFound) {
		t.Errorf("the first run of a failed batch was kept: %v", err)
	}
	orphan := fresh
	orphan.Spans = []store.ImportedSpan{{SpanRow: store.SpanRow{RunID: "new", Seq: 2, Kind: "final", StartedAt: f.t0}, ParentSeq: 1}}
	if err := f.db.InsertRuns(ctx, []store.ImportedRun{orphan}); !errs.Is(err, errs.Invalid) {
		t.Fatalf("a span before its parent: %v", err)
	}
	dup := fresh
	dup.Spans = []store.ImportedSpan{{SpanRow: store.SpanRow{RunID: "new", Seq: 1, Kind: "final", StartedAt: f.t0}},
		{SpanRow: store.SpanRow{RunID: "new", Seq: 1, Kind: "final", StartedAt: f.t0}}}
	if err := f.db.InsertRuns(ctx, []store.ImportedRun{dup}); !errs.Is(err, errs.Invalid) {
		t.Fatalf("a duplicate seq: %v", err)
	}
	fresh.Imported = true
	mustNil(t, f.db.InsertRuns(ctx, []store.ImportedRun{fresh}))
	if imp, err := f.db.RunImported(ctx, "new"); err != nil || !imp {
		t.Errorf("imported: %v, %v", imp, err)
	}
	if imp, err := f.db.RunImported(ctx, "r5"); err != nil || imp {
		t.Errorf("a recorded run counts as imported: %v, %v", imp, err)
	}
}

// A reveal opens a run to the admin who made it, for a while, and to no one
// else.
func TestRunRevealed(t *testing.T) {
	f := newAdminRunsFixture(t)
	ctx := context.Background()
	now := f.t0
	f.db.Now = func() time.Time { return now }
	admin := &store.User{Username: "root", PasswordHash: "h", Role: store.RoleAdmin}
	mustNil(t, f.db.CreateUser(ctx, admin))
	mustNil(t, f.db.AddAudit(ctx, &store.AuditEntry{ActorID: admin.ID, SubjectID: f.bob, Action: store.AuditRevealRun, Detail: "r2"}))
	check := func(actor int64, run string, since time.Time, want bool) {
		t.Helper()
		got, err := f.db.RunRevealed(ctx, actor, run, since)
		mustNil(t, err)
		if got != want {
			t.Errorf("revealed(%d, %s, %v) = %v", actor, run, since, got)
		}
	}
	check(admin.ID, "r2", now.Add(-time.Hour), true)
	check(admin.ID, "r2", now.Add(time.Millisecond), false) // too long ago
	check(admin.ID, "r4", now.Add(-time.Hour), false)
	check(f.ann, "r2", now.Add(-time.Hour), false)
	got, err := f.db.RevealedRuns(ctx, admin.ID, []string{"r1", "r2", "r4"}, now.Add(-time.Hour))
	mustNil(t, err)
	if len(got) != 1 || !got["r2"] {
		t.Errorf("revealed runs: %v", got)
	}
	log, err := f.db.AuditAbout(ctx, f.bob, 10)
	mustNil(t, err)
	if len(log) != 1 || log[0].Action != "reveal-run" || log[0].Detail != "r2" || log[0].ActorName != "root" {
		t.Errorf("bob's audit log: %+v", log)
	}
}
