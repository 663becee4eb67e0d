package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"atrium/internal/llm/llmtest"
	"atrium/internal/store"
)

// postFile sends a multipart import with this browser's CSRF token.
func (b *browser) postFile(path, field, content string) response {
	b.env.t.Helper()
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	w.WriteField("_csrf", b.token())
	f, _ := w.CreateFormFile(field, "chats.json")
	f.Write([]byte(content))
	w.Close()
	req, _ := http.NewRequest(http.MethodPost, b.env.ts.URL+path, &body)
	req.Header.Set("Content-Type", w.FormDataContentType())
	return b.do(req)
}

// A chat with a tool call exports as JSON and Markdown; the JSON of all chats imports
// into another account as equal chats (roles, tool calls and results, errors, times),
// and a second export of them is the same document.
func TestChatsExportImportRoundTrip(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "fake-model", "")
	env.llm.Enqueue(
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{Name: "calculator", Arguments: `{"expression":"6*7"}`}}},
		llmtest.Reply{Text: []string{"It is **42**. ```"}},
	)
	id := admin.newSession()
	ws := admin.dial(id)
	ws.send("what is 6*7? <b>bold</b>")
	ws.until("It is")
	ws.until(`data-state="idle"`)
	if r := admin.post("/s/"+id+"/instructions", url.Values{"system_prompt": {"Be exact."}}); r.StatusCode != http.StatusOK {
		t.Fatalf("instructions: %d", r.StatusCode)
	}

	md := admin.get("/s/" + id + "/export?format=md")
	wantStatus(t, md, http.StatusOK)
	for _, want := range []string{"## You · ", "what is 6*7? <b>bold</b>", "Tool call `calculator`", `{"expression":"6*7"}`, "Tool result:", "It is **42**."} {
		if !strings.Contains(md.body, want) {
			t.Errorf("markdown export lacks %q:\n%s", want, md.body)
		}
	}
	if cd := md.Header.Get("Content-Disposition"); !strings.Contains(cd, "attachment") {
		t.Errorf("markdown export is not a download: %q", cd)
	}

	all := admin.get("/sessions/export")
	wantStatus(t, all, http.StatusOK)
	var doc struct {
		Chats []struct {
			SystemPrompt string `json:"system_prompt"`
			Messages     []struct {
				Role, Content, ToolCallID string
				ToolCalls                 []struct{ ID, Name, Arguments string } `json:"tool_calls"`
			} `json:"messages"`
		} `json:"chats"`
	}
	if err := json.Unmarshal([]byte(all.body), &doc); err != nil || len(doc.Chats) != 1 {
		t.Fatalf("export %v: %.500s", err, all.body)
	}
	roles := []string{}
	for _, m := range doc.Chats[0].Messages {
		roles = append(roles, m.Role)
	}
	if got := strings.Join(roles, " "); got != "user assistant tool assistant" || doc.Chats[0].SystemPrompt != "Be exact." {
		t.Fatalf("exported roles %q, instructions %q", got, doc.Chats[0].SystemPrompt)
	}

	bob := env.user(admin, "bob")
	wantStatus(t, bob.postFile("/sessions/import", "file", all.body), http.StatusSeeOther)
	again := bob.get("/sessions/export")
	if a, b := stripTimes(all.body), stripTimes(again.body); a != b {
		t.Errorf("re-export differs from the import:\n%s\n---\n%s", a, b)
	}
	u, _ := env.db.UserByUsername(context.Background(), "bob")
	ss, _ := env.db.OwnerSessions(context.Background(), u.ID)
	if len(ss) != 1 {
		t.Fatalf("bob has %d chats after the import", len(ss))
	}
	msgs, _ := env.db.MessagesAfter(context.Background(), ss[0].ID, 0)
	if len(msgs) != 4 || msgs[2].CallKey == "" || msgs[2].CallKey != store.ToolCallKey(msgs[1].ID, 0) {
		t.Errorf("the imported tool result is not keyed to its imported call: %+v", msgs)
	}
	if page := bob.get("/s/" + ss[0].ID); !strings.Contains(page.body, "what is 6*7? &lt;b&gt;bold&lt;/b&gt;") || !strings.Contains(page.body, "calculator") {
		t.Error("the imported chat does not show its messages and tool card")
	}
	// Only its owner exports a chat.
	if r := bob.get("/s/" + id + "/export"); r.StatusCode != http.StatusNotFound {
		t.Errorf("bob exported the admin's chat: %d", r.StatusCode)
	}
}

// stripTimes drops the created_at fields, which an import keeps but a new clock may
// format the same anyway; what matters is everything else.
func stripTimes(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.Contains(l, `"created_at"`) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// A bad import names the place and stores nothing, not even its good chats.
func TestChatsImportRefusesBadFiles(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	good := `{"title":"ok","messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct{ name, body, want string }{
		{"empty", "", "empty"},
		{"not JSON", `{"format": "atrium.chats", "version": 1, "chats": [` + "\n" + `{"title": }]}`, "line 2"},
		{"wrong format", `{"format":"other","version":1,"chats":[` + good + `]}`, "not an Atrium chats export"},
		{"newer version", `{"format":"atrium.chats","version":2,"chats":[` + good + `]}`, "version 2"},
		{"bad role", `{"format":"atrium.chats","version":1,"chats":[` + good + `,{"messages":[{"role":"system","content":"x"}]}]}`, "chat 2, message 1"},
		{"orphan tool result", `{"format":"atrium.chats","version":1,"chats":[{"messages":[{"role":"tool","tool_call_id":"c9","content":"x"}]}]}`, "tool result must follow"},
		{"no tool name", `{"format":"atrium.chats","version":1,"chats":[{"messages":[{"role":"assistant","tool_calls":[{"id":"a","name":"","arguments":"{}"}]}]}]}`, "tool call 1"},
		{"huge message", `{"format":"atrium.chats","version":1,"chats":[{"messages":[{"role":"user","content":"` + strings.Repeat("x", env.srv.Config.MaxPromptBytes()+1) + `"}]}]}`, "chat 1, message 1: the content or reasoning is larger than"},
		{"bad time", `{"format":"atrium.chats","version":1,"chats":[{"created_at":"yesterday","messages":[]}]}`, "RFC 3339"},
		{"bad task", `{"format":"atrium.chats","version":1,"chats":[{"task":[1,2],"messages":[]}]}`, "task"},
		{"wrong type", `{"format":"atrium.chats","version":1,"chats":[{"messages":"many"}]}`, "line 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := admin.postFile("/sessions/import", "file", tc.body)
			if r.StatusCode < 400 || !strings.Contains(r.body, tc.want) || !strings.Contains(r.body, "Nothing was imported.") {
				t.Errorf("status %d, want an error naming %q: %.600s", r.StatusCode, tc.want, between(r.body, `data-testid="form-error">`, "</p>"))
			}
		})
	}
	u, _ := env.db.UserByUsername(context.Background(), "admin")
	if ss, _ := env.db.OwnerSessions(context.Background(), u.ID); len(ss) != 0 {
		t.Errorf("%d chats stored by refused imports", len(ss))
	}
}

func between(s, from, to string) string {
	_, after, ok := strings.Cut(s, from)
	if !ok {
		return s
	}
	in, _, _ := strings.Cut(after, to)
	return in
}

// A model that wrote broken JSON arguments got an invalid_arguments result; the chat
// holding that call exports, and its export imports, arguments as they were written.
func TestChatsImportKeepsBrokenArguments(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "fake-model", "")
	env.llm.Enqueue(
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{Name: "calculator", Arguments: `{"expression":"6*7"`}}},
		llmtest.Reply{Text: []string{"Sorry, let me not."}},
	)
	id := admin.newSession()
	ws := admin.dial(id)
	ws.send("what is 6*7?")
	ws.until("let me not")
	ws.until(`data-state="idle"`)
	all := admin.get("/sessions/export")
	wantStatus(t, all, http.StatusOK)
	if !strings.Contains(all.body, `{\"expression\":\"6*7\"`) {
		t.Fatalf("the export lacks the broken arguments:\n%.2000s", all.body)
	}
	r := admin.postFile("/sessions/import", "file", all.body)
	if r.StatusCode != http.StatusSeeOther && r.StatusCode != http.StatusOK {
		t.Fatalf("import of the chat's own export: %d %s", r.StatusCode, between(r.body, `data-testid="form-error">`, "</p>"))
	}
	u, _ := env.db.UserByUsername(context.Background(), "admin")
	if ss, _ := env.db.OwnerSessions(context.Background(), u.ID); len(ss) != 2 {
		t.Errorf("%d chats after the import, want 2", len(ss))
	}
}

// The export of all chats is written a chat at a time: with none, one or several chats
// it is one valid JSON document that lists each.
func TestChatsExportAllIsOneDocument(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	count := func() int {
		t.Helper()
		r := admin.get("/sessions/export")
		wantStatus(t, r, http.StatusOK)
		var doc chatsDoc
		if err := json.Unmarshal([]byte(r.body), &doc); err != nil || doc.Format != "atrium.chats" || doc.Version != 1 {
			t.Fatalf("export: %v %.300s", err, r.body)
		}
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") || !strings.Contains(r.Header.Get("Content-Disposition"), "attachment") {
			t.Errorf("export headers: %q, %q", ct, r.Header.Get("Content-Disposition"))
		}
		return len(doc.Chats)
	}
	if n := count(); n != 0 {
		t.Errorf("%d chats exported, want 0", n)
	}
	for range 3 {
		admin.newSession()
	}
	if n := count(); n != 3 {
		t.Errorf("%d chats exported, want 3", n)
	}
}

type chatsDoc struct {
	Format  string            `json:"format"`
	Version int               `json:"version"`
	Chats   []json.RawMessage `json:"chats"`
}
