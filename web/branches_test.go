package web_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"atrium/internal/llm/llmtest"
	"atrium/internal/store"
)

// branchFrame writes an edit, regenerate or version frame as the page's forms send it.
func (c *wsConn) branchFrame(kind, id, text string) {
	c.t.Helper()
	b, _ := json.Marshal(map[string]any{"type": kind, "id": id, "text": text, "HEADERS": map[string]string{"HX-Request": "true"}})
	c.write(websocket.TextMessage, string(b))
}

func versionLabel(s string) string { return `data-testid="version-label">` + s + `</span>` }

// Edit, regenerate and flip over the websocket: every tab of the chat re-renders the
// branch, the new reply streams into it, and a reload shows the branch last chosen.
func TestWebsocketEditRegenerateAndFlip(t *testing.T) {
	env, admin, id := chatEnv(t)
	a, b := admin.dial(id), admin.dial(id)
	env.llm.Enqueue(llmtest.Reply{Text: []string{"Answer one."}})
	a.send("Question one")
	a.until(finalMarker)
	b.until(finalMarker)
	msgs := env.messages(id)
	q1, r1 := msgs[0], msgs[1]
	a.until(`class="run-link"`) // the run is recorded
	meterFirst := contextMeter(t, admin.get("/s/"+id).body)
	// The task set now belongs to this branch.
	wantStatus(t, admin.post("/s/"+id+"/task", url.Values{"goal": {"Name the cat"}, "stage": {"asking"}}), http.StatusOK)
	a.until("Name the cat")
	b.until("Name the cat")

	// Edit: both tabs get the chat again with the new version (2/2) and a live reply.
	env.llm.Enqueue(llmtest.Reply{Text: []string{"Answer two."}})
	long := "Question two, " + strings.Repeat("with many more words, ", 60)
	a.branchFrame("edit", itoa(q1.ID), long)
	for name, tab := range map[string]*wsConn{"a": a, "b": b} {
		frames := strings.Join(tab.until(finalMarker), "\n")
		snap := strings.Index(frames, `id="messages"`)
		if snap < 0 || !strings.Contains(frames[snap:], "Question two") || strings.Contains(frames[snap:strings.Index(frames, finalMarker)], "Question one") ||
			!strings.Contains(frames, versionLabel("2/2")) || !strings.Contains(frames, `id="msg-live"`) {
			t.Fatalf("tab %s after the edit:\n%.3000s", name, frames)
		}
		if !strings.Contains(frames, "Answer two.") {
			t.Fatalf("tab %s did not get the new reply", name)
		}
		if !strings.Contains(frames, `data-testid="task-empty"`) {
			t.Fatalf("tab %s still shows the other branch's task", name)
		}
	}
	msgs = env.messages(id)
	if len(msgs) != 2 || msgs[0].Content != long || msgs[1].Content != "Answer two." {
		t.Fatalf("on screen after the edit: %+v", msgs)
	}
	a.until(`class="run-link"`)
	if m := contextMeter(t, admin.get("/s/"+id).body); m == meterFirst {
		t.Fatalf("the context meter did not change with the longer question: %s", m)
	}

	// Regenerate: the new reply's final frame carries its pager, 2/2.
	env.llm.Enqueue(llmtest.Reply{Text: []string{"Answer two, again."}})
	a.branchFrame("regenerate", itoa(msgs[1].ID), "")
	frames := a.until(finalMarker)
	if last := frames[len(frames)-1]; !strings.Contains(last, "Answer two, again.") || !strings.Contains(last, versionLabel("2/2")) {
		t.Fatalf("final frame of the regenerated reply: %.2000s", last)
	}
	b.until(finalMarker)
	if req := env.llm.LastRequest().Chat; req.LastUser() != long || strings.Contains(string(env.llm.LastRequest().Body), "Answer two.") {
		t.Fatalf("the regenerate request carried the old reply: %s", env.llm.LastRequest().Body)
	}

	// Flip the user message back to 1/2: both tabs show the first question and answer.
	a.branchFrame("version", itoa(q1.ID), "")

	for name, tab := range map[string]*wsConn{"a": a, "b": b} {
		f := strings.Join(tab.until(`id="messages"`), "\n")
		if !strings.Contains(f, "Question one") || !strings.Contains(f, "Answer one.") || strings.Contains(f, "Question two") ||
			!strings.Contains(f, versionLabel("1/2")) || !strings.Contains(f, "Name the cat") {
			t.Fatalf("tab %s after the flip:\n%.3000s", name, f)
		}
	}
	page := admin.get("/s/" + id)
	if !strings.Contains(page.body, "Question one") || strings.Contains(page.body, "Question two") || !strings.Contains(page.body, versionLabel("1/2")) {
		t.Fatalf("a reload does not show the chosen branch")
	}
	if msgs := env.messages(id); len(msgs) != 2 || msgs[0].ID != q1.ID || msgs[1].ID != r1.ID {
		t.Fatalf("on screen after the flip: %+v", msgs)
	}
	// The context meter shows the context of the reply on screen, not of the newest run.
	if m := contextMeter(t, page.body); m != meterFirst {
		t.Fatalf("context meter after the flip:\n%s\nwant the first turn's:\n%s", m, meterFirst)
	}
}

// contextMeter is the context meter's rows in a chat page.
func contextMeter(t *testing.T, body string) string {
	t.Helper()
	i := strings.Index(body, `id="context-meter"`)
	j := strings.Index(body[max(i, 0):], "</ul>")
	if i < 0 || j < 0 {
		t.Fatalf("no context meter in the page")
	}
	return body[i : i+j]
}

// Another user's message, a message of another chat, a wrong kind of message or a bad
// id: a notice to the sender, nothing written, no other tab disturbed.
func TestWebsocketBranchRefusals(t *testing.T) {
	env, admin, id := chatEnv(t)
	bob := env.user(admin, "bob")
	bobChat := bob.newSession()
	ws := admin.dial(id)
	env.llm.Enqueue(llmtest.Reply{Text: []string{"Hi."}})
	ws.send("Hello")
	ws.until(finalMarker)
	ws.until(`class="run-link"`) // the run's last frame
	msgs := env.messages(id)
	bobMsg := &store.Message{SessionID: bobChat, Role: store.RoleUser, Content: "bob's secret"}
	if err := env.db.AppendMessage(t.Context(), bobMsg); err != nil {
		t.Fatal(err)
	}
	other := admin.newSession()
	otherMsg := &store.Message{SessionID: other, Role: store.RoleUser, Content: "other chat"}
	if err := env.db.AppendMessage(t.Context(), otherMsg); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, kind, id, text, notice string
	}{
		{"edit another user's message", "edit", itoa(bobMsg.ID), "x", "Message not found."},
		{"regenerate another user's message", "regenerate", itoa(bobMsg.ID), "", "Message not found."},
		{"flip to another user's message", "version", itoa(bobMsg.ID), "", "Message not found."},
		{"edit a message of another chat", "edit", itoa(otherMsg.ID), "x", "Message not found."},
		{"id that is not a number", "regenerate", "12; DROP TABLE messages", "", "Message not found."},
		{"edit a reply", "edit", itoa(msgs[1].ID), "x", "Only your own messages can be edited."},
		{"regenerate a user message", "regenerate", itoa(msgs[0].ID), "", "Only a reply can be regenerated."},
		{"empty edit", "edit", itoa(msgs[0].ID), " ", "empty"},
		{"oversized edit", "edit", itoa(msgs[0].ID), strings.Repeat("x", 100*1024+1), "too long"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ws.branchFrame(tc.kind, tc.id, tc.text)
			f := ws.next()
			if !strings.Contains(f, noticeID) || !strings.Contains(f, tc.notice) || strings.Contains(f, "secret") {
				t.Fatalf("frame %.300s, want a notice saying %q", f, tc.notice)
			}
		})
	}
	if got := env.messages(id); len(got) != 2 || got[0].ID != msgs[0].ID || got[1].ID != msgs[1].ID {
		t.Fatalf("refusals changed the chat: %d messages, the last %.200s", len(got), got[len(got)-1].Content)
	}
	if got := env.messages(bobChat); len(got) != 1 || got[0].Content != "bob's secret" {
		t.Fatalf("bob's chat changed: %+v", got)
	}
	// Bob cannot reach the admin's chat at all.
	conn, resp, err := bob.dialOrigin(id, env.ts.URL)
	if err == nil {
		conn.Close()
		t.Fatal("bob opened the admin's chat websocket")
	}
	if resp == nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("handshake: %v, want 404", err)
	}
}
