package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"atrium/internal/errs"
	"atrium/internal/store"
)

func mustUser(tb testing.TB, db *store.DB, name, role string) store.User {
	tb.Helper()
	u := store.User{Username: name, PasswordHash: "hash-" + name, Role: role}
	if err := db.CreateUser(context.Background(), &u); err != nil {
		tb.Fatalf("create user %s: %v", name, err)
	}
	return u
}

func TestCreateFirstAdmin(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	u, err := db.CreateFirstAdmin(ctx, "root", "h")
	mustNil(t, err)
	if u.ID == 0 || u.Role != store.RoleAdmin || u.Disabled || u.CreatedAt.IsZero() {
		t.Errorf("first admin = %+v", u)
	}
	got, err := db.UserByID(ctx, u.ID)
	mustNil(t, err)
	if got != u {
		t.Errorf("stored %+v, returned %+v", got, u)
	}
	_, err = db.CreateFirstAdmin(ctx, "other", "h")
	wantCode(t, err, errs.Conflict)
}

func TestCreateFirstAdminRace(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	const n = 8
	var wg sync.WaitGroup
	results := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, results[i] = db.CreateFirstAdmin(ctx, fmt.Sprintf("admin%d", i), "h")
		})
	}
	wg.Wait()
	wins := 0
	for _, err := range results {
		switch {
		case err == nil:
			wins++
		case errs.Is(err, errs.Conflict):
		default:
			t.Errorf("unexpected error: %v", err)
		}
	}
	if wins != 1 {
		t.Errorf("%d setups won, want exactly 1", wins)
	}
	if c, _ := db.CountUsers(ctx); c != 1 {
		t.Errorf("%d users, want 1", c)
	}
}

func TestUsers(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	ann := mustUser(t, db, "Ann", store.RoleAdmin)
	bob := mustUser(t, db, "bob", store.RoleUser)

	t.Run("lookup is case insensitive", func(t *testing.T) {
		u, err := db.UserByUsername(ctx, "ANN")
		mustNil(t, err)
		if u.ID != ann.ID {
			t.Errorf("got %+v", u)
		}
	})
	t.Run("duplicate username conflicts", func(t *testing.T) {
		u := store.User{Username: "ann", PasswordHash: "x", Role: store.RoleUser}
		wantCode(t, db.CreateUser(ctx, &u), errs.Conflict)
	})
	t.Run("invalid input", func(t *testing.T) {
		for _, u := range []store.User{
			{Username: "", Role: store.RoleUser},
			{Username: "zed", Role: "root"},
		} {
			wantCode(t, db.CreateUser(ctx, &u), errs.Invalid)
		}
		wantCode(t, db.SetUserRole(ctx, bob.ID, "god"), errs.Invalid)
	})
	t.Run("not found", func(t *testing.T) {
		_, err := db.UserByID(ctx, 999)
		wantCode(t, err, errs.NotFound)
		_, err = db.UserByUsername(ctx, "nobody")
		wantCode(t, err, errs.NotFound)
		wantCode(t, db.SetUserDisabled(ctx, 999, true), errs.NotFound)
		wantCode(t, db.SetUserRole(ctx, 999, store.RoleUser), errs.NotFound)
		wantCode(t, db.SetUserPassword(ctx, 999, "x"), errs.NotFound)
	})
	t.Run("list and count", func(t *testing.T) {
		us, err := db.ListUsers(ctx)
		mustNil(t, err)
		if len(us) != 2 || us[0].Username != "Ann" || us[1].Username != "bob" {
			t.Errorf("list = %+v", us)
		}
		n, err := db.CountUsers(ctx)
		mustNil(t, err)
		if n != 2 {
			t.Errorf("count = %d", n)
		}
	})
}

func TestLastAdminProtected(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	ann := mustUser(t, db, "ann", store.RoleAdmin)
	bob := mustUser(t, db, "bob", store.RoleUser)

	wantCode(t, db.SetUserDisabled(ctx, ann.ID, true), errs.Conflict)
	wantCode(t, db.SetUserRole(ctx, ann.ID, store.RoleUser), errs.Conflict)

	// With a second admin, ann can step down; then bob is the last one.
	mustNil(t, db.SetUserRole(ctx, bob.ID, store.RoleAdmin))
	mustNil(t, db.SetUserRole(ctx, ann.ID, store.RoleUser))
	wantCode(t, db.SetUserDisabled(ctx, bob.ID, true), errs.Conflict)

	// A disabled admin does not count as the spare.
	mustNil(t, db.SetUserRole(ctx, ann.ID, store.RoleAdmin))
	mustNil(t, db.SetUserDisabled(ctx, ann.ID, true))
	wantCode(t, db.SetUserRole(ctx, bob.ID, store.RoleUser), errs.Conflict)
	// Demoting the disabled admin is fine.
	mustNil(t, db.SetUserRole(ctx, ann.ID, store.RoleUser))

	u, err := db.UserByID(ctx, ann.ID)
	mustNil(t, err)
	if !u.Disabled || u.Role != store.RoleUser {
		t.Errorf("ann = %+v", u)
	}
	mustNil(t, db.SetUserDisabled(ctx, ann.ID, false))
	if u, _ := db.UserByID(ctx, ann.ID); u.Disabled {
		t.Error("ann still disabled")
	}
}

func TestPasswordAndDisableDropLogins(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	mustUser(t, db, "root", store.RoleAdmin)
	bob := mustUser(t, db, "bob", store.RoleUser)
	tests := []struct {
		name   string
		change func() error
	}{
		{"password reset", func() error { return db.SetUserPassword(ctx, bob.ID, "new-hash") }},
		{"disable", func() error { return db.SetUserDisabled(ctx, bob.ID, true) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hash := []byte("token-" + tc.name)
			mustNil(t, db.CreateLogin(ctx, store.Login{TokenHash: hash, UserID: bob.ID, ExpiresAt: db.Now().Add(1e12)}))
			if _, _, err := db.LoginByTokenHash(ctx, hash); err != nil {
				t.Fatal(err)
			}
			mustNil(t, tc.change())
			_, _, err := db.LoginByTokenHash(ctx, hash)
			wantCode(t, err, errs.NotFound)
		})
	}
	u, err := db.UserByID(ctx, bob.ID)
	mustNil(t, err)
	if u.PasswordHash != "new-hash" || !u.Disabled {
		t.Errorf("bob = %+v", u)
	}
}

// userData gives u one of everything a user can own: a chat with a message, a lease,
// a run of that chat and one outside any chat (each with a span), a memory with its
// index terms and vectors, a login, a memory setting, a data key and an audit entry
// about them.
func userData(t *testing.T, db *store.DB, u store.User, r *rand.Rand) {
	t.Helper()
	ctx := context.Background()
	sid := fmt.Sprintf("session-of-%d", u.ID)
	mustSession(t, db, sid, u.ID)
	file := store.Attachment{ID: fmt.Sprintf("file-%d", u.ID), OwnerID: u.ID, SessionID: sid, Name: "a.txt", Kind: store.AttachText, MIME: "text/plain", Data: []byte("file of " + u.Username)}
	mustNil(t, db.CreateAttachment(ctx, &file, 0))
	mustNil(t, db.AppendMessage(ctx, &store.Message{SessionID: sid, Role: store.RoleUser, Content: "hello from " + u.Username,
		Attachments: []store.Attachment{{ID: file.ID}}}))
	if ok, err := db.AcquireLease(ctx, sid, "test", time.Minute); err != nil || !ok {
		t.Fatalf("lease: %v %v", ok, err)
	}
	for _, run := range []store.RunStart{{ID: "run-" + sid, SessionID: sid, OwnerID: u.ID}, {ID: fmt.Sprintf("run-alone-%d", u.ID), OwnerID: u.ID}} {
		run.StartedAt = time.Now()
		mustNil(t, db.CreateRun(ctx, run))
		_, err := db.InsertSpan(ctx, nil, store.SpanRow{RunID: run.ID, Seq: 1, Kind: "final", StartedAt: time.Now(), Data: []byte(`{"text":"hi"}`)})
		mustNil(t, err)
	}
	ix, _ := testIndex(r, "tag-a", "tag-b")
	insertMem(t, db, u.ID, fmt.Sprintf("mem-%d", u.ID), ix)
	mustNil(t, db.CreateLogin(ctx, store.Login{TokenHash: []byte("login-" + u.Username), UserID: u.ID, ExpiresAt: time.Now().Add(time.Hour)}))
	mustNil(t, db.SetSetting(ctx, fmt.Sprintf("memory.user.%d", u.ID), `{"enabled":true}`))
	mustNil(t, db.PutWrappedKey(ctx, u.ID, []byte("wrapped-"+u.Username)))
}

// ownedRows counts the rows of every table (virtual ones included) that name userID
// in a column of an owner or a user, found from the schema so that a table added
// later is checked too.
func ownedRows(t *testing.T, db *store.DB, userID int64) map[string]int {
	t.Helper()
	rows, err := db.SQLForTest().Query(`SELECT m.name, p.name FROM sqlite_schema m, pragma_table_info(m.name) p
		WHERE m.type = 'table' AND p.name IN ('owner_id', 'user_id', 'subject_id', 'actor_id')`)
	mustNil(t, err)
	type col struct{ table, column string }
	var cols []col
	for rows.Next() {
		var c col
		mustNil(t, rows.Scan(&c.table, &c.column))
		cols = append(cols, c)
	}
	mustNil(t, rows.Err())
	rows.Close()
	if len(cols) < 8 {
		t.Fatalf("found only %d owner/user columns in the schema: %v", len(cols), cols)
	}
	out := map[string]int{}
	for _, c := range cols {
		out[c.table+"."+c.column] = countRows(t, db, `SELECT COUNT(*) FROM "`+c.table+`" WHERE "`+c.column+`" = ?`, userID)
	}
	out["users.id"] = countRows(t, db, `SELECT COUNT(*) FROM users WHERE id = ?`, userID)
	out["settings"] = countRows(t, db, `SELECT COUNT(*) FROM settings WHERE key = ?`, fmt.Sprintf("memory.user.%d", userID))
	return out
}

func TestDeleteUser(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	admin := mustUser(t, db, "root", store.RoleAdmin)
	bob := mustUser(t, db, "bob", store.RoleUser)
	ann := mustUser(t, db, "ann", store.RoleAdmin) // the newest user: her id is the highest
	for _, u := range []store.User{bob, ann} {
		userData(t, db, u, r)
	}
	mustNil(t, db.SetSetting(ctx, "default_model", "1/m"))
	mustNil(t, db.AddAudit(ctx, &store.AuditEntry{ActorID: admin.ID, SubjectID: ann.ID, Action: store.AuditReveal}))
	byAnn := store.AuditEntry{ActorID: ann.ID, SubjectID: bob.ID, Action: store.AuditReveal}
	mustNil(t, db.AddAudit(ctx, &byAnn))
	bobBefore := ownedRows(t, db, bob.ID)
	annBefore := ownedRows(t, db, ann.ID)
	for _, k := range []string{"sessions.owner_id", "runs.owner_id", "memories.owner_id", "memory_terms.owner_id",
		"memory_bits.owner_id", "memory_vector_versions.owner_id", "logins.user_id", "data_keys.owner_id", "audit_log.subject_id", "users.id", "settings", "attachments.owner_id"} {
		if annBefore[k] == 0 {
			t.Fatalf("the fixture gave ann no row in %s: %v", k, annBefore)
		}
	}
	total := func(q string) int { return countRows(t, db, q) }
	messages, spans, terms, embeddings := total(`SELECT COUNT(*) FROM messages`), total(`SELECT COUNT(*) FROM spans`),
		total(`SELECT COUNT(*) FROM memory_terms`), total(`SELECT COUNT(*) FROM memory_embeddings`)

	mustNil(t, db.DeleteUser(ctx, ann.ID))

	for k, n := range ownedRows(t, db, ann.ID) {
		if n != 0 {
			t.Errorf("%s: %d rows of the deleted user", k, n)
		}
	}
	// Rows reached through a chat, a run or a memory: exactly ann's went.
	if got := total(`SELECT COUNT(*) FROM messages`); got != messages-1 {
		t.Errorf("messages %d → %d, want one fewer", messages, got)
	}
	if got := total(`SELECT COUNT(*) FROM spans`); got != spans-2 {
		t.Errorf("spans %d → %d, want two fewer", spans, got)
	}
	if got := total(`SELECT COUNT(*) FROM memory_terms`); got != terms-2 {
		t.Errorf("memory terms %d → %d, want two fewer", terms, got)
	}
	if got := total(`SELECT COUNT(*) FROM memory_embeddings`); got != embeddings-1 {
		t.Errorf("memory embeddings %d → %d, want one fewer", embeddings, got)
	}
	if n := total(`SELECT COUNT(*) FROM session_leases`); n != 1 {
		t.Errorf("%d leases, want bob's only", n)
	}
	// Bob keeps all of his, the instance its settings, and the entry ann made about
	// bob stays with its actor gone.
	bobAfter := ownedRows(t, db, bob.ID)
	for k, n := range bobBefore {
		if bobAfter[k] != n {
			t.Errorf("bob's %s: %d → %d", k, n, bobAfter[k])
		}
	}
	if v, err := db.Setting(ctx, "default_model"); err != nil || v != "1/m" {
		t.Errorf("instance setting: %q %v", v, err)
	}
	got, err := db.AuditAbout(ctx, bob.ID, 10)
	mustNil(t, err)
	if len(got) != 1 || got[0].ID != byAnn.ID || got[0].ActorID != 0 {
		t.Errorf("audit about bob after his actor's deletion: %+v", got)
	}
	// Her key cannot come back, and her id is never handed out again.
	wantCode(t, db.PutWrappedKey(ctx, ann.ID, []byte("new")), errs.NotFound)
	if next := mustUser(t, db, "carl", store.RoleUser); next.ID <= ann.ID {
		t.Errorf("the next user got id %d, not above the deleted %d", next.ID, ann.ID)
	}

	wantCode(t, db.DeleteUser(ctx, ann.ID), errs.NotFound)
	wantCode(t, db.DeleteUser(ctx, store.InstanceOwner), errs.NotFound)
	wantCode(t, db.DeleteUser(ctx, admin.ID), errs.Conflict) // the last enabled admin
	if _, err := db.UserByID(ctx, admin.ID); err != nil {
		t.Errorf("the refused deletion deleted: %v", err)
	}
}

// TestDeleteUserIsOneTransaction: a failure part way (here a trigger that refuses to
// delete the user row, after everything else of theirs went) leaves all of it.
func TestDeleteUserIsOneTransaction(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	mustUser(t, db, "root", store.RoleAdmin)
	ann := mustUser(t, db, "ann", store.RoleUser)
	userData(t, db, ann, rand.New(rand.NewPCG(3, 4)))
	before := ownedRows(t, db, ann.ID)
	_, err := db.SQLForTest().Exec(`CREATE TRIGGER refuse BEFORE DELETE ON users BEGIN SELECT RAISE(ABORT, 'refused'); END`)
	mustNil(t, err)
	if err := db.DeleteUser(ctx, ann.ID); err == nil {
		t.Fatal("the deletion went through the refusing trigger")
	}
	after := ownedRows(t, db, ann.ID)
	for k, n := range before {
		if after[k] != n {
			t.Errorf("%s: %d → %d after a failed deletion", k, n, after[k])
		}
	}
	if n := countRows(t, db, `SELECT COUNT(*) FROM messages`); n != 1 {
		t.Errorf("%d messages after a failed deletion", n)
	}
}
