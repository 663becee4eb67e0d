package web_test

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"atrium/internal/memory"
	"atrium/internal/store"
)

func (e *testEnv) userID(username string) int64 {
	e.t.Helper()
	u, err := e.db.UserByUsername(context.Background(), username)
	if err != nil {
		e.t.Fatal(err)
	}
	return u.ID
}

func (e *testEnv) auditAbout(username string) []store.AuditEntry {
	e.t.Helper()
	got, err := e.db.AuditAbout(context.Background(), e.userID(username), 100)
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

func adminMemoriesPath(uid int64, rest string) string {
	return "/settings/memories/" + itoa(uid) + rest
}

func TestAdminMemoriesShowMetadataUntilReveal(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	ann := env.user(admin, "ann")
	env.user(admin, "bob")
	const garden = "Ann hides the spare key under the gnome"
	a := ann.addMemory(memory.KindFact, garden)
	b := ann.addMemory(memory.KindPreference, "Ann prefers <oolong> tea")
	uid := env.userID("ann")

	r := admin.get("/settings/memories")
	wantStatus(t, r, http.StatusOK)
	for _, want := range []string{`data-username="ann"`, `data-username="bob"`, `data-testid="memory-owner-count">2<`,
		"preference 1", "fact 1", "encrypted", `data-testid="memory-owner-reveal"`, `data-testid="nav-admin-memories"`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("the admin page lacks %s", want)
		}
	}
	for _, leak := range []string{"gnome", "oolong", a, b} {
		if strings.Contains(r.body, leak) {
			t.Errorf("the metadata page shows %q", leak)
		}
	}
	if n := len(env.auditAbout("ann")); n != 0 {
		t.Errorf("%d audit entries before any reveal", n)
	}

	r = admin.post(adminMemoriesPath(uid, "/reveal"), nil)
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(r.body, html.EscapeString(garden)) || !strings.Contains(r.body, "Ann prefers &lt;oolong&gt; tea") {
		t.Errorf("the reveal does not show ann's texts: %.2000s", r.body)
	}
	if r.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("the revealed page may be cached: %q", r.Header.Get("Cache-Control"))
	}
	if strings.Count(r.body, `data-testid="memory-owner-revealed"`) != 1 {
		t.Error("the reveal shows more than ann's memories")
	}
	// The texts were in that response only: the page is metadata again.
	if r := admin.get("/settings/memories"); strings.Contains(r.body, "gnome") {
		t.Error("the texts stay revealed after the reveal's response")
	}

	log := env.auditAbout("ann")
	if len(log) != 1 || log[0].Action != store.AuditReveal || log[0].ActorID != env.userID("admin") ||
		log[0].SubjectID != uid || log[0].Detail != "2" || log[0].At.IsZero() {
		t.Fatalf("audit after the reveal: %+v", log)
	}
	page := ann.get("/memories").body
	if !strings.Contains(page, `data-testid="memory-audit"`) || !strings.Contains(page, "Admin admin viewed your memories on") {
		t.Errorf("ann's page does not show the reveal: %.3000s", page)
	}
	if strings.Contains(admin.get("/memories").body, `data-testid="memory-audit"`) {
		t.Error("the admin's own page lists an audit of ann's memories")
	}
	env.scanFor("after the reveal", "gnome spare")
}

func TestAdminMemoriesNotFoundForUsers(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	ann := env.user(admin, "ann")
	bob := env.user(admin, "bob")
	id := ann.addMemory(memory.KindFact, "Ann was born in Lisbon")
	uid := env.userID("ann")
	missing := map[*browser]string{bob: bob.get("/no-such-page").body, ann: ann.get("/no-such-page").body}
	for _, r := range []struct {
		who *browser
		response
	}{
		{bob, bob.get("/settings/memories")},
		{bob, bob.get("/settings/memories/")},
		{bob, bob.post(adminMemoriesPath(uid, "/reveal"), nil)},
		{bob, bob.post(adminMemoriesPath(uid, "/delete"), url.Values{"id": {id}})},
		{bob, bob.post(adminMemoriesPath(uid, "/forget-all"), url.Values{"confirm": {"ann"}})},
		{ann, ann.post(adminMemoriesPath(uid, "/reveal"), nil)},
		{ann, ann.post(adminMemoriesPath(uid, "/forget-all"), url.Values{"confirm": {"ann"}})},
	} {
		wantStatus(t, r.response, http.StatusNotFound)
		if r.body != missing[r.who] || strings.Contains(r.body, "Lisbon") {
			t.Errorf("%s %s: the 404 differs from a missing page's", r.Request.Method, r.Request.URL.Path)
		}
	}
	if len(env.memories("ann")) != 1 || len(env.auditAbout("ann")) != 0 {
		t.Error("a user's requests changed ann's memories or the audit log")
	}
	if strings.Contains(bob.get("/").body, `data-testid="nav-admin-memories"`) {
		t.Error("a user's nav links to the admin memories page")
	}
}

func TestAdminDeletesArePhysicalAndAudited(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	ann := env.user(admin, "ann")
	bob := env.user(admin, "bob")
	a := ann.addMemory(memory.KindFact, "Ann owns a zorbling kayak")
	b := ann.addMemory(memory.KindFact, "Ann owns a quillfeather bicycle")
	c := ann.addMemory(memory.KindFact, "Ann owns a mintroast grinder")
	ann.addMemory(memory.KindOther, "Ann owns a plumtwist lamp")
	ann.addMemory(memory.KindOther, "Ann owns a velvicord chair")
	bobs := bob.addMemory(memory.KindFact, "Bob owns a drumwhistle")
	uid := env.userID("ann")

	t.Run("another user's ids are 404", func(t *testing.T) {
		wantStatus(t, admin.post(adminMemoriesPath(uid, "/delete"), url.Values{"id": {bobs}}), http.StatusNotFound)
		wantStatus(t, admin.post(adminMemoriesPath(uid, "/delete"), url.Values{"id": {a, bobs}}), http.StatusNotFound)
		wantStatus(t, admin.post(adminMemoriesPath(uid, "/delete"), url.Values{"id": {"mem_missing"}}), http.StatusNotFound)
		wantStatus(t, admin.post("/settings/memories/99999/reveal", nil), http.StatusNotFound)
		wantStatus(t, admin.post("/settings/memories/x/forget-all", url.Values{"confirm": {"x"}}), http.StatusNotFound)
		if len(env.memories("ann")) != 5 || len(env.memories("bob")) != 1 || len(env.auditAbout("ann")) != 0 {
			t.Error("a refused delete changed something")
		}
		r := admin.post(adminMemoriesPath(uid, "/delete"), nil)
		wantStatus(t, r, http.StatusBadRequest)
		if !strings.Contains(r.body, "Select the memories to delete first.") {
			t.Error("a delete without ids says nothing")
		}
	})

	t.Run("one and selected", func(t *testing.T) {
		wantRedirect(t, admin.post(adminMemoriesPath(uid, "/delete"), url.Values{"id": {a}}),
			"/settings/memories?notice="+url.QueryEscape("Deleted 1 of ann’s memory."))
		wantRedirect(t, admin.post(adminMemoriesPath(uid, "/delete"), url.Values{"id": {b, c}}),
			"/settings/memories?notice="+url.QueryEscape("Deleted 2 of ann’s memories."))
		left := memoryIDs(ann.get("/memories").body)
		for _, gone := range []string{a, b, c} {
			for _, id := range left {
				if id == gone {
					t.Errorf("%s is still listed", gone)
				}
			}
		}
		for _, q := range []string{"zorbling", "quillfeather", "mintroast"} {
			if got := memoryIDs(ann.get("/memories?q=" + q).body); len(got) != 0 {
				t.Errorf("the search for %s still finds %v", q, got)
			}
		}
		env.scanFor("after the admin's deletes", "zorbling quillfeather mintroast")
		log := env.auditAbout("ann")
		if len(log) != 2 || log[0].Detail != b+" "+c || log[1].Detail != a || log[0].Action != store.AuditDelete {
			t.Errorf("audit after the deletes: %+v", log)
		}
	})

	t.Run("forget all", func(t *testing.T) {
		r := admin.post(adminMemoriesPath(uid, "/forget-all"), url.Values{"confirm": {"bob"}})
		wantStatus(t, r, http.StatusBadRequest)
		if !strings.Contains(r.body, "nothing was deleted") || len(env.memories("ann")) != 2 {
			t.Errorf("forget-all with the wrong name: %d left", len(env.memories("ann")))
		}
		wantRedirect(t, admin.post(adminMemoriesPath(uid, "/forget-all"), url.Values{"confirm": {" Ann "}}),
			"/settings/memories?notice="+url.QueryEscape("Deleted all 2 of ann’s memories."))
		if n := len(env.memories("ann")); n != 0 {
			t.Errorf("%d memories after forget-all", n)
		}
		if got := memoryIDs(ann.get("/memories?q=plumtwist").body); len(got) != 0 {
			t.Errorf("the search still finds %v", got)
		}
		env.scanFor("after the admin's forget-all", "plumtwist velvicord")
		if len(env.memories("bob")) != 1 {
			t.Error("forgetting ann's memories touched bob's")
		}
		log := env.auditAbout("ann")
		if len(log) != 3 || log[0].Action != store.AuditDeleteAll || log[0].Detail != "2" {
			t.Errorf("audit after forget-all: %+v", log)
		}
		page := ann.get("/memories").body
		for _, want := range []string{"Admin admin deleted 1 of your memories on", "Admin admin deleted 2 of your memories on",
			"Admin admin deleted all 2 of your memories on"} {
			if !strings.Contains(page, want) {
				t.Errorf("ann's page lacks %q", want)
			}
		}
		if strings.Contains(bob.get("/memories").body, `data-testid="memory-audit"`) {
			t.Error("bob sees entries about ann")
		}
	})
}
