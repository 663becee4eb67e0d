package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"html"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

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
	if strings.Contains(bob.get("/memories").body, `data-testid="nav-admin-memories"`) {
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

type exportDoc struct {
	Memories []struct {
		Kind, Text, Source string
		CreatedAt          string `json:"created_at"`
	} `json:"memories"`
}

func TestMemoryExportImportRoundTrip(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	ann := env.user(admin, "ann")
	bob := env.user(admin, "bob")
	ann.addMemory(memory.KindPreference, "I prefer metric units")
	env.clock.advance(2 * time.Minute) // distinct dates, so the order is checked
	ann.addMemory(memory.KindFact, `Ann's "tea" is <oolong> & milk`)

	r := ann.get("/memories/export")
	wantStatus(t, r, http.StatusOK)
	if cd := r.Header.Get("Content-Disposition"); !strings.Contains(cd, "attachment") || !strings.Contains(r.Header.Get("Content-Type"), "json") {
		t.Errorf("export headers: %q, %q", cd, r.Header.Get("Content-Type"))
	}
	var doc exportDoc
	if err := json.Unmarshal([]byte(r.body), &doc); err != nil {
		t.Fatalf("the export is not JSON: %v\n%s", err, r.body)
	}
	if len(doc.Memories) != 2 || doc.Memories[0].Text != "I prefer metric units" || doc.Memories[1].Kind != memory.KindFact ||
		doc.Memories[0].Source != memory.SourceManual || doc.Memories[1].Text != `Ann's "tea" is <oolong> & milk` {
		t.Fatalf("the export, oldest first: %+v", doc)
	}
	if _, err := time.Parse(time.RFC3339, doc.Memories[0].CreatedAt); err != nil {
		t.Errorf("created_at is not RFC 3339: %v", err)
	}
	if !strings.Contains(r.body, "<oolong> & milk") {
		t.Error("the export escapes < > & in texts")
	}

	env.clock.advance(10 * time.Minute)
	wantRedirect(t, bob.post("/memories/import", url.Values{"json": {r.body}}), "/memories?notice="+url.QueryEscape("Imported 2 memories."))
	got := env.memories("bob") // newest first
	if len(got) != 2 || got[1].Text != "I prefer metric units" || got[0].Kind != memory.KindFact || got[0].Text != doc.Memories[1].Text {
		t.Fatalf("bob's memories after the import: %+v", got)
	}
	for i, m := range got {
		want := doc.Memories[1-i]
		if m.Source.Kind != memory.SourceImport || m.CreatedAt.UTC().Format(time.RFC3339) != want.CreatedAt {
			t.Errorf("imported %q: source %s, created %s, want import, %s", m.Text, m.Source.Kind, m.CreatedAt, want.CreatedAt)
		}
	}
	if len(env.memories("ann")) != 2 {
		t.Error("the import changed ann's memories")
	}
	if hits := memoryIDs(bob.get("/memories?q=metric").body); len(hits) != 1 || hits[0] != got[1].ID {
		t.Errorf("the imported memory is not found by search: %v", hits)
	}

	// A file works like a paste.
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	mw.WriteField("_csrf", admin.token())
	fw, _ := mw.CreateFormFile("file", "atrium-memories.json")
	fw.Write([]byte(r.body))
	mw.Close()
	req, _ := http.NewRequest(http.MethodPost, env.ts.URL+"/memories/import", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	wantRedirect(t, admin.do(req), "/memories?notice="+url.QueryEscape("Imported 2 memories."))
	if n := len(env.memories("admin")); n != 2 {
		t.Errorf("the file import saved %d memories", n)
	}
}

func TestMemoryImportRefusesAndChangesNothing(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	ann := env.user(admin, "ann")
	ann.addMemory(memory.KindFact, "Ann already knows this")

	cases := []struct{ name, paste, want string }{
		{"malformed", "{\n  \"memories\": [\n    {\"kind\": \"fact\" \"text\": \"Gribbleton is nice\"}\n  ]\n}",
			"line 3, column 21: invalid character"},
		{"unexpected end", "{\"memories\": [\n  {\"kind\": \"fact\", \"text\": \"Gribbleton\"},", "line 2, column"},
		{"wrong type", "{\"memories\": [\n  {\"kind\": 5, \"text\": \"Gribbleton\"}]}", `line 2, column 12: "kind" must be a string`},
		{"not a list", `{"memories": {"kind": "fact"}}`, `line 1, column 14: "memories" must be a list`},
		{"no memories key", `{"items": []}`, `found no "memories" key`},
		{"empty", "  ", "The import is empty"},
		{"bad kind", "{\"memories\": [\n  {\"kind\": \"fact\", \"text\": \"Gribbleton is fine\"},\n  {\"kind\": \"gossip\", \"text\": \"x\"}]}",
			`entry 2 (line 3): unknown kind "gossip"`},
		{"bad date", "{\"memories\": [{\"kind\": \"fact\", \"text\": \"Gribbleton\", \"created_at\": \"yesterday\"}]}",
			`entry 1 (line 1): "created_at" must be an RFC 3339 time`},
		{"secret", "{\"memories\": [\n  {\"kind\": \"fact\", \"text\": \"Gribbleton sploonfarthing is a town\"},\n  {\"kind\": \"fact\", \"text\": \"my password is hunter22\"}\n]}",
			"entry 2 (line 3): This looks like it contains a password"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := ann.post("/memories/import", url.Values{"json": {c.paste}})
			wantStatus(t, r, http.StatusBadRequest)
			if !strings.Contains(r.body, html.EscapeString(c.want)) || !strings.Contains(r.body, "Nothing was imported.") {
				msg := r.body
				if i := strings.Index(msg, `data-testid="form-error"`); i >= 0 {
					msg = msg[i:min(len(msg), i+400)]
				}
				t.Errorf("the refusal does not say %q: %s", c.want, msg)
			}
			if c.paste != "  " && !strings.Contains(r.body, html.EscapeString(c.paste)+"</textarea>") {
				t.Error("the paste is not refilled")
			}
			if ms := env.memories("ann"); len(ms) != 1 || ms[0].Text != "Ann already knows this" {
				t.Errorf("a refused import changed the memories: %+v", ms)
			}
		})
	}
	// The secret's entry came after a good one: that one was saved and then
	// physically undone.
	env.scanFor("after the refused import", "sploonfarthing hunter22")
}
