package store_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"atrium/internal/errs"
	"atrium/internal/store"
)

// fileSize is the database file plus its WAL.
func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	var n int64
	for _, p := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// addRun stores a finished run of owner that started at start, with spans
// spans of 4 KB of incompressible data each (as sealed data is).
func addRun(t *testing.T, db *store.DB, id, session string, owner int64, start time.Time, spans int, end bool) {
	t.Helper()
	ctx := context.Background()
	run := store.RunStart{ID: id, SessionID: session, OwnerID: owner, StartedAt: start}
	mustNil(t, db.CreateRun(ctx, run))
	for i := range spans {
		buf := make([]byte, 3072)
		rand.Read(buf)
		data := fmt.Sprintf(`{"sealed":%q}`, base64.StdEncoding.EncodeToString(buf))
		_, err := db.InsertSpan(ctx, nil, store.SpanRow{RunID: id, Seq: i + 1, Kind: "tool_call", StartedAt: start, EndedAt: start,
			Data: []byte(data)})
		mustNil(t, err)
	}
	if end {
		mustNil(t, db.EndRun(ctx, nil, store.RunEnd{ID: id, Status: "complete", EndedAt: start}))
	}
}

func runIDs(t *testing.T, db *store.DB, owner int64) map[string]bool {
	t.Helper()
	list, err := db.ListRuns(context.Background(), owner, "", 10000)
	mustNil(t, err)
	out := map[string]bool{}
	for _, r := range list {
		out[r.ID] = true
	}
	return out
}

// Retention deletes runs past the age and then the oldest past the size bound,
// keeps pinned and running runs, and the file shrinks once it has run (the free
// pages go back, the WAL is checkpointed).
func TestPruneRunsByAgeAndSize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "atrium.db")
	db := mustOpenPath(t, path)
	ctx := context.Background()
	ann := mustUser(t, db, "ann", store.RoleUser)
	bob := mustUser(t, db, "bob", store.RoleUser)
	mustSession(t, db, "s", ann.ID)
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	old := now.AddDate(0, 0, -40)
	for i := range 100 {
		addRun(t, db, fmt.Sprint("old-", i), "s", ann.ID, old.Add(time.Duration(i)*time.Minute), 10, true)
	}
	addRun(t, db, "old-pinned", "s", ann.ID, old, 10, true)
	addRun(t, db, "old-running", "s", ann.ID, old, 1, false)
	for i := range 50 {
		addRun(t, db, fmt.Sprint("new-", i), "s", ann.ID, now.Add(-time.Duration(50-i)*time.Hour), 10, true)
	}
	mustNil(t, db.SetRunPinned(ctx, ann.ID, "old-pinned", true))
	// Pinning is the owner's: bob's attempt is the same 404 as a missing run.
	if err := db.SetRunPinned(ctx, bob.ID, "old-0", true); !errs.Is(err, errs.NotFound) {
		t.Errorf("bob pinning ann's run: %v", err)
	}
	if err := db.SetRunPinned(ctx, ann.ID, "nope", true); !errs.Is(err, errs.NotFound) {
		t.Errorf("pinning a missing run: %v", err)
	}
	mustNil(t, db.Checkpoint(ctx))
	before := fileSize(t, path)

	n, err := db.PruneRuns(ctx, store.Retention{Before: now.AddDate(0, 0, -30)})
	mustNil(t, err)
	if n != 100 {
		t.Errorf("pruned %d runs by age, want 100", n)
	}
	ids := runIDs(t, db, ann.ID)
	if !ids["old-pinned"] || !ids["old-running"] || len(ids) != 52 || ids["old-0"] {
		t.Errorf("after pruning by age: %d runs, pinned %v, running %v", len(ids), ids["old-pinned"], ids["old-running"])
	}
	after := fileSize(t, path)
	if after > before*2/3 {
		t.Errorf("file %d bytes before, %d after pruning 100 of 152 runs", before, after)
	}
	var spans int
	mustNil(t, db.SQLForTest().QueryRow(`SELECT count(*) FROM spans WHERE run_id LIKE 'old-%' AND run_id NOT IN ('old-pinned', 'old-running')`).Scan(&spans))
	if spans != 0 {
		t.Errorf("%d spans of pruned runs left", spans)
	}

	// By size: down to about 20 new runs' worth; the oldest go first, the pinned run stays.
	size, err := db.TraceBytes(ctx)
	mustNil(t, err)
	perRun := size / 52
	n, err = db.PruneRuns(ctx, store.Retention{MaxBytes: 22 * perRun})
	mustNil(t, err)
	ids = runIDs(t, db, ann.ID)
	if !ids["old-pinned"] || ids["new-0"] || !ids["new-49"] {
		t.Errorf("after pruning by size (%d): pinned %v, oldest new %v, newest %v", n, ids["old-pinned"], ids["new-0"], ids["new-49"])
	}
	if size, err := db.TraceBytes(ctx); err != nil || size > 22*perRun {
		t.Errorf("trace %d bytes after pruning to %d (%v)", size, 22*perRun, err)
	}
	if shrunk := fileSize(t, path); shrunk >= after {
		t.Errorf("file %d bytes after size pruning, %d before", shrunk, after)
	}
	// Nothing over the bounds: nothing pruned.
	if n, err := db.PruneRuns(ctx, store.Retention{Before: now.AddDate(0, 0, -30), MaxBytes: 1 << 40}); err != nil || n != 0 {
		t.Errorf("second prune: %d (%v)", n, err)
	}
}
