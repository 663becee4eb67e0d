package web_test

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"atrium/internal/store"
	"atrium/internal/store/storetest"
)

// A full disk: /readyz says so (503), and the user is told the server's disk
// is full, on a page and in the chat, instead of "Something went wrong".
func TestDiskFullIsToldAndNotReady(t *testing.T) {
	env, admin, id := chatEnv(t)
	b := env.browser()
	wantStatus(t, b.get("/readyz"), http.StatusOK)

	// SQLite's size limit on the writer stands in for a full disk.
	pages := storetest.Int(t, env.db, `PRAGMA page_count`)
	storetest.WriterExec(t, env.db, fmt.Sprintf(`PRAGMA max_page_count = %d`, pages+2))
	owner := env.userID("admin")
	ws := admin.dial(id)
	// Fill every table a chat writes: sessions, messages, leases and runs.
	filler := fmt.Sprint("fill-", owner)
	// Big rows first, then small ones for the space left in the last pages.
	n := 0
	for _, size := range []int{500, 50, 0} {
		for ; n < 100000; n++ {
			s := store.Session{ID: fmt.Sprintf("%s-%08d", filler, n), OwnerID: owner, Title: strings.Repeat("x", size)}
			if err := env.db.CreateSession(t.Context(), &s); err != nil {
				break
			}
		}
		for i := 0; i < 100000; i++ {
			if err := env.db.AppendMessage(t.Context(), &store.Message{SessionID: id, Role: store.RoleUser, Content: strings.Repeat("y", size+1)}); err != nil {
				break
			}
		}
	}

	r := b.get("/readyz")
	wantStatus(t, r, http.StatusServiceUnavailable)
	if !strings.Contains(r.body, "full") {
		t.Errorf("/readyz body %q does not say the database is full", r.body)
	}
	r = admin.post("/sessions", nil)
	wantStatus(t, r, http.StatusServiceUnavailable)
	if !strings.Contains(r.body, "disk is full") || strings.Contains(r.body, "Something went wrong") {
		t.Errorf("new chat on a full disk shows:\n%s", r.body)
	}
	ws.send("hello on a full disk")
	if frames := strings.Join(ws.until("disk is full"), "\n"); strings.Contains(frames, "Something went wrong") {
		t.Errorf("the chat says:\n%s", frames)
	}
}

// The data directory deleted under a running server: not ready.
func TestDeletedDataDirIsNotReady(t *testing.T) {
	env := newTestEnv(t)
	b := env.browser()
	wantStatus(t, b.get("/readyz"), http.StatusOK)
	if err := os.RemoveAll(env.dir); err != nil {
		t.Fatal(err)
	}
	r := b.get("/readyz")
	wantStatus(t, r, http.StatusServiceUnavailable)
	if !strings.Contains(r.body, "moved or deleted") {
		t.Errorf("/readyz body %q", r.body)
	}
}
