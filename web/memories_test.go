package web_test

import (
	"bytes"
	"context"
	"errors"
	"html"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"atrium/internal/memory"
	"atrium/views"
)

var memoryIDRE = regexp.MustCompile(`data-memory-id="([^"]+)"`)

// memoryIDs are the ids of the memories a page lists, in order.
func memoryIDs(body string) []string {
	var ids []string
	for _, m := range memoryIDRE.FindAllStringSubmatch(body, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

// addMemory saves a memory through the page and returns its id (the newest is listed first).
func (b *browser) addMemory(kind, text string) string {
	b.env.t.Helper()
	r := b.post("/memories", url.Values{"kind": {kind}, "text": {text}})
	wantRedirect(b.env.t, r, "/memories?notice="+url.QueryEscape("Memory saved."))
	page := b.get("/memories")
	wantStatus(b.env.t, page, http.StatusOK)
	ids := memoryIDs(page.body)
	if len(ids) == 0 || !strings.Contains(page.body, html.EscapeString(text)) {
		b.env.t.Fatalf("the saved memory %q is not listed", text)
	}
	return ids[0]
}

func (e *testEnv) memories(username string) []memory.Memory {
	e.t.Helper()
	u, err := e.db.UserByUsername(context.Background(), username)
	if err != nil {
		e.t.Fatal(err)
	}
	ms, err := e.app.Memory.List(context.Background(), u.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	return ms
}

func TestMemoriesPage(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	ann := env.user(admin, "ann")

	r := ann.get("/memories")
	wantStatus(t, r, http.StatusOK)
	for _, want := range []string{`data-testid="nav-memories"`, `data-testid="no-memories"`,
		"Forgetting a memory does not delete the chat where it was said."} {
		if !strings.Contains(r.body, want) {
			t.Errorf("the empty page lacks %s", want)
		}
	}
	if !strings.Contains(admin.get("/settings/account").body, `data-testid="nav-memories"`) {
		t.Error("the admin's nav lacks Memories")
	}

	units := ann.addMemory(memory.KindPreference, "I prefer metric units")
	tea := ann.addMemory(memory.KindFact, "My favourite drink is <green> tea")
	page := ann.get("/memories").body
	if got := memoryIDs(page); len(got) != 2 || got[0] != tea || got[1] != units {
		t.Fatalf("listed %v, want newest first [%s %s]", got, tea, units)
	}
	for _, want := range []string{"My favourite drink is &lt;green&gt; tea", ">preference<", ">fact<", "added by you", "0 times"} {
		if !strings.Contains(page, want) {
			t.Errorf("the list lacks %q", want)
		}
	}

	t.Run("search", func(t *testing.T) {
		r := ann.get("/memories?q=" + url.QueryEscape("metric"))
		wantStatus(t, r, http.StatusOK)
		if got := memoryIDs(r.body); len(got) != 1 || got[0] != units {
			t.Errorf("search for metric found %v, want [%s]", got, units)
		}
		if !strings.Contains(r.body, `data-testid="memory-search-title"`) {
			t.Error("the search shows no title")
		}
	})

	t.Run("edit", func(t *testing.T) {
		r := ann.post("/memories/"+units, url.Values{"text": {"I prefer imperial units"}})
		wantStatus(t, r, http.StatusSeeOther)
		ms := env.memories("ann")
		var got string
		for _, m := range ms {
			if m.ID == units {
				got = m.Text
			}
		}
		if got != "I prefer imperial units" || len(ms) != 2 {
			t.Errorf("after the edit: %q among %d memories", got, len(ms))
		}
		// A refused edit keeps the old text and shows the typed one with the message.
		r = ann.post("/memories/"+units, url.Values{"text": {"my key is sk-proj-abcdefghijklmnop1234"}})
		wantStatus(t, r, http.StatusBadRequest)
		if !strings.Contains(r.body, "secrets are never saved to memory") || !strings.Contains(r.body, "sk-proj-abcdefghijklmnop1234</textarea>") {
			t.Errorf("the refused edit is not shown with its message and text: %.2000s", r.body)
		}
		if m, _ := env.app.Memory.Get(context.Background(), ms[0].OwnerID, units); m.Text != "I prefer imperial units" {
			t.Errorf("a refused edit changed the text to %q", m.Text)
		}
	})

	t.Run("refused secret", func(t *testing.T) {
		before := len(env.memories("ann"))
		secret := "sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAA"
		r := ann.post("/memories", url.Values{"kind": {memory.KindFact}, "text": {"use " + secret + " for claude"}})
		wantStatus(t, r, http.StatusBadRequest)
		if !strings.Contains(r.body, "secrets are never saved to memory") || !strings.Contains(r.body, `data-testid="form-error"`) {
			t.Errorf("no message for a refused secret: %.2000s", r.body)
		}
		if !strings.Contains(r.body, "use "+secret+" for claude</textarea>") {
			t.Error("the add form lost the typed text")
		}
		if n := len(env.memories("ann")); n != before {
			t.Errorf("%d memories after a refused secret, want %d", n, before)
		}
		if bytes.Contains(env.dbFiles(), []byte(secret)) {
			t.Error("the refused secret is in the database file")
		}
		wantStatus(t, ann.post("/memories", url.Values{"kind": {"gossip"}, "text": {"hello there"}}), http.StatusBadRequest)
	})

	t.Run("delete one and selected", func(t *testing.T) {
		a := ann.addMemory(memory.KindOther, "Alpha memory to forget")
		b := ann.addMemory(memory.KindOther, "Bravo memory to forget")
		wantRedirect(t, ann.post("/memories/"+tea+"/delete", nil), "/memories?notice="+url.QueryEscape("Memory forgotten."))
		wantStatus(t, ann.post("/memories/"+tea+"/delete", nil), http.StatusNotFound)
		r := ann.post("/memories/delete", url.Values{"id": {a, b}})
		wantRedirect(t, r, "/memories?notice="+url.QueryEscape("Forgot 2 memories."))
		if got := memoryIDs(ann.get("/memories").body); len(got) != 1 || got[0] != units {
			t.Errorf("left %v, want [%s]", got, units)
		}
		r = ann.post("/memories/delete", nil)
		wantStatus(t, r, http.StatusBadRequest)
		if !strings.Contains(r.body, "Select the memories to forget first.") {
			t.Error("forget-selected with nothing selected says nothing")
		}
	})

	t.Run("forget all", func(t *testing.T) {
		ann.addMemory(memory.KindOther, "Charlie memory to forget")
		r := ann.post("/memories/forget-all", url.Values{"confirm": {"yes"}})
		wantStatus(t, r, http.StatusBadRequest)
		if !strings.Contains(r.body, "nothing was forgotten") || len(env.memories("ann")) != 2 {
			t.Errorf("forget-all without the typed confirmation: %d left, page %.1000s", len(env.memories("ann")), r.body)
		}
		r = ann.post("/memories/forget-all", url.Values{"confirm": {" Forget  everything "}})
		wantRedirect(t, r, "/memories?notice="+url.QueryEscape("Forgot all 2 memories."))
		if n := len(env.memories("ann")); n != 0 {
			t.Errorf("%d memories after forget-all", n)
		}
		if !strings.Contains(ann.get("/memories").body, `data-testid="no-memories"`) {
			t.Error("the page still lists memories")
		}
	})
}

func TestForeignMemoriesAreNotFound(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	ann := env.user(admin, "ann")
	bob := env.user(admin, "bob")
	id := ann.addMemory(memory.KindFact, "Ann keeps her passport in the blue drawer")
	bob.addMemory(memory.KindFact, "Bob likes chess")

	missing := bob.post("/memories/mem_doesnotexist/delete", nil)
	wantStatus(t, missing, http.StatusNotFound)
	checks := []struct {
		name string
		do   func() response
	}{
		{"edit", func() response { return bob.post("/memories/"+id, url.Values{"text": {"pwned"}}) }},
		{"edit with a refused text", func() response {
			return bob.post("/memories/"+id, url.Values{"text": {"my key is sk-proj-abcdefghijklmnop1234"}})
		}},
		{"delete", func() response { return bob.post("/memories/"+id+"/delete", nil) }},
		{"delete selected", func() response { return bob.post("/memories/delete", url.Values{"id": {id}}) }},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			r := c.do()
			wantStatus(t, r, http.StatusNotFound)
			if r.body != missing.body {
				t.Errorf("a foreign memory's 404 differs from a missing one's:\n%s\n---\n%s", r.body, missing.body)
			}
		})
	}
	// A selection mixing bob's own memory with ann's forgets nothing.
	own := env.memories("bob")[0].ID
	wantStatus(t, bob.post("/memories/delete", url.Values{"id": {own, id}}), http.StatusNotFound)
	if len(env.memories("bob")) != 1 {
		t.Error("a refused selection forgot bob's own memory")
	}
	// Bob's list, search and forget-all never reach ann's memories.
	for _, p := range []string{"/memories", "/memories?q=passport", "/memories?q=" + url.QueryEscape("blue drawer")} {
		r := bob.get(p)
		wantStatus(t, r, http.StatusOK)
		if got := memoryIDs(r.body); strings.Contains(r.body, "Ann keeps") || strings.Contains(r.body, id) || len(got) > 1 {
			t.Errorf("%s shows ann's memory: %v", p, got)
		}
	}
	wantStatus(t, bob.post("/memories/forget-all", url.Values{"confirm": {views.ForgetAllWord}}), http.StatusSeeOther)
	ms := env.memories("ann")
	if len(ms) != 1 || ms[0].Text != "Ann keeps her passport in the blue drawer" {
		t.Errorf("ann's memories after bob's attempts: %+v", ms)
	}
}

// dbFiles is every byte of the database, its WAL and its shared-memory file, as
// on disk; a file that does not exist (a truncated WAL) adds nothing.
func (e *testEnv) dbFiles() []byte {
	e.t.Helper()
	var all []byte
	for _, name := range []string{"atrium.db", "atrium.db-wal", "atrium.db-shm"} {
		b, err := os.ReadFile(filepath.Join(e.dir, name))
		if errors.Is(err, fs.ErrNotExist) && name != "atrium.db" {
			continue
		}
		if err != nil {
			e.t.Fatal(err)
		}
		all = append(all, b...)
	}
	return all
}

// scanFor fails if the sentinel or any of its words of 4+ characters is anywhere
// in the database files, in any letter case.
func (e *testEnv) scanFor(when, sentinel string) {
	e.t.Helper()
	raw := e.dbFiles()
	if !bytes.Contains(raw, []byte("admin")) { // the scan must see plaintext where there is some
		e.t.Fatal("the database files do not even hold the admin's username")
	}
	lower := bytes.ToLower(raw)
	needles := []string{sentinel}
	for _, w := range strings.Fields(sentinel) {
		if len([]rune(w)) >= 4 {
			needles = append(needles, w)
		}
	}
	for _, n := range needles {
		if bytes.Contains(raw, []byte(n)) || bytes.Contains(lower, []byte(strings.ToLower(n))) {
			e.t.Errorf("%s: %q is in the database files", when, n)
		}
	}
}

// TestMemoryForgettingIsPhysical saves a sentinel through the page (so no chat
// message holds it), scans every byte of the database files for it and its words,
// finds it through the page, forgets it through the page, and scans again.
func TestMemoryForgettingIsPhysical(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	ann := env.user(admin, "ann")
	const sentinel = "Quorvexian blimtrap zandolier fennimoth glasswick"
	ann.addMemory(memory.KindOther, "Something unrelated about gardening")
	id := ann.addMemory(memory.KindFact, sentinel)
	env.scanFor("after saving", sentinel)

	r := ann.get("/memories?q=" + url.QueryEscape("zandolier"))
	wantStatus(t, r, http.StatusOK)
	if got := memoryIDs(r.body); len(got) != 1 || got[0] != id || !strings.Contains(r.body, sentinel) {
		t.Fatalf("the search found %v, want [%s]", got, id)
	}
	env.scanFor("after searching", sentinel)

	wantStatus(t, ann.post("/memories/"+id+"/delete", nil), http.StatusSeeOther)
	env.scanFor("after forgetting", sentinel)
	r = ann.get("/memories")
	if strings.Contains(r.body, id) || strings.Contains(r.body, "Quorvexian") {
		t.Error("the page still lists the forgotten memory")
	}
	if got := memoryIDs(r.body); len(got) != 1 {
		t.Errorf("the page lists %v, want only the unrelated memory", got)
	}
	if got := memoryIDs(ann.get("/memories?q=zandolier").body); len(got) != 0 {
		t.Errorf("the search still finds %v", got)
	}
}

// TestMemorySettingsAndTemporaryChats: the switches on the Memories page are saved per
// user; "Temporary" makes a chat that is marked as such and stored as temporary.
func TestMemorySettingsAndTemporaryChats(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	page := admin.get("/memories")
	if !strings.Contains(page.body, `checked data-testid="memory-enabled"`) || !strings.Contains(page.body, `checked data-testid="memory-extract"`) {
		t.Fatalf("memory is not on by default:\n%s", page.body)
	}
	r := admin.post("/memories/settings", url.Values{"enabled": {"on"}})
	wantRedirect(t, r, "/memories?notice="+url.QueryEscape("Memory settings saved."))
	u, _ := env.db.UserByUsername(context.Background(), "admin")
	st, err := env.app.Memory.Settings(context.Background(), u.ID)
	if err != nil || !st.Enabled || st.Extract {
		t.Fatalf("settings after saving: %+v %v", st, err)
	}
	bob := env.user(admin, "bob")
	if st, _ := env.app.Memory.Settings(context.Background(), mustUserID(t, env, "bob")); !st.Enabled || !st.Extract {
		t.Errorf("one user's switch changed another's: %+v", st)
	}

	r = bob.post("/sessions", url.Values{"temporary": {"1"}})
	wantStatus(t, r, http.StatusSeeOther)
	id, _ := strings.CutPrefix(r.Header.Get("Location"), "/s/")
	ss, err := env.db.SessionForOwner(context.Background(), id, mustUserID(t, env, "bob"))
	if err != nil || !ss.Temporary {
		t.Fatalf("temporary chat stored as %+v %v", ss, err)
	}
	if chat := bob.get("/s/" + id); !strings.Contains(chat.body, `data-testid="temporary-badge"`) {
		t.Error("a temporary chat is not marked as such")
	}
	if plain := bob.newSession(); strings.Contains(bob.get("/s/"+plain).body, `data-testid="temporary-badge"`) {
		t.Error("an ordinary chat is marked temporary")
	}
}

func mustUserID(t *testing.T, env *testEnv, name string) int64 {
	t.Helper()
	u, err := env.db.UserByUsername(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return u.ID
}
