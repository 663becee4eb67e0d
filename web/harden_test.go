package web_test

// Tests for issue 9's request limits, CSRF binding, trusted proxies and small fixes.
// They speak HTTP only, so each also runs against the code before the fix.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"atrium/internal/app"
	"atrium/internal/config"
	"atrium/internal/llm/llmtest"
	"atrium/web"
)

func TestBodyLimits(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	big := strings.Repeat("x", 100<<10)

	t.Run("login with a declared length over the limit", func(t *testing.T) {
		b := env.browser()
		r := b.post("/login", url.Values{"username": {"admin"}, "password": {big}})
		wantStatus(t, r, http.StatusRequestEntityTooLarge)
		if !strings.Contains(r.body, "too large: at most 8 KiB") {
			t.Errorf("413 without the limit: %.300s", r.body)
		}
	})
	t.Run("chunked body over the limit", func(t *testing.T) {
		b := env.browser()
		form := url.Values{"_csrf": {b.token()}, "username": {"admin"}, "password": {big}}
		// io.MultiReader hides the length, so the client sends it chunked.
		req, _ := http.NewRequest(http.MethodPost, env.ts.URL+"/login", io.MultiReader(strings.NewReader(form.Encode())))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r := b.do(req)
		if r.Request.ContentLength != -1 && r.Request.ContentLength != 0 {
			t.Fatalf("the request was not chunked (length %d)", r.Request.ContentLength)
		}
		wantStatus(t, r, http.StatusRequestEntityTooLarge)
	})
	t.Run("anonymous multipart is not parsed", func(t *testing.T) {
		b := env.browser()
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		_ = mw.WriteField("_csrf", b.token())
		_ = mw.WriteField("username", "admin")
		_ = mw.WriteField("password", testPassword)
		fw, _ := mw.CreateFormFile("f", "f.bin")
		_, _ = fw.Write([]byte("small file"))
		mw.Close()
		req, _ := http.NewRequest(http.MethodPost, env.ts.URL+"/login", &body)
		req.Header.Set("Content-Type", mw.FormDataContentType())
		r := b.do(req)
		wantStatus(t, r, http.StatusForbidden)
		if !strings.Contains(r.body, "Log in first") || b.cookie(web.LoginCookie) != nil {
			t.Errorf("an anonymous multipart login was read: %d %.300s", r.StatusCode, r.body)
		}
	})
	t.Run("forms of a logged-in user", func(t *testing.T) {
		r := admin.post("/sessions", url.Values{"pad": {big}})
		wantStatus(t, r, http.StatusRequestEntityTooLarge)
		if !strings.Contains(r.body, "at most 64 KiB") {
			t.Errorf("413 without the limit: %.300s", r.body)
		}
		// The MCP import takes more: 200 KiB is read (and refused as JSON, not as size).
		r = admin.post("/settings/mcp/import", url.Values{"json": {"{" + strings.Repeat(" ", 200<<10)}})
		if r.StatusCode == http.StatusRequestEntityTooLarge || r.StatusCode == http.StatusForbidden {
			t.Errorf("a 200 KiB MCP import was refused by size: %d", r.StatusCode)
		}
	})
}

// A body sent one byte a second is cut off at the body deadline (10 s), not held.
func TestSlowBodyIsCut(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	b := env.browser()
	tok := b.token()
	var cookies []string
	u, _ := url.Parse(env.ts.URL)
	for _, c := range b.jar.Cookies(u) {
		cookies = append(cookies, c.Name+"="+c.Value)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := "_csrf=" + url.QueryEscape(tok) + "&username=admin&password=" + strings.Repeat("x", 100)
	fmt.Fprintf(conn, "POST /login HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\nCookie: %s\r\n\r\n",
		u.Host, len(body), strings.Join(cookies, "; "))
	start := time.Now()
	done := make(chan time.Duration, 1)
	go func() {
		buf := make([]byte, 4096)
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		for {
			if _, err := conn.Read(buf); err != nil {
				done <- time.Since(start)
				return
			}
		}
	}()
	for i := 0; i < len(body); i++ {
		select {
		case d := <-done:
			if d > 15*time.Second {
				t.Fatalf("connection held %v", d)
			}
			return
		case <-time.After(time.Second):
		}
		if _, err := conn.Write([]byte{body[i]}); err != nil {
			return // closed by the server
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("a body trickling at 1 byte/s still held the connection after %v", time.Since(start))
		}
	}
}

func TestCSRFBoundToLogin(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	bob := env.user(admin, "bob")
	id := admin.newSession()
	u, _ := url.Parse(env.ts.URL)

	t.Run("another browser's CSRF cookie and token with my login", func(t *testing.T) {
		// B's CSRF cookie and token, A's login cookie: the attack renamed A's chat.
		mixed := env.browser()
		mixed.jar.SetCookies(u, []*http.Cookie{
			{Name: web.LoginCookie, Value: admin.cookie(web.LoginCookie).Value, Path: "/"},
			{Name: web.CSRFCookie, Value: bob.cookie(web.CSRFCookie).Value, Path: "/"},
		})
		r := mixed.postRaw("/s/"+id+"/rename", url.Values{"title": {"pwned"}, "_csrf": {bob.token()}}, nil)
		wantStatus(t, r, http.StatusForbidden)
		if r := admin.get("/s/" + id); strings.Contains(r.body, "pwned") {
			t.Error("the chat was renamed with another login's CSRF token")
		}
	})
	t.Run("token in the query string", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, env.ts.URL+"/sessions?_csrf="+url.QueryEscape(admin.token()), strings.NewReader(""))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		wantStatus(t, admin.do(req), http.StatusForbidden)
	})
	t.Run("rotated at login and logout", func(t *testing.T) {
		b := env.browser()
		before, beforeCookie := b.token(), b.cookie(web.CSRFCookie).Value
		wantRedirect(t, b.post("/login", url.Values{"username": {"bob"}, "password": {testPassword}}), "/")
		if b.cookie(web.CSRFCookie).Value == beforeCookie {
			t.Error("the CSRF cookie was not rotated at login")
		}
		// A token seen before the login (by anyone who saw the login page) is dead.
		wantStatus(t, b.postRaw("/sessions", url.Values{"_csrf": {before}}, nil), http.StatusForbidden)
		loggedIn := b.token()
		wantStatus(t, b.postRaw("/sessions", url.Values{"_csrf": {loggedIn}}, nil), http.StatusSeeOther)
		inCookie := b.cookie(web.CSRFCookie).Value
		wantRedirect(t, b.post("/logout", nil), "/login")
		if b.cookie(web.CSRFCookie).Value == inCookie {
			t.Error("the CSRF cookie was not rotated at logout")
		}
	})
	t.Run("the CSRF cookie does not outlive the browser session", func(t *testing.T) {
		r := env.browser().get("/login")
		if ck := findCookie(r.Cookies(), web.CSRFCookie); ck == nil || ck.MaxAge != 0 || !ck.Expires.IsZero() {
			t.Errorf("CSRF cookie %+v, want a session cookie", ck)
		}
	})
}

// 20 bad tries from one address, through a trusted proxy, must not keep the right
// password out from another address; the guesser's address is the one slowed down.
func TestRateLimitBehindTrustedProxy(t *testing.T) {
	env := newTestEnvConfig(t, app.Options{}, func(c *config.Config) {
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	})
	env.setup()
	from := func(ip string) http.Header { return http.Header{"X-Forwarded-For": {"10.9.9.9, " + ip}} }
	attacker := env.browser()
	limited := false
	for range 20 {
		r := attacker.postRaw("/login", url.Values{"username": {"admin"}, "password": {"guess"}, "_csrf": {attacker.token()}}, from("203.0.113.5"))
		attacker.csrf = ""
		limited = limited || r.StatusCode == http.StatusTooManyRequests
	}
	if !limited {
		t.Error("20 bad tries from one address were never slowed down")
	}
	user := env.browser()
	r := user.postRaw("/login", url.Values{"username": {"admin"}, "password": {testPassword}, "_csrf": {user.token()}}, from("198.51.100.7"))
	wantRedirect(t, r, "/")

	// Without trusted proxies the header is ignored: a client cannot pick its address.
	plain := newTestEnv(t)
	plain.setup()
	b := plain.browser()
	for i := range 30 {
		r := b.postRaw("/login", url.Values{"username": {"admin"}, "password": {"guess"}, "_csrf": {b.token()}}, from(fmt.Sprintf("198.51.100.%d", i)))
		b.csrf = ""
		if r.StatusCode == http.StatusTooManyRequests {
			return
		}
	}
	t.Error("X-Forwarded-For from an untrusted peer spread the tries over many addresses")
}

func TestTaskPanelRefusalSaysWhy(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	id := admin.newSession()
	r := admin.postRaw("/s/"+id+"/task", url.Values{"goal": {strings.Repeat("g", 1001)}, "_csrf": {admin.token()}},
		http.Header{"Hx-Request": {"true"}})
	wantStatus(t, r, http.StatusUnprocessableEntity)
	if strings.Contains(r.body, "Something went wrong") || !strings.Contains(r.body, "goal") {
		t.Errorf("the refusal does not say why: %.600s", r.body)
	}
	ss, err := env.db.SessionForOwner(context.Background(), id, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(ss.State) != 0 && strings.Contains(string(ss.State), "ggg") {
		t.Error("the refused goal was saved")
	}
}

func TestLoggedInPagesNotCached(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	id := admin.newSession()
	for _, p := range []string{"/", "/s/" + id, "/memories", "/settings/providers"} {
		if r := admin.get(p); r.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("GET %s: Cache-Control %q, want no-store", p, r.Header.Get("Cache-Control"))
		}
	}
	if r := admin.get("/assets/app.css"); r.Header.Get("Cache-Control") == "no-store" {
		t.Error("assets are not cached either")
	}
}

func TestTitlesAndMessagesWithoutControls(t *testing.T) {
	env, admin, id := chatEnv(t)
	r := admin.post("/s/"+id+"/rename", url.Values{"title": {"a\x00b\x1b[31mc\u202Eevil\u2066d\u0085e\x7f"}})
	wantStatus(t, r, http.StatusOK)
	page := admin.get("/s/" + id).body
	if !strings.Contains(page, `data-testid="session-title">ab[31mcevilde</h1>`) {
		t.Errorf("title not cleaned: %q", page[strings.Index(page, `data-testid="session-title"`):][:80])
	}

	env.llm.Enqueue(llmtest.Reply{Text: []string{"ok"}})
	ws := admin.dial(id)
	ws.send("hello\x00world")
	ws.until(finalMarker)
	page = admin.get("/s/" + id).body
	if strings.ContainsRune(page, 0) {
		t.Error("a NUL from a message reached the page HTML")
	}
	if !strings.Contains(page, "hello\uFFFDworld") {
		t.Error("the message is not shown (with U+FFFD for the NUL)")
	}
}
