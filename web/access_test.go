package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"atrium/internal/llm/llmtest"
	"atrium/internal/store"
)

// closeBound is how soon a socket must close after its login ended in this process.
const closeBound = 2 * time.Second

// waitClosed reads frames until the server closes the socket and returns how long
// after start that was and the frames read on the way; it fails past start+bound.
func (c *wsConn) waitClosed(start time.Time, bound time.Duration) (time.Duration, []string) {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(start.Add(bound))
	var frames []string
	for {
		_, data, err := c.conn.ReadMessage()
		if err != nil {
			if ne, ok := err.(interface{ Timeout() bool }); ok && ne.Timeout() {
				c.t.Fatalf("the socket is still open %v after its login ended", bound)
			}
			return time.Since(start), frames
		}
		frames = append(frames, string(data))
	}
}

// stillOpen checks that c still works: a message sent on it is answered.
func (c *wsConn) stillOpen(env *testEnv, text string) {
	c.t.Helper()
	env.llm.Enqueue(llmtest.Reply{Text: []string{"Still ", "here."}})
	c.send(text)
	frames := c.until(finalMarker)
	if last := frames[len(frames)-1]; !strings.Contains(last, "Still here.") {
		c.t.Fatalf("final frame %.300s", last)
	}
}

// mcpSettingsSocket opens Settings → MCP's live socket and reads its first frame.
func (b *browser) mcpSettingsSocket() *wsConn {
	b.env.t.Helper()
	d := websocket.Dialer{Jar: b.jar, HandshakeTimeout: 5 * time.Second}
	conn, resp, err := d.Dial("ws"+strings.TrimPrefix(b.env.ts.URL, "http")+"/settings/mcp/ws", http.Header{"Origin": {b.env.ts.URL}})
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		b.env.t.Fatalf("dial the MCP settings socket: %v (status %d)", err, status)
	}
	b.env.t.Cleanup(func() { conn.Close() })
	c := &wsConn{t: b.env.t, conn: conn}
	if first := c.next(); !strings.Contains(first, `id="mcp-indicator"`) {
		b.env.t.Fatalf("first frame is not the MCP snapshot: %.300s", first)
	}
	return c
}

// TestEndingALoginClosesItsSockets: bob has two tabs in one browser (a) and one in
// another (b). Logging out of a closes a's sockets only; a password reset or a disable
// closes all of them. A send written right after the login ended stores nothing.
func TestEndingALoginClosesItsSockets(t *testing.T) {
	tests := []struct {
		name     string
		end      func(env *testEnv, admin, a *browser, bob int64)
		bothEnd  bool // b's login ends too
		wantNote bool // the chat is told why
	}{
		{"logout", func(env *testEnv, _, a *browser, _ int64) {
			wantStatus(env.t, a.post("/logout", nil), http.StatusSeeOther)
		}, false, true},
		{"password reset", func(env *testEnv, admin, _ *browser, bob int64) {
			wantStatus(env.t, admin.post("/settings/users/"+itoa(bob)+"/reset", url.Values{"password": {"a brand new password"}}), http.StatusSeeOther)
		}, true, true},
		{"disable", func(env *testEnv, admin, _ *browser, bob int64) {
			wantStatus(env.t, admin.post("/settings/users/"+itoa(bob)+"/disable", nil), http.StatusSeeOther)
		}, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestEnv(t)
			admin := env.setup()
			admin.addProvider("Fake", env.llm.URL(), "fake-model", "")
			a := env.user(admin, "bob")
			b := env.login("bob", testPassword)
			bob := env.userID("bob")
			id := a.newSession()
			a1, a2, b1 := a.dial(id), a.dial(id), b.dial(id)

			start := time.Now()
			tt.end(env, admin, a, bob)
			// Written at once, racing the close: it must not be stored.
			_ = a1.conn.WriteMessage(websocket.TextMessage, []byte(`{"type":"send","text":"after the end"}`))

			for name, ws := range map[string]*wsConn{"tab a1": a1, "tab a2": a2} {
				took, frames := ws.waitClosed(start, closeBound)
				t.Logf("%s closed %v after the %s", name, took, tt.name)
				if tt.wantNote && !strings.Contains(strings.Join(frames, ""), "Your login has ended") {
					t.Errorf("%s was not told why it closed: %q", name, frames)
				}
			}
			if tt.bothEnd {
				b1.waitClosed(start, closeBound)
			} else {
				b1.stillOpen(env, "browser b is still logged in")
			}
			time.Sleep(100 * time.Millisecond) // a send that got through would be stored by now
			for _, m := range env.messages(id) {
				if m.Content == "after the end" {
					t.Fatalf("a send on an ended login was stored: %+v", m)
				}
			}
			// The ended login cannot open a socket again.
			if _, resp, err := a.dialOrigin(id, env.ts.URL); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("an ended login reconnected: %v", err)
			}
		})
	}
}

// TestSendRechecksTheLogin: a login ended where this process cannot see it (another
// process on the same database, here the store directly) stores nothing when its open
// socket sends, and the socket closes.
func TestSendRechecksTheLogin(t *testing.T) {
	tests := []struct {
		name string
		end  func(ctx context.Context, db *store.DB, bob int64) error
	}{
		{"disabled", func(ctx context.Context, db *store.DB, bob int64) error { return db.SetUserDisabled(ctx, bob, true) }},
		{"logins deleted", func(ctx context.Context, db *store.DB, bob int64) error {
			_, err := db.DeleteUserLogins(ctx, bob)
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newTestEnv(t)
			admin := env.setup()
			admin.addProvider("Fake", env.llm.URL(), "fake-model", "")
			bobB := env.user(admin, "bob")
			id := bobB.newSession()
			ws := bobB.dial(id)
			if err := tt.end(context.Background(), env.db, env.userID("bob")); err != nil {
				t.Fatal(err)
			}
			env.llm.Enqueue(llmtest.Reply{Text: []string{"should never be written"}})
			ws.send("sent after the login ended")
			time.Sleep(300 * time.Millisecond) // a send that got through would be stored by now
			if msgs := env.messages(id); len(msgs) != 0 {
				t.Errorf("stored %d messages on an ended login: %+v", len(msgs), msgs)
			}
			if n := len(env.llm.Requests()); n != 0 {
				t.Errorf("the model was called %d times", n)
			}
			_, frames := ws.waitClosed(time.Now(), closeBound)
			if !strings.Contains(strings.Join(frames, ""), "Your login has ended") {
				t.Errorf("frames %q, want the login-ended notice", frames)
			}
		})
	}
}

// TestDemotionClosesAdminSockets: demoting an admin closes their Settings → MCP socket
// (it would go on receiving server cards) but not their chats. A demotion made by
// another process is caught by the periodic re-check.
func TestDemotionClosesAdminSockets(t *testing.T) {
	env := newTestEnv(t)
	env.srv.SetLoginRecheck(50 * time.Millisecond)
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "fake-model", "")
	for _, name := range []string{"carol", "dave"} {
		wantStatus(t, admin.post("/settings/users", url.Values{"username": {name}, "password": {testPassword}, "role": {store.RoleAdmin}}), http.StatusSeeOther)
	}
	carol, dave := env.login("carol", testPassword), env.login("dave", testPassword)

	// Through the users page.
	{
		id := carol.newSession()
		settings, chat := carol.mcpSettingsSocket(), carol.dial(id)
		keep := admin.mcpSettingsSocket()
		start := time.Now()
		wantStatus(t, admin.post("/settings/users/"+itoa(env.userID("carol"))+"/role", url.Values{"role": {store.RoleUser}}), http.StatusSeeOther)
		took, _ := settings.waitClosed(start, closeBound)
		t.Logf("the demoted admin's MCP socket closed after %v", took)
		chat.stillOpen(env, "still a user")
		// Another admin's socket still gets the cards.
		wantStatus(t, admin.post("/settings/mcp", url.Values{"name": {"remote"}, "transport": {"http"}, "url": {"http://127.0.0.1:1/mcp"}}), http.StatusSeeOther)
		keep.until(`id="mcp-server-remote"`)
	}

	// By another process.
	{
		id := dave.newSession()
		settings, chat := dave.mcpSettingsSocket(), dave.dial(id)
		start := time.Now()
		if err := env.db.SetUserRole(context.Background(), env.userID("dave"), store.RoleUser); err != nil {
			t.Fatal(err)
		}
		took, _ := settings.waitClosed(start, closeBound)
		t.Logf("the MCP socket of an admin demoted elsewhere closed after %v (re-check every 50ms)", took)
		chat.stillOpen(env, "still a user too")
	}
}
