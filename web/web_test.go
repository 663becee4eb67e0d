package web_test

import (
	"context"
	"encoding/json"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"

	"atrium/internal/agent"
	"atrium/internal/app"
	"atrium/internal/config"
	"atrium/internal/llm/llmtest"
	"atrium/internal/store"
	"atrium/web"
)

// testEnv is the whole program wired like main.go, served by an httptest server.
type testEnv struct {
	t     testing.TB
	dir   string
	db    *store.DB
	llm   *llmtest.Server
	app   *app.App
	srv   *web.Server
	agent *agent.Agent
	ts    *httptest.Server
	clock *clock
}

// clock is the server's time: the real one plus an offset tests can move forward.
type clock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

const testPassword = "correct horse battery"

// newTestEnv builds the app as main does (app.New) on a fresh data directory and serves
// it with httptest. Closing the last tab stops a reply after 200 ms here.
func newTestEnv(tb testing.TB) *testEnv { return newTestEnvWith(tb, app.Options{}) }

// newTestEnvWith is newTestEnv with options (a logger, agent settings); its clock
// and grace are the test env's.
func newTestEnvWith(tb testing.TB, o app.Options) *testEnv {
	tb.Helper()
	return newTestEnvConfig(tb, o, nil)
}

// newTestEnvConfig is newTestEnvWith with a change to the configuration.
func newTestEnvConfig(tb testing.TB, o app.Options, change func(*config.Config)) *testEnv {
	tb.Helper()
	dir := tb.TempDir()
	cfg := config.Config{DataDir: dir, MaxMessageBytes: 100 * 1024, LoginTTL: time.Hour,
		ModelStartTimeout: 5 * time.Second, ModelIdleTimeout: 5 * time.Second, ShutdownTimeout: 5 * time.Second}
	if change != nil {
		change(&cfg)
	}
	clk := &clock{}
	o.Now, o.UnwatchedGrace = clk.now, 200*time.Millisecond
	a, err := app.New(context.Background(), cfg, o)
	if err != nil {
		tb.Fatal(err)
	}
	// No real MCP servers here: remote ones point at a closed port and fail fast.
	a.MCP.BackoffBase, a.MCP.BackoffMax, a.MCP.ConnectTimeout = 5*time.Millisecond, 20*time.Millisecond, 2*time.Second
	ts := httptest.NewServer(a.Handler())
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := a.Shutdown(ctx); err != nil {
			tb.Errorf("shutdown: %v", err)
		}
		ts.Close()
		a.Close()
	})
	return &testEnv{t: tb, dir: dir, db: a.Store, llm: llmtest.NewServer(tb), app: a, srv: a.Web, agent: a.Agent, ts: ts, clock: clk}
}

// browser is one cookie jar talking to the server; it never follows redirects.
type browser struct {
	env    *testEnv
	client *http.Client
	jar    *cookiejar.Jar
	csrf   string
}

func (e *testEnv) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{env: e, jar: jar, client: &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

type response struct {
	*http.Response
	body string
}

func (b *browser) do(req *http.Request) response {
	b.env.t.Helper()
	return b.doWith(b.client, req)
}

func (b *browser) doWith(client *http.Client, req *http.Request) response {
	b.env.t.Helper()
	resp, err := client.Do(req)
	if err != nil {
		b.env.t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.env.t.Fatal(err)
	}
	return response{resp, string(body)}
}

func (b *browser) get(path string) response {
	b.env.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.env.ts.URL+path, nil)
	return b.do(req)
}

// post sends a form with this browser's CSRF token.
func (b *browser) post(path string, form url.Values) response {
	b.env.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if form.Get("_csrf") == "" {
		form.Set("_csrf", b.token())
	}
	return b.postRaw(path, form, nil)
}

func (b *browser) postRaw(path string, form url.Values, header http.Header) response {
	b.env.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.env.ts.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	r := b.do(req)
	switch path {
	case "/login", "/setup", "/logout":
		b.csrf = "" // the server rotates the CSRF cookie: read the new token from a page
	}
	return r
}

var csrfRE = regexp.MustCompile(`name="_csrf" value="([^"]+)"`)

// token scrapes the CSRF token (bound to this browser's atrium_csrf cookie) from a page.
func (b *browser) token() string {
	b.env.t.Helper()
	if b.csrf != "" {
		return b.csrf
	}
	for _, p := range []string{"/login", "/", "/setup"} {
		if m := csrfRE.FindStringSubmatch(b.get(p).body); m != nil {
			b.csrf = html.UnescapeString(m[1])
			return b.csrf
		}
	}
	b.env.t.Fatal("no page with a CSRF token")
	return ""
}

// serveGET answers GETs in-process with this browser's login, with no HTTP hop, so
// that benchmarks time the handler alone.
func (b *browser) serveGET() func(path string) *httptest.ResponseRecorder {
	cookies := []*http.Cookie{b.cookie(web.LoginCookie), b.cookie(web.CSRFCookie)}
	h := b.env.srv.Handler()
	return func(path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		for _, c := range cookies {
			req.AddCookie(c)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
}

func (b *browser) cookie(name string) *http.Cookie {
	u, _ := url.Parse(b.env.ts.URL)
	for _, c := range b.jar.Cookies(u) {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func wantStatus(tb testing.TB, r response, status int) {
	tb.Helper()
	if r.StatusCode != status {
		tb.Fatalf("%s %s: status %d, want %d\n%.600s", r.Request.Method, r.Request.URL.Path, r.StatusCode, status, r.body)
	}
}

func wantRedirect(tb testing.TB, r response, location string) {
	tb.Helper()
	if r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != location {
		tb.Fatalf("%s %s: %d to %q, want 303 to %q", r.Request.Method, r.Request.URL.Path, r.StatusCode, r.Header.Get("Location"), location)
	}
}

// setup creates the first admin and returns its logged-in browser.
func (e *testEnv) setup() *browser {
	e.t.Helper()
	b := e.browser()
	r := b.post("/setup", url.Values{"username": {"admin"}, "password": {testPassword}, "password2": {testPassword}})
	wantRedirect(e.t, r, "/")
	return b
}

// user has admin create a plain user and returns that user's logged-in browser.
func (e *testEnv) user(admin *browser, name string) *browser {
	e.t.Helper()
	r := admin.post("/settings/users", url.Values{"username": {name}, "password": {testPassword}, "role": {store.RoleUser}})
	wantStatus(e.t, r, http.StatusSeeOther)
	return e.login(name, testPassword)
}

func (e *testEnv) login(name, password string) *browser {
	e.t.Helper()
	b := e.browser()
	wantRedirect(e.t, b.post("/login", url.Values{"username": {name}, "password": {password}}), "/")
	return b
}

// newSession creates a chat and returns its id.
func (b *browser) newSession() string {
	b.env.t.Helper()
	r := b.post("/sessions", nil)
	wantStatus(b.env.t, r, http.StatusSeeOther)
	id, ok := strings.CutPrefix(r.Header.Get("Location"), "/s/")
	if !ok || id == "" {
		b.env.t.Fatalf("create session redirected to %q", r.Header.Get("Location"))
	}
	return id
}

// addProvider configures an OpenAI-compatible provider as admin.
func (b *browser) addProvider(name, baseURL, modelList, key string) {
	b.env.t.Helper()
	r := b.post("/settings/providers", url.Values{"name": {name}, "kind": {"openai"}, "base_url": {baseURL},
		"models": {modelList}, "api_key": {key}})
	wantStatus(b.env.t, r, http.StatusSeeOther)
}

func (b *browser) wsURL(sessionID string) string {
	return "ws" + strings.TrimPrefix(b.env.ts.URL, "http") + "/s/" + sessionID + "/ws"
}

// dialOrigin opens the chat websocket with the login cookie and the given Origin.
func (b *browser) dialOrigin(sessionID, origin string) (*websocket.Conn, *http.Response, error) {
	d := websocket.Dialer{Jar: b.jar, HandshakeTimeout: 5 * time.Second}
	return d.Dial(b.wsURL(sessionID), http.Header{"Origin": {origin}})
}

// dial opens the chat websocket and reads its first frames: the snapshot, then the MCP
// indicator.
func (b *browser) dial(sessionID string) *wsConn {
	b.env.t.Helper()
	conn, resp, err := b.dialOrigin(sessionID, b.env.ts.URL)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		b.env.t.Fatalf("dial: %v (status %d)", err, status)
	}
	b.env.t.Cleanup(func() { conn.Close() })
	c := &wsConn{t: b.env.t, conn: conn}
	if first := c.next(); !strings.Contains(first, `id="messages"`) {
		b.env.t.Fatalf("first frame is not the message snapshot: %.300s", first)
	}
	if second := c.next(); !strings.Contains(second, `id="mcp-indicator"`) {
		b.env.t.Fatalf("second frame is not the MCP indicator: %.300s", second)
	}
	return c
}

type wsConn struct {
	t    testing.TB
	conn *websocket.Conn
}

func (c *wsConn) next() string {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	kind, data, err := c.conn.ReadMessage()
	if err != nil {
		c.t.Fatalf("websocket read: %v", err)
	}
	if kind != websocket.TextMessage {
		c.t.Fatalf("server sent frame type %d", kind)
	}
	return string(data)
}

// until reads frames until one contains want; it returns all frames read.
func (c *wsConn) until(want string) []string {
	c.t.Helper()
	var frames []string
	for {
		f := c.next()
		frames = append(frames, f)
		if strings.Contains(f, want) {
			return frames
		}
	}
}

func (c *wsConn) write(kind int, data string) {
	c.t.Helper()
	if err := c.conn.WriteMessage(kind, []byte(data)); err != nil {
		c.t.Fatalf("websocket write: %v", err)
	}
}

func (c *wsConn) send(text string) {
	c.t.Helper()
	b, _ := json.Marshal(text)
	c.write(websocket.TextMessage, `{"type":"send","text":`+string(b)+`,"HEADERS":{"HX-Request":"true"}}`)
}

const (
	finalMarker = `hx-swap-oob="outerHTML:#msg-live"`
	noticeID    = `id="notice"`
)

func (e *testEnv) messages(sessionID string) []store.Message {
	e.t.Helper()
	msgs, _, err := e.db.LatestMessages(context.Background(), sessionID, 1000)
	if err != nil {
		e.t.Fatal(err)
	}
	return msgs
}

// ---- setup and login ----

func TestSetupOnlyWhileNoUserExists(t *testing.T) {
	env := newTestEnv(t)
	b := env.browser()
	for _, p := range []string{"/", "/login", "/s/anything", "/settings/providers"} {
		wantRedirect(t, b.get(p), "/setup")
	}
	wantStatus(t, b.get("/healthz"), http.StatusOK)
	r := b.get("/setup")
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(r.body, `data-testid="setup-form"`) {
		t.Fatal("setup page has no form")
	}
	// Mismatched passwords are refused with a message, nothing created.
	r = b.post("/setup", url.Values{"username": {"admin"}, "password": {testPassword}, "password2": {"something else"}})
	wantStatus(t, r, http.StatusBadRequest)
	if !strings.Contains(r.body, "The two passwords differ.") {
		t.Errorf("no error shown: %.300s", r.body)
	}

	admin := env.setup()
	wantStatus(t, admin.get("/"), http.StatusOK)

	other := env.browser()
	wantRedirect(t, other.get("/setup"), "/login")
	r = other.post("/setup", url.Values{"username": {"mallory"}, "password": {testPassword}, "password2": {testPassword}})
	wantRedirect(t, r, "/login")
	if n, _ := env.db.CountUsers(context.Background()); n != 1 {
		t.Errorf("%d users after a second setup, want 1", n)
	}
	if other.cookie(web.LoginCookie) != nil {
		t.Error("a second setup logged its browser in")
	}
	wantRedirect(t, other.get("/"), "/login")
	wantStatus(t, other.postRaw("/login", url.Values{"username": {"mallory"}, "password": {testPassword}, "_csrf": {other.token()}}, nil),
		http.StatusUnauthorized)
}

func TestLogin(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()

	t.Run("wrong password", func(t *testing.T) {
		b := env.browser()
		r := b.post("/login", url.Values{"username": {"admin"}, "password": {"not the password"}})
		wantStatus(t, r, http.StatusUnauthorized)
		if !strings.Contains(r.body, "Wrong username or password") || !strings.Contains(r.body, `data-testid="login-form"`) {
			t.Errorf("no error on the login page: %.400s", r.body)
		}
		if b.cookie(web.LoginCookie) != nil {
			t.Error("a failed login set a login cookie")
		}
	})

	t.Run("cookie flags", func(t *testing.T) {
		b := env.browser()
		r := b.post("/login", url.Values{"username": {"admin"}, "password": {testPassword}})
		wantRedirect(t, r, "/")
		ck := findCookie(r.Cookies(), web.LoginCookie)
		if ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteLaxMode || ck.Secure {
			t.Errorf("login cookie %+v, want HttpOnly, SameSite=Lax, not Secure over http", ck)
		}
		if ck != nil && (ck.Expires.Before(time.Now().Add(50*time.Minute)) || ck.Expires.After(time.Now().Add(70*time.Minute))) {
			t.Errorf("login cookie expires %v, want about an hour from now", ck.Expires)
		}

		// Behind an https proxy: Secure cookies with the __Host- prefix. The jar would not
		// send Secure cookies over the test's plain http, so they are carried by hand.
		b = env.browser()
		https := http.Header{"X-Forwarded-Proto": {"https"}}
		req, _ := http.NewRequest(http.MethodGet, env.ts.URL+"/login", nil)
		req.Header = https.Clone()
		page := b.do(req)
		csrfCk := findCookie(page.Cookies(), "__Host-"+web.CSRFCookie)
		if csrfCk == nil || !csrfCk.Secure || !csrfCk.HttpOnly || csrfCk.Path != "/" || csrfCk.Domain != "" {
			t.Fatalf("behind an https proxy the CSRF cookie is %+v, want __Host-, Secure, HttpOnly, path /", csrfCk)
		}
		m := csrfRE.FindStringSubmatch(page.body)
		form := url.Values{"username": {"admin"}, "password": {testPassword}, "_csrf": {html.UnescapeString(m[1])}}
		hdr := https.Clone()
		hdr.Set("Cookie", csrfCk.Name+"="+csrfCk.Value)
		r = b.postRaw("/login", form, hdr)
		wantRedirect(t, r, "/")
		if ck := findCookie(r.Cookies(), "__Host-"+web.LoginCookie); ck == nil || !ck.Secure || !ck.HttpOnly || ck.Path != "/" {
			t.Errorf("behind an https proxy the login cookie is %+v, want __Host-, Secure", ck)
		}
		if ck := findCookie(r.Cookies(), web.LoginCookie); ck != nil {
			t.Errorf("a login cookie without the __Host- prefix over https: %+v", ck)
		}
		if ck := findCookie(r.Cookies(), "__Host-"+web.CSRFCookie); ck == nil || ck.Value == csrfCk.Value || !ck.Secure {
			t.Errorf("the CSRF cookie was not rotated at login: %+v", ck)
		}
	})

	t.Run("logout ends the login", func(t *testing.T) {
		b := env.login("admin", testPassword)
		old := b.cookie(web.LoginCookie).Value
		wantRedirect(t, b.post("/logout", nil), "/login")
		wantRedirect(t, b.get("/"), "/login")
		// Even a browser that kept the old cookie is logged out.
		replay := env.browser()
		u, _ := url.Parse(env.ts.URL)
		replay.jar.SetCookies(u, []*http.Cookie{{Name: web.LoginCookie, Value: old, Path: "/"}})
		wantRedirect(t, replay.get("/"), "/login")
		wantStatus(t, admin.get("/"), http.StatusOK) // other logins are untouched
	})

	t.Run("expired login", func(t *testing.T) {
		b := env.login("admin", testPassword)
		wantStatus(t, b.get("/"), http.StatusOK)
		env.clock.advance(61 * time.Minute)
		wantRedirect(t, b.get("/"), "/login")
		env.clock.advance(-61 * time.Minute)
		wantRedirect(t, b.get("/"), "/login") // the expired login was deleted, not merely hidden
	})

	t.Run("disabled user", func(t *testing.T) {
		bob := env.user(admin, "bob")
		wantStatus(t, bob.get("/"), http.StatusOK)
		u, err := env.db.UserByUsername(context.Background(), "bob")
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, admin.post("/settings/users/"+itoa(u.ID)+"/disable", nil), http.StatusSeeOther)
		wantRedirect(t, bob.get("/"), "/login")
		r := env.browser().post("/login", url.Values{"username": {"bob"}, "password": {testPassword}})
		wantStatus(t, r, http.StatusUnauthorized)
	})

	t.Run("rate limit per username and address", func(t *testing.T) {
		env.user(admin, "carol")
		b := env.browser()
		var r response
		for range 10 {
			r = b.post("/login", url.Values{"username": {"carol"}, "password": {"wrong password"}})
			if r.StatusCode != http.StatusUnauthorized {
				break
			}
		}
		wantStatus(t, r, http.StatusTooManyRequests)
		r = b.post("/login", url.Values{"username": {"carol"}, "password": {testPassword}})
		wantStatus(t, r, http.StatusTooManyRequests)
		if !strings.Contains(r.body, "Too many failed logins. Try again in") {
			t.Errorf("429 page without an explanation: %.300s", r.body)
		}
		if b.cookie(web.LoginCookie) != nil {
			t.Error("logged in despite the delay")
		}
		env.login("admin", testPassword) // another username is not slowed down
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func findCookie(cs []*http.Cookie, name string) *http.Cookie {
	for _, c := range cs {
		if c.Name == name && c.Value != "" {
			return c
		}
	}
	return nil
}

func TestCSRF(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	before, _, _ := env.db.ListSessions(context.Background(), 1, nil, 100)

	r := admin.postRaw("/sessions", url.Values{}, nil)
	wantStatus(t, r, http.StatusForbidden)
	if !strings.Contains(r.body, "came from another site") {
		t.Errorf("403 without an explanation: %.300s", r.body)
	}
	// A valid token, but for another browser's CSRF cookie.
	foreign := env.browser().token()
	wantStatus(t, admin.postRaw("/sessions", url.Values{"_csrf": {foreign}}, nil), http.StatusForbidden)
	wantStatus(t, admin.postRaw("/sessions", url.Values{}, http.Header{"X-Csrf-Token": {foreign}}), http.StatusForbidden)
	after, _, _ := env.db.ListSessions(context.Background(), 1, nil, 100)
	if len(after) != len(before) {
		t.Errorf("a refused POST created a session")
	}
	// The header works as well as the field.
	wantStatus(t, admin.postRaw("/sessions", url.Values{}, http.Header{"X-Csrf-Token": {admin.token()}}), http.StatusSeeOther)
}

// ---- authorization ----

func TestForeignSessionsAreNotFound(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	bob := env.user(admin, "bob")
	id := admin.newSession()
	wantStatus(t, admin.post("/s/"+id+"/rename", url.Values{"title": {"Admin secrets"}}), http.StatusOK)

	random := bob.get("/s/" + uuid.NewString())
	wantStatus(t, random, http.StatusNotFound)
	checks := []struct {
		name string
		do   func() response
	}{
		{"chat page", func() response { return bob.get("/s/" + id) }},
		{"older messages", func() response { return bob.get("/s/" + id + "/messages?before=5") }},
		{"rename", func() response { return bob.post("/s/"+id+"/rename", url.Values{"title": {"pwned"}}) }},
		{"delete", func() response { return bob.post("/s/"+id+"/delete", nil) }},
		{"model", func() response { return bob.post("/s/"+id+"/model", url.Values{"model": {""}}) }},
		{"stop", func() response { return bob.post("/s/"+id+"/stop", nil) }},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			r := c.do()
			wantStatus(t, r, http.StatusNotFound)
			if strings.Contains(r.body, "Admin secrets") {
				t.Error("the 404 shows the session title")
			}
			if c.name == "chat page" && r.body != random.body {
				t.Errorf("a foreign session's 404 differs from a missing one's:\n%s\n---\n%s", r.body, random.body)
			}
		})
	}
	t.Run("websocket", func(t *testing.T) {
		conn, resp, err := bob.dialOrigin(id, env.ts.URL)
		if err == nil {
			conn.Close()
			t.Fatal("bob opened the admin's chat websocket")
		}
		if resp == nil || resp.StatusCode != http.StatusNotFound {
			t.Fatalf("handshake: %v %+v, want 404", err, resp)
		}
	})
	// The owner's session is untouched.
	r := admin.get("/s/" + id)
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(r.body, "Admin secrets") {
		t.Error("the session lost its title")
	}
}

func TestAdminPagesForbiddenToUsers(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	bob := env.user(admin, "bob")
	for _, p := range []string{"/settings/providers"} {
		r := bob.get(p)
		wantStatus(t, r, http.StatusForbidden)
		if !strings.Contains(r.body, "Only admins") {
			t.Errorf("%s: 403 without an explanation", p)
		}
		wantStatus(t, admin.get(p), http.StatusOK)
	}
	// The users section is a 404 to a plain user, like the other admin-only settings sections.
	wantStatus(t, bob.get("/settings/users"), http.StatusNotFound)
	wantStatus(t, admin.get("/settings/users"), http.StatusOK)
	wantStatus(t, bob.post("/settings/users", url.Values{"username": {"eve"}, "password": {testPassword}, "role": {"admin"}}), http.StatusNotFound)
	wantStatus(t, bob.post("/settings/providers", url.Values{"name": {"x"}, "kind": {"openai"}, "base_url": {env.llm.URL()}, "models": {"m"}}), http.StatusForbidden)
	if _, err := env.db.UserByUsername(context.Background(), "eve"); err == nil {
		t.Error("a plain user created an account")
	}
	if ps, _ := env.db.ListProviders(context.Background()); len(ps) != 0 {
		t.Error("a plain user added a provider")
	}
}

// ---- chat websocket ----

// chatEnv is an env with an admin, the fake provider as default model and one session.
func chatEnv(t *testing.T) (*testEnv, *browser, string) {
	env := newTestEnv(t)
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "fake-model", "")
	return env, admin, admin.newSession()
}

func TestWebsocketSendStreamsReply(t *testing.T) {
	env, admin, id := chatEnv(t)
	reply := "First paragraph with **bold**.\n\nSecond paragraph.\n\nThird one, still streaming"
	env.llm.Enqueue(llmtest.Reply{Text: llmtest.Words(reply), ChunkDelay: 10 * time.Millisecond})
	ws := admin.dial(id)

	ws.send("Hello <b>model</b>")
	frames := ws.until(finalMarker)
	all := strings.Join(frames, "\n")

	idx := func(s string) int { return strings.Index(all, s) }
	user, tail, final := idx(`beforeend:#messages`), idx(`id="msg-live-tail" hx-swap-oob="morph"`), idx(finalMarker)
	if user < 0 || tail < 0 || final < 0 || !(user < tail && tail < final) {
		t.Fatalf("frames out of order or missing (user %d, tail %d, final %d):\n%s", user, tail, final, all)
	}
	if !strings.Contains(all, "Hello &lt;b&gt;model&lt;/b&gt;") {
		t.Error("the user's message is not shown escaped")
	}
	if !strings.Contains(all, `beforeend:#msg-live-blocks`) {
		t.Error("no finished blocks were appended while streaming")
	}
	if !strings.Contains(all, `data-state="streaming"`) {
		t.Error("the run state never showed streaming")
	}
	last := frames[len(frames)-1]
	if !strings.Contains(last, "<strong>bold</strong>") || !strings.Contains(last, "Third one, still streaming") ||
		!strings.Contains(last, `data-status="complete"`) {
		t.Errorf("final frame does not carry the rendered reply: %s", last)
	}
	if !strings.Contains(all[final:], `data-state="idle"`) {
		t.Errorf("run state not idle after the final frame")
	}

	msgs := env.messages(id)
	if len(msgs) != 2 || msgs[0].Content != "Hello <b>model</b>" || msgs[1].Content != reply || msgs[1].Status != store.StatusComplete {
		t.Fatalf("stored %+v", msgs)
	}
	// The first message names the chat.
	if r := admin.get("/s/" + id); !strings.Contains(r.body, "Hello &lt;b&gt;model&lt;/b&gt;</h1>") {
		t.Errorf("chat not titled after its first message")
	}
}

func TestWebsocketRejectsBadFrames(t *testing.T) {
	env, admin, id := chatEnv(t)
	ws := admin.dial(id)

	tests := []struct {
		name, notice string
		write        func()
	}{
		{"over the size limit", "too long", func() { ws.send(strings.Repeat("x", 100*1024+1)) }},
		{"invalid utf-8", "not valid UTF-8", func() {
			ws.write(websocket.TextMessage, "{\"type\":\"send\",\"text\":\"caf\xc3\x28\xff\"}")
		}},
		{"malformed json", "malformed", func() { ws.write(websocket.TextMessage, `{"type":"send","text":`) }},
		{"binary frame", "Only text frames", func() { ws.write(websocket.BinaryMessage, `{"type":"send","text":"hi"}`) }},
		{"unknown type", "Unknown request", func() { ws.write(websocket.TextMessage, `{"type":"hack"}`) }},
		{"empty text", "empty", func() { ws.send("   ") }},
		{"hostile send id", "send id", func() {
			ws.write(websocket.TextMessage, `{"type":"send","text":"hi","nonce":"\"><script>alert(1)</script>"}`)
		}},
		{"send id too long", "send id", func() {
			ws.write(websocket.TextMessage, `{"type":"send","text":"hi","nonce":"`+strings.Repeat("n", 65)+`"}`)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.write()
			f := ws.next()
			if !strings.Contains(f, noticeID) || !strings.Contains(f, tt.notice) {
				t.Fatalf("frame %.300s, want a notice saying %q", f, tt.notice)
			}
			if msgs := env.messages(id); len(msgs) != 0 {
				t.Fatalf("stored %d messages", len(msgs))
			}
		})
	}
	// The connection still works.
	env.llm.Enqueue(llmtest.Reply{Text: []string{"Still ", "here."}})
	ws.send(strings.Repeat("y", 100*1024))
	frames := ws.until(finalMarker)
	if last := frames[len(frames)-1]; !strings.Contains(last, "Still here.") {
		t.Errorf("final frame %.300s", last)
	}
	if msgs := env.messages(id); len(msgs) != 2 {
		t.Errorf("stored %d messages, want 2", len(msgs))
	}
}

func TestWebsocketTwoTabsGetSameFrames(t *testing.T) {
	env, admin, id := chatEnv(t)
	env.llm.Enqueue(llmtest.Reply{Text: llmtest.Words("Same answer for every tab."), ChunkDelay: 5 * time.Millisecond})
	a, b := admin.dial(id), admin.dial(id)

	a.send("Question from tab A")
	fa, fb := a.until(finalMarker), b.until(finalMarker)
	if !strings.Contains(strings.Join(fb, ""), "Question from tab A") {
		t.Error("tab B did not see tab A's message")
	}
	lastA, lastB := fa[len(fa)-1], fb[len(fb)-1]
	if lastA != lastB || !strings.Contains(lastA, "Same answer for every tab.") {
		t.Errorf("final frames differ:\nA: %s\nB: %s", lastA, lastB)
	}
}

func TestWebsocketBusy(t *testing.T) {
	env, admin, id := chatEnv(t)
	env.llm.Enqueue(llmtest.Reply{Text: []string{"Thinking ", "slowly ", "forever"}, StallAfter: 2})
	ws := admin.dial(id)

	ws.send("first")
	ws.until("slowly") // the reply is streaming
	ws.send("second")
	frames := ws.until(noticeID + ` class="notice" role="alert"`)
	if f := frames[len(frames)-1]; !strings.Contains(f, "Queued") {
		t.Fatalf("no queued notice: %.300s", f)
	}
	ws.send("third")
	frames = ws.until("still answering")
	if f := frames[len(frames)-1]; !strings.Contains(f, "already queued") {
		t.Fatalf("no busy notice: %.300s", f)
	}
	// A composer send names itself (nonce); the answer says whether it was accepted,
	// with the reason in the same frame, so the tab keeps a refused text.
	ws.write(websocket.TextMessage, `{"type":"send","text":"fourth","nonce":"n-4_x"}`)
	frames = ws.until(`data-nonce="n-4_x"`)
	if f := frames[len(frames)-1]; !strings.Contains(f, `data-accepted="false"`) || !strings.Contains(f, "already queued") {
		t.Fatalf("refused send answered with %.400s", f)
	}
	ws.write(websocket.TextMessage, `{"type":"stop"}`)
	frames = ws.until(finalMarker)
	if last := frames[len(frames)-1]; !strings.Contains(last, `data-status="stopped"`) || !strings.Contains(last, "Thinking slowly") {
		t.Errorf("final frame after stop: %s", last)
	}
	msgs := env.messages(id)
	if len(msgs) != 2 || msgs[0].Content != "first" || msgs[1].Role != store.RoleAssistant {
		t.Fatalf("stored %+v, want the first message and one reply", msgs)
	}
	if n := len(env.llm.Requests()); n != 1 {
		t.Errorf("the model was called %d times", n)
	}

	env.llm.Enqueue(llmtest.Reply{Text: []string{"Done."}})
	ws.write(websocket.TextMessage, `{"type":"send","text":"fifth","nonce":"n5"}`)
	frames = ws.until(`data-nonce="n5"`)
	if f := frames[len(frames)-1]; !strings.Contains(f, `data-accepted="true"`) || strings.Contains(f, noticeID) {
		t.Fatalf("accepted send answered with %.400s", f)
	}
}

func TestWebsocketForeignOriginRefused(t *testing.T) {
	_, admin, id := chatEnv(t)
	conn, resp, err := admin.dialOrigin(id, "https://evil.example")
	if err == nil {
		conn.Close()
		t.Fatal("handshake from a foreign origin succeeded")
	}
	if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("handshake: %v, want 403", err)
	}
}

func TestMisconfiguredProviderShowsInlineError(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/v1"
	ln.Close()
	admin.addProvider("Broken", closed, "some-model", "")
	id := admin.newSession()
	ws := admin.dial(id)

	ws.send("Hello?")
	frames := ws.until(finalMarker)
	last := frames[len(frames)-1]
	if !strings.Contains(last, `data-testid="message-error"`) || !strings.Contains(last, "Check the base URL") ||
		!strings.Contains(last, "connection refused") {
		t.Errorf("final frame lacks an inline error about the base URL: %s", last)
	}
	if msgs := env.messages(id); len(msgs) != 2 || msgs[1].Status != store.StatusError {
		t.Errorf("stored %+v", msgs)
	}
}

// ---- sessions and messages ----

var sessionLinkRE = regexp.MustCompile(`data-testid="session-link" data-session-id="([^"]+)"`)
var moreRE = regexp.MustCompile(`hx-get="(/sessions\?cursor=[^"]+)"`)

func TestSessionListPaging(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	created := map[string]bool{}
	for range 35 {
		created[admin.newSession()] = true
	}
	r := admin.get("/")
	wantStatus(t, r, http.StatusOK)
	first := sessionLinkRE.FindAllStringSubmatch(r.body, -1)
	more := moreRE.FindStringSubmatch(r.body)
	if len(first) != 30 || more == nil {
		t.Fatalf("first page: %d sessions, more button %v", len(first), more != nil)
	}
	r = admin.get(html.UnescapeString(more[1]))
	wantStatus(t, r, http.StatusOK)
	second := sessionLinkRE.FindAllStringSubmatch(r.body, -1)
	if len(second) != 5 || moreRE.MatchString(r.body) {
		t.Fatalf("second page: %d sessions, more button %v", len(second), moreRE.MatchString(r.body))
	}
	seen := map[string]bool{}
	for _, m := range append(first, second...) {
		if seen[m[1]] || !created[m[1]] {
			t.Errorf("session %s listed twice or unknown", m[1])
		}
		seen[m[1]] = true
	}
	wantStatus(t, admin.get("/sessions?cursor=garbage"), http.StatusBadRequest)
}

func TestRenameAndDeleteSession(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	id := admin.newSession()

	r := admin.post("/s/"+id+"/rename", url.Values{"title": {"  Trip\nplanning  "}})
	wantStatus(t, r, http.StatusOK)
	if strings.Count(r.body, ">Trip planning<") != 2 {
		t.Errorf("rename response should update the sidebar and the header: %s", r.body)
	}
	if r := admin.get("/s/" + id); !strings.Contains(r.body, `data-testid="session-title">Trip planning</h1>`) {
		t.Errorf("chat page does not show the new title")
	}
	wantStatus(t, admin.post("/s/"+id+"/rename", url.Values{"title": {"   "}}), http.StatusBadRequest)

	wantRedirect(t, admin.post("/s/"+id+"/delete", nil), "/")
	wantStatus(t, admin.get("/s/"+id), http.StatusNotFound)
	if r := admin.get("/"); strings.Contains(r.body, id) {
		t.Error("the deleted chat is still listed")
	}
}

var msgIDRE = regexp.MustCompile(`id="msg-(\d+)"`)

func msgSeqs(body string) []string {
	var out []string
	for _, m := range msgIDRE.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

func seqStrings(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, itoa(int64(i)))
	}
	return out
}

func TestOlderMessages(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	id := admin.newSession()
	seedMessages(t, env.db, id, 120, 40)

	r := admin.get("/s/" + id)
	wantStatus(t, r, http.StatusOK)
	if got, want := msgSeqs(r.body), seqStrings(71, 120); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("chat page shows messages %v, want %v", got, want)
	}
	if !strings.Contains(r.body, `id="older"`) || !strings.Contains(r.body, `hx-get="/s/`+id+`/messages?before=71"`) {
		t.Fatal("no load-older button pointing before message 71")
	}

	r = admin.get("/s/" + id + "/messages?before=71")
	wantStatus(t, r, http.StatusOK)
	if got, want := msgSeqs(r.body), seqStrings(21, 70); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("older page shows %v, want %v", got, want)
	}
	if !strings.Contains(r.body, `messages?before=21"`) {
		t.Error("older page lacks the next load-older button")
	}
	r = admin.get("/s/" + id + "/messages?before=21")
	if got := msgSeqs(r.body); len(got) != 20 || strings.Contains(r.body, `id="older"`) {
		t.Errorf("oldest page: %v, older button %v", got, strings.Contains(r.body, `id="older"`))
	}
	wantStatus(t, admin.get("/s/"+id+"/messages?before=abc"), http.StatusBadRequest)
}

// seedMessages appends n alternating user/assistant messages of about size bytes.
func seedMessages(tb testing.TB, db *store.DB, sessionID string, n, size int) {
	tb.Helper()
	para := "Here is some **markdown** with `code`, a [link](https://example.com) and a list:\n\n- one\n- two\n\n"
	msgs := make([]*store.Message, 0, n)
	for i := range n {
		role := "user"
		if i%2 == 1 {
			role = store.RoleAssistant
		}
		text := "Message " + itoa(int64(i+1)) + ". "
		for len(text) < size {
			text += para
		}
		msgs = append(msgs, &store.Message{SessionID: sessionID, Role: role, Content: text[:max(size, len("Message 00000. "))]})
	}
	for len(msgs) > 0 {
		k := min(len(msgs), 1000)
		if err := db.AppendMessages(context.Background(), msgs[:k]); err != nil {
			tb.Fatal(err)
		}
		msgs = msgs[k:]
	}
}

// ---- providers ----

func TestProviderKeyNeverShown(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	const key = "sk-test-SECRET-1234"
	env.llm.SetRequireKey(key)
	// No models typed: they are listed from the provider, which needs the key.
	admin.addProvider("Fake", env.llm.URL(), "", key)

	r := admin.get("/settings/providers")
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(r.body, "1234") || !strings.Contains(r.body, "fake-model") {
		t.Errorf("providers page lacks the key hint or the listed model: %.2000s", r.body)
	}
	if strings.Contains(r.body, "SECRET") {
		t.Fatal("the providers page shows the API key")
	}

	ps, err := env.db.ListProviders(context.Background())
	if err != nil || len(ps) != 1 {
		t.Fatalf("providers %+v, %v; want the one added", ps, err)
	}
	sealed := ps[0].APIKeySealed
	if len(sealed) == 0 || strings.Contains(string(sealed), "SECRET") {
		t.Errorf("key not sealed in the providers table: %q", sealed)
	}
	// Nothing in the database files holds the key in the clear.
	files, _ := filepath.Glob(filepath.Join(env.dir, "atrium.db*"))
	if len(files) == 0 {
		t.Fatalf("no database files in %s", env.dir)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "SECRET") {
			t.Errorf("%s contains the API key in the clear", filepath.Base(f))
		}
	}
}

func TestHealth(t *testing.T) {
	env := newTestEnv(t)
	b := env.browser()
	for _, p := range []string{"/healthz", "/readyz"} {
		wantStatus(t, b.get(p), http.StatusOK)
	}
}

// TestLastViewerLeavingStopsReply: when the only tab closes mid-reply, the reply is
// stopped after the grace period and its partial text saved; a tab that reconnects
// within the grace period keeps it going.
func TestLastViewerLeavingStopsReply(t *testing.T) {
	env, admin, id := chatEnv(t)
	env.llm.Enqueue(llmtest.Reply{Text: llmtest.Words(strings.Repeat("still going ", 200)), ChunkDelay: 10 * time.Millisecond})
	ws := admin.dial(id)
	ws.send("talk to me")
	ws.until("still going")
	ws.conn.Close()

	// A reload reconnects within the grace period: the reply goes on.
	time.Sleep(50 * time.Millisecond)
	again := admin.dial(id)
	again.until("still going")
	again.conn.Close()

	deadline := time.Now().Add(5 * time.Second)
	for {
		msgs := env.messages(id)
		if len(msgs) == 2 && msgs[1].Error != store.ReplyInterrupted { // the reply ended (not its draft)
			if msgs[1].Status != store.StatusStopped || !strings.HasPrefix(msgs[1].Content, "still going") {
				t.Fatalf("reply after the last tab closed: %+v", msgs[1])
			}
			if n := strings.Count(msgs[1].Content, "going"); n >= 200 {
				t.Fatalf("the reply ran to the end (%d words): it was not stopped", n)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reply saved 5s after the last tab closed: %+v", msgs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Model windows are typed in the provider form, shown on its card and in the edit
// form, and a malformed one is refused with the reason while the form keeps the text.
func TestProviderModelWindowsForm(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "small window=4096\nlarge window=128k\nplain", "")
	r := admin.get("/settings/providers")
	wantStatus(t, r, http.StatusOK)
	for _, want := range []string{"4k window", "128k window", "small window=4096\nlarge window=131072\nplain"} {
		if !strings.Contains(r.body, want) {
			t.Errorf("providers page lacks %q", want)
		}
	}
	bad := admin.post("/settings/providers", url.Values{"name": {"Other"}, "kind": {"openai"},
		"base_url": {env.llm.URL()}, "models": {"m window=lots"}})
	if bad.StatusCode == http.StatusSeeOther || !strings.Contains(bad.body, "window=32768") ||
		!strings.Contains(bad.body, "m window=lots") {
		t.Errorf("malformed window: status %d, body %.1500s", bad.StatusCode, bad.body)
	}
}

// With titles on, the first message's first line is the chat's title at once, and the
// model's title replaces it in the sidebar and the header of every open tab.
func TestGeneratedTitleReachesTheChat(t *testing.T) {
	env := newTestEnvWith(t, app.Options{Agent: agent.Config{GenerateTitles: true}})
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "fake-model", "")
	env.llm.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		if strings.HasPrefix(req.Messages[0].Content, "Write a title") {
			return llmtest.Reply{Text: []string{"Weekend in <Lyon>"}}
		}
		return llmtest.Reply{Text: []string{"Sure."}}
	})
	id := admin.newSession()
	ws := admin.dial(id)
	ws.send("plan my weekend in lyon\nwith details")
	frames := ws.until("Weekend in &lt;Lyon&gt;")
	if got := strings.Join(frames, "\n"); !strings.Contains(got, "plan my weekend in lyon") {
		t.Errorf("the first line was not the title first: %.2000s", got)
	}
	if r := admin.get("/s/" + id); !strings.Contains(r.body, `data-testid="session-title">Weekend in &lt;Lyon&gt;</h1>`) {
		t.Error("the chat page does not show the model's title")
	}
}
