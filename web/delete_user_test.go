package web_test

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"atrium/internal/crypto"
	"atrium/internal/errs"
	"atrium/internal/llm/llmtest"
	"atrium/internal/memory"
	"atrium/internal/store"
	"atrium/internal/store/storetest"
	"atrium/internal/testkit"
)

// ownedRowsOf counts, in every table (virtual ones included) with a column of an
// owner or a user, the rows that name userID; the columns come from the schema, so a
// table added later is checked too.
func ownedRowsOf(t *testing.T, db *store.DB, userID int64) map[string]int64 {
	t.Helper()
	pool := storetest.Pool(t, db)
	rows, err := pool.Query(`SELECT m.name, p.name FROM sqlite_schema m, pragma_table_info(m.name) p
		WHERE m.type = 'table' AND p.name IN ('owner_id', 'user_id', 'subject_id', 'actor_id')`)
	if err != nil {
		t.Fatal(err)
	}
	var cols [][2]string
	for rows.Next() {
		var c [2]string
		if err := rows.Scan(&c[0], &c[1]); err != nil {
			t.Fatal(err)
		}
		cols = append(cols, c)
	}
	rows.Close()
	out := map[string]int64{"users.id": storetest.Int(t, db, `SELECT COUNT(*) FROM users WHERE id = ?`, userID),
		"settings": storetest.Int(t, db, `SELECT COUNT(*) FROM settings WHERE key LIKE '%.user.' || ?`, userID)}
	for _, c := range cols {
		out[c[0]+"."+c[1]] = storetest.Int(t, db, `SELECT COUNT(*) FROM "`+c[0]+`" WHERE "`+c[1]+`" = ?`, userID)
	}
	return out
}

// TestDeleteUserShredsEverything: a user with a chat (a message and a reply, so a run
// with its spans), a memory, memory settings, an audit entry and an open socket is
// deleted by an admin. Afterwards no table holds a row of theirs, the database files
// hold none of their texts, their old ciphertext opens with no keyring (this one or a
// fresh one on the same file), their socket is closed and their login is gone.
func TestDeleteUserShredsEverything(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "fake-model", "")
	const (
		username = "quillfeather"
		said     = "Quoxmantle velvetine harborglass"
		replied  = "Florizel tamboline crystalwick"
		kept     = "Mirthwold zephyrine cobblestrand"
	)
	bob := env.user(admin, username)
	bobID := env.userID(username)
	id := bob.newSession()
	ws := bob.dial(id)
	env.llm.Enqueue(llmtest.Reply{Text: llmtest.Words(replied)})
	ws.send(said)
	ws.until(finalMarker)
	memID := bob.addMemory(memory.KindFact, kept)
	wantStatus(t, bob.post("/memories/settings", url.Values{"enabled": {"on"}}), http.StatusSeeOther)
	wantStatus(t, admin.post(adminMemoriesPath(bobID, "/reveal"), nil), http.StatusOK)

	ctx := context.Background()
	testkit.Eventually(t, 5*time.Second, "the run recorded", func() bool { // after the final frame
		runs, err := env.db.ListRuns(ctx, bobID, id, 10)
		return err == nil && len(runs) == 1 && runs[0].Status == "complete"
	})
	before := ownedRowsOf(t, env.db, bobID)
	for _, k := range []string{"users.id", "sessions.owner_id", "runs.owner_id", "memories.owner_id", "memory_bits.owner_id", "memory_vector_versions.owner_id",
		"memory_terms.owner_id", "logins.user_id", "data_keys.owner_id", "audit_log.subject_id", "settings"} {
		if before[k] == 0 {
			t.Fatalf("the fixture gave the user no row in %s: %v", k, before)
		}
	}
	m, err := env.db.MemoryByID(ctx, bobID, memID)
	if err != nil {
		t.Fatal(err)
	}
	ad := crypto.AD("memory", memID, strconv.FormatInt(bobID, 10))
	if pt, err := env.app.Keys.Open(ctx, bobID, m.Sealed, ad); err != nil || string(pt) != kept {
		t.Fatalf("the memory does not open before the deletion: %q %v", pt, err)
	}
	if !bytes.Contains(env.dbFiles(), []byte(said)) {
		t.Fatal("the chat text is not in the database files before the deletion: the scan would prove nothing")
	}

	// Refused: a wrong confirmation, and deleting oneself. Nothing goes.
	r := admin.post("/settings/users/"+itoa(bobID)+"/delete", url.Values{"confirm": {"admin"}})
	wantStatus(t, r, http.StatusBadRequest)
	if !strings.Contains(r.body, "Type the username “"+username+"” to confirm; nothing was deleted.") {
		t.Errorf("the refusal does not say why: %.2000s", r.body)
	}
	r = admin.post("/settings/users/"+itoa(env.userID("admin"))+"/delete", url.Values{"confirm": {"admin"}})
	wantStatus(t, r, http.StatusConflict)
	if !strings.Contains(r.body, "You cannot delete your own account.") {
		t.Errorf("deleting oneself: %.2000s", r.body)
	}
	if after := ownedRowsOf(t, env.db, bobID); after["users.id"] != 1 || after["memories.owner_id"] != before["memories.owner_id"] {
		t.Fatalf("a refused deletion deleted: %v", after)
	}

	start := time.Now()
	r = admin.post("/settings/users/"+itoa(bobID)+"/delete", url.Values{"confirm": {" " + strings.ToUpper(username) + " "}})
	wantRedirect(t, r, "/settings/users?notice="+url.QueryEscape("User "+username+" deleted, with their chats, memories, runs and data key."))
	took, _ := ws.waitClosed(start, closeBound)
	t.Logf("the deleted user's socket closed %v after the request started", took)

	for k, n := range ownedRowsOf(t, env.db, bobID) {
		if n != 0 {
			t.Errorf("%s: %d rows of the deleted user", k, n)
		}
	}
	for _, q := range []string{`SELECT COUNT(*) FROM messages WHERE session_id = ?`, `SELECT COUNT(*) FROM session_leases WHERE session_id = ?`,
		`SELECT COUNT(*) FROM spans WHERE run_id IN (SELECT id FROM runs WHERE session_id = ?)`} {
		if n := storetest.Int(t, env.db, q, id); n != 0 {
			t.Errorf("%s: %d", q, n)
		}
	}
	if n := storetest.Int(t, env.db, `SELECT COUNT(*) FROM memory_embeddings WHERE seq = ?`, m.Seq); n != 0 {
		t.Errorf("the memory's embedding is still stored")
	}
	for _, s := range []string{username, said, replied, kept} {
		env.scanFor("after deleting the user", s)
	}

	// Crypto-shredded: the old ciphertext opens with neither this keyring nor a fresh
	// one on the same database and master key, and no new key was made for the user.
	if _, err := env.app.Keys.Open(ctx, bobID, m.Sealed, ad); err == nil {
		t.Error("the running keyring still opens the deleted user's memory")
	}
	master, _, err := crypto.LoadMasterKey(env.dir, "")
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := crypto.NewKeyring(ctx, master, env.db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.Open(ctx, bobID, m.Sealed, ad); err == nil {
		t.Error("a fresh keyring opens the deleted user's memory")
	}
	if _, err := env.db.WrappedKey(ctx, bobID); !errs.Is(err, errs.NotFound) {
		t.Errorf("a data key exists for the deleted user: %v", err)
	}

	// Their browser is logged out; the page no longer lists them; the admin's own
	// chat still works.
	wantRedirect(t, bob.get("/"), "/login")
	page := admin.get("/settings/users")
	if strings.Contains(page.body, username) {
		t.Error("the users page still lists the deleted user")
	}
	aid := admin.newSession()
	admin.dial(aid).stillOpen(env, "the admin goes on")
}

// TestDeleteUserMidReply: deleting a user whose reply is streaming stops it, and what
// the stopped run saves as it ends (its partial reply, its run record) cannot bring
// back a row or a data key of theirs.
func TestDeleteUserMidReply(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "fake-model", "")
	bob := env.user(admin, "bob")
	bobID := env.userID("bob")
	id := bob.newSession()
	ws := bob.dial(id)
	env.llm.Enqueue(llmtest.Reply{Text: []string{"Partial ", "Vexilloquent ", "never finished"}, StallAfter: 2})
	ws.send("start a reply that stalls")
	ws.until("Vexilloquent")

	start := time.Now()
	wantStatus(t, admin.post("/settings/users/"+itoa(bobID)+"/delete", url.Values{"confirm": {"bob"}}), http.StatusSeeOther)
	ws.waitClosed(start, closeBound)
	testkit.Eventually(t, 5*time.Second, "the stopped reply ended", func() bool { return !env.agent.Busy(id) })
	time.Sleep(100 * time.Millisecond) // the recorder's last writes follow the run's end
	for k, n := range ownedRowsOf(t, env.db, bobID) {
		if n != 0 {
			t.Errorf("%s: %d rows of the deleted user after their reply ended", k, n)
		}
	}
	if n := storetest.Int(t, env.db, `SELECT COUNT(*) FROM messages WHERE session_id = ?`, id); n != 0 {
		t.Errorf("%d messages of the deleted chat", n)
	}
	if err := env.db.Checkpoint(context.Background()); err != nil {
		t.Fatal(err)
	}
	env.scanFor("after the stopped reply of a deleted user", "Vexilloquent")
}
