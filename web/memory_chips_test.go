package web_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"atrium/internal/llm/llmtest"
	"atrium/internal/memory"
)

var undoRE = regexp.MustCompile(`hx-post="(/s/[^"]+/memories/(mem_[a-z0-9]+)/undo)"`)

// htmxPost posts like htmx does: the CSRF token in a header, HX-Request set.
func (b *browser) htmxPost(path string) response {
	b.env.t.Helper()
	return b.postRaw(path, url.Values{}, http.Header{"Hx-Request": {"true"}, "X-Csrf-Token": {b.token()}})
}

// TestUndoSavedMemory: the reply to "remember …" carries a "Saved to memory" chip with
// Undo, rendered again from stored data after a reload; Undo forgets exactly that
// memory, tells every tab, is harmless a second time, keeps an edited memory, and is a
// 404 for another user (HTTP and websocket).
func TestUndoSavedMemory(t *testing.T) {
	env, admin, id := chatEnv(t)
	bob := env.user(admin, "bob")
	bobChat := bob.newSession()
	env.llm.SetHandler(func(llmtest.ChatRequest) llmtest.Reply { return llmtest.Reply{Text: []string{"Noted."}} })
	ws := admin.dial(id)
	other := admin.dial(id) // a second tab

	ws.send("Please remember that I prefer metric units")
	final := strings.Join(ws.until(finalMarker), "\n")
	if !strings.Contains(final, `data-testid="saved-chip"`) || !strings.Contains(final, `data-testid="undo-save"`) {
		t.Fatalf("the reply has no Undo chip:\n%s", final)
	}
	other.until(finalMarker)
	page := admin.get("/s/" + id)
	m := undoRE.FindStringSubmatch(page.body)
	if m == nil {
		t.Fatalf("after a reload the chat has no Undo:\n%s", page.body)
	}
	undoPath, memID := m[1], m[2]
	if ms := env.memories("admin"); len(ms) != 1 || ms[0].ID != memID {
		t.Fatalf("memories %+v, chip for %s", ms, memID)
	}

	// Bob: the admin's chat, or his own chat naming the admin's memory: 404.
	wantStatus(t, bob.htmxPost(undoPath), http.StatusNotFound)
	wantStatus(t, bob.htmxPost("/s/"+bobChat+"/memories/"+memID+"/undo"), http.StatusNotFound)
	bws := bob.dial(bobChat)
	bws.write(1, `{"type":"undo","memory":"`+memID+`"}`)
	if f := bws.until(noticeID); !strings.Contains(f[len(f)-1], "Not found") {
		t.Errorf("bob's websocket undo: %s", f[len(f)-1])
	}
	if len(env.memories("admin")) != 1 {
		t.Fatal("bob's undo removed the admin's memory")
	}

	r := admin.htmxPost(undoPath)
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(r.body, `data-state="undone"`) || strings.Contains(r.body, "undo-save") {
		t.Errorf("undo answered %s", r.body)
	}
	if ms := env.memories("admin"); len(ms) != 0 {
		t.Errorf("after Undo: %+v", ms)
	}
	if f := other.until(`id="saved-` + memID + `"`); !strings.Contains(f[len(f)-1], `data-state="undone"`) {
		t.Errorf("the other tab got %s", f[len(f)-1])
	}
	again := admin.htmxPost(undoPath)
	wantStatus(t, again, http.StatusOK)
	if !strings.Contains(again.body, `data-state="gone"`) {
		t.Errorf("a second Undo answered %s", again.body)
	}
	if page := admin.get("/s/" + id).body; strings.Contains(page, "undo-save") || !strings.Contains(page, `data-state="gone"`) {
		t.Error("after Undo and a reload the chip still offers Undo")
	}

	// Edited since: Undo keeps it and says so (over the websocket too).
	ws.send("remember that my bike is green")
	ws.until(finalMarker)
	m = undoRE.FindStringSubmatch(admin.get("/s/" + id).body)
	if m == nil {
		t.Fatal("no Undo for the second save")
	}
	env.clock.advance(time.Second) // updated_at must differ from created_at
	wantStatus(t, admin.post("/memories/"+m[2], url.Values{"text": {"My bike is dark green"}}), http.StatusSeeOther)
	ws.write(1, `{"type":"undo","memory":"`+m[2]+`"}`)
	if f := ws.until(`id="saved-` + m[2] + `"`); !strings.Contains(f[len(f)-1], `data-state="edited"`) {
		t.Errorf("undo of an edited memory: %s", f[len(f)-1])
	}
	if ms := env.memories("admin"); len(ms) != 1 || ms[0].Text != "My bike is dark green" {
		t.Errorf("the edited memory after Undo: %+v", ms)
	}
}

// TestMemorySuggestions: suggestions show on their reply (after a reload too) and on the
// Memories page; Accept saves (from the chat or the page), Reject saves nothing, another
// user gets 404 (HTTP and websocket); the third switch is saved.
func TestMemorySuggestions(t *testing.T) {
	env, admin, id := chatEnv(t)
	bob := env.user(admin, "bob")
	ctx := context.Background()
	env.llm.Enqueue(llmtest.Reply{Text: []string{"Nice."}})
	ws := admin.dial(id)
	ws.send("I paddle a red kayak on weekends.")
	ws.until(finalMarker)
	msgs := env.messages(id)
	u, err := env.db.UserByUsername(ctx, "admin")
	if err != nil {
		t.Fatal(err)
	}
	src := memory.Source{Kind: memory.SourceChat, SessionID: id, MessageSeq: &msgs[0].Seq}
	suggest := func(text string) memory.Suggestion {
		sg, err := env.app.Memory.Suggest(ctx, u.ID, memory.OpAdd, memory.KindFact, "", text, src, &msgs[1].Seq)
		if err != nil {
			t.Fatal(err)
		}
		return sg
	}
	kayak, canoe := suggest("I paddle a red kayak"), suggest("I paddle on weekends")

	page := admin.get("/s/" + id).body
	if strings.Count(page, `data-testid="suggestion-chip"`) != 2 || !strings.Contains(page, "I paddle a red kayak") {
		t.Fatalf("the reply does not show the suggestions:\n%s", page)
	}
	mem := admin.get("/memories").body
	if strings.Count(mem, `data-testid="memory-suggestion"`) != 2 {
		t.Fatalf("the Memories page does not list the suggestions:\n%s", mem)
	}

	accept := "/memories/suggestions/" + kayak.ID + "/accept"
	wantStatus(t, bob.htmxPost(accept), http.StatusNotFound)
	wantStatus(t, bob.post("/memories/suggestions/"+canoe.ID+"/reject", nil), http.StatusNotFound)
	bws := bob.dial(bob.newSession())
	bws.write(1, `{"type":"accept","suggestion":"`+kayak.ID+`"}`)
	if f := bws.until(noticeID); !strings.Contains(f[len(f)-1], "Not found") {
		t.Errorf("bob's websocket accept: %s", f[len(f)-1])
	}
	if len(env.memories("admin")) != 0 {
		t.Fatal("bob's requests saved something")
	}

	r := admin.htmxPost(accept)
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(r.body, "Saved to memory.") {
		t.Errorf("accept answered %s", r.body)
	}
	if f := ws.until(`id="suggestion-` + kayak.ID + `"`); !strings.Contains(f[len(f)-1], "Saved to memory.") {
		t.Errorf("the chat tab got %s", f[len(f)-1])
	}
	ms := env.memories("admin")
	if len(ms) != 1 || ms[0].Text != "I paddle a red kayak" || ms[0].Source.SessionID != id {
		t.Fatalf("after accept: %+v", ms)
	}
	wantStatus(t, admin.htmxPost(accept), http.StatusNotFound) // handled already

	wantRedirect(t, admin.post("/memories/suggestions/"+canoe.ID+"/reject", nil), "/memories?notice="+url.QueryEscape("Not saved."))
	if len(env.memories("admin")) != 1 {
		t.Error("reject saved something")
	}
	if page := admin.get("/s/" + id).body; strings.Contains(page, "suggestion-chip") {
		t.Error("handled suggestions still show on the reply")
	}

	wantRedirect(t, admin.post("/memories/settings", url.Values{"enabled": {"on"}, "extract": {"on"}, "ask": {"on"}}),
		"/memories?notice="+url.QueryEscape("Memory settings saved."))
	if st, _ := env.app.Memory.Settings(ctx, u.ID); !st.Ask || !st.Enabled || !st.Extract {
		t.Errorf("settings %+v", st)
	}
	if !strings.Contains(admin.get("/memories").body, `name="ask" checked`) {
		t.Error("the ask-before-saving switch is not shown on")
	}
}
