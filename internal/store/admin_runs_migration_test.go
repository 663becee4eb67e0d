package store

import (
	"context"
	"testing"
)

// Migration 0028 rebuilds audit_log for 'reveal-run': the rows and the index
// written before it stay, and the tools of runs recorded before it are listed.
func TestMigration0028KeepsAuditAndListsTools(t *testing.T) {
	ctx := context.Background()
	path, raw, exec := databaseBefore(t, 28)
	exec(`INSERT INTO users (id, username, password_hash, role, created_at, updated_at) VALUES (1, 'root', 'h', 'admin', 0, 0), (2, 'ann', 'h', 'user', 0, 0)`)
	exec(`INSERT INTO audit_log (id, at, actor_id, subject_id, action, detail) VALUES (5, 100, 1, 2, 'reveal', '3'), (9, 200, NULL, 2, 'delete-all', '4')`)
	exec(`INSERT INTO runs (id, owner_id, status, started_at) VALUES ('old-run', 2, 'complete', 300)`)
	exec(`INSERT INTO spans (run_id, seq, kind, name, started_at) VALUES ('old-run', 1, 'tool_call', 'search', 300), ('old-run', 2, 'final', '', 301)`)
	if _, err := raw.ExecContext(ctx, `INSERT INTO audit_log (at, actor_id, subject_id, action) VALUES (1, 1, 2, 'reveal-run')`); err == nil {
		t.Fatal("the old CHECK took reveal-run: the test does not test the migration")
	}
	raw.Close()

	db, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	log, err := db.AuditAbout(ctx, 2, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 2 || log[0].ID != 9 || log[0].ActorID != 0 || log[0].Action != AuditDeleteAll || log[0].Detail != "4" ||
		log[1].ID != 5 || log[1].ActorName != "root" || log[1].At.UnixMilli() != 100 || log[1].Detail != "3" {
		t.Fatalf("audit after migration: %+v", log)
	}
	var n int
	if err := db.pool.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = 'audit_log_subject' AND tbl_name = 'audit_log'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("audit_log_subject after migration: %d, %v", n, err)
	}
	if err := db.AddAudit(ctx, &AuditEntry{ActorID: 1, SubjectID: 2, Action: AuditRevealRun, Detail: "old-run"}); err != nil {
		t.Fatalf("reveal-run after migration: %v", err)
	}
	if err := db.AddAudit(ctx, &AuditEntry{ActorID: 1, SubjectID: 2, Action: "peek"}); err == nil {
		t.Error("an unknown action was written")
	}
	runs, _, err := db.AllRuns(ctx, RunFilter{Tool: "search"}, nil, 10)
	if err != nil || len(runs) != 1 || runs[0].ID != "old-run" {
		t.Errorf("the tool filter on a run recorded before 0028: %+v, %v", runs, err)
	}
	// Deleting the user takes the audit rows about them and the run's tool list.
	if _, err := db.exec(ctx, `DELETE FROM users WHERE id = 2`); err != nil {
		t.Fatal(err)
	}
	if err := db.pool.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM audit_log) + (SELECT COUNT(*) FROM run_tools)`).Scan(&n); err != nil || n != 0 {
		t.Errorf("rows left after deleting the user: %d, %v", n, err)
	}
}
