// Command composesmoke is the client half of deploy/compose-smoke.sh: it runs the
// in-repo fake model for the containers to call, and makes the checks that need more
// than curl (cookies, CSRF tokens, a websocket) against Atrium behind Caddy.
//
//	composesmoke fake-model -listen 0.0.0.0:0      # prints "listening on HOST:PORT", runs until killed
//	composesmoke first -base https://localhost -http http://localhost -ca root.crt -model URL -state FILE
//	composesmoke again -base https://localhost -ca root.crt -state FILE
//
// It lives under testdata so that `go build ./...` and the image leave it out. Each check
// prints one "PASS name: ..." or "FAIL name: ..." line; the exit status is 1 if any failed.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"atrium/internal/llm/llmtest"
)

// replyTokens is how many words the fake model streams; the last one proves the whole
// reply arrived and was saved.
const replyTokens = 20

const (
	adminUser     = "admin"
	adminPassword = "compose smoke password"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: composesmoke fake-model|first|again [flags]")
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	var ok bool
	switch cmd {
	case "fake-model":
		ok = fakeModel(args)
	case "first":
		ok = first(args)
	case "again":
		ok = again(args)
	default:
		fmt.Fprintf(os.Stderr, "composesmoke: unknown command %q\n", cmd)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

// cleanupTB lets a program use llmtest.NewServer, which only calls Helper and Cleanup
// on its testing.TB. The embedded nil TB provides the interface's unexported method.
type cleanupTB struct {
	testing.TB
	cleanups []func()
}

func (c *cleanupTB) Helper()          {}
func (c *cleanupTB) Cleanup(f func()) { c.cleanups = append(c.cleanups, f) }

// fakeModel serves the fake model on -listen until SIGINT or SIGTERM. llmtest listens on
// 127.0.0.1 only, which a container cannot reach, so a reverse proxy on -listen fronts it
// (flushing at once, so the stream stays a stream).
func fakeModel(args []string) bool {
	fs := flag.NewFlagSet("fake-model", flag.ExitOnError)
	listen := fs.String("listen", "0.0.0.0:0", "address for the containers to reach")
	_ = fs.Parse(args)

	tb := &cleanupTB{}
	fake := llmtest.NewServer(tb)
	fake.Unrecorded = true
	fake.SetModels("fake-model")
	var story strings.Builder
	for i := 1; i <= replyTokens; i++ {
		fmt.Fprintf(&story, "tok%d ", i)
	}
	fake.SetHandler(func(llmtest.ChatRequest) llmtest.Reply {
		return llmtest.Reply{Text: llmtest.Words(story.String()), ChunkDelay: 40 * time.Millisecond}
	})
	target, _ := url.Parse(strings.TrimSuffix(fake.URL(), "/v1"))
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1

	l, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake-model:", err)
		return false
	}
	fmt.Println("listening on", l.Addr())
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
	_ = srv.Close()
	for i := len(tb.cleanups) - 1; i >= 0; i-- {
		tb.cleanups[i]()
	}
	return true
}

// checks prints each check's result and remembers whether all passed.
type checks struct{ failed bool }

func (c *checks) pass(name, format string, a ...any) {
	fmt.Printf("PASS %s: %s\n", name, fmt.Sprintf(format, a...))
}

func (c *checks) fail(name, format string, a ...any) {
	c.failed = true
	fmt.Printf("FAIL %s: %s\n", name, fmt.Sprintf(format, a...))
}

// client is a browser-like HTTPS client of one Atrium: a cookie jar, Caddy's CA, no
// redirects followed (the checks look at them).
type client struct {
	base string
	c    *http.Client
	tls  *tls.Config
}

func newClient(base, caFile string) (*client, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
	}
	jar, _ := cookiejar.New(nil)
	cfg := &tls.Config{RootCAs: pool}
	return &client{base: base, tls: cfg, c: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		Transport:     &http.Transport{TLSClientConfig: cfg},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}, nil
}

func (h *client) get(path string) (*http.Response, string, error) {
	resp, err := h.c.Get(h.base + path)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// post sends form with a CSRF token taken from the page at tokenFrom.
func (h *client) post(path, tokenFrom string, form url.Values) (*http.Response, string, error) {
	_, page, err := h.get(tokenFrom)
	if err != nil {
		return nil, "", err
	}
	m := csrfRe.FindStringSubmatch(page)
	if m == nil {
		return nil, "", fmt.Errorf("no CSRF token on %s", tokenFrom)
	}
	form.Set("_csrf", m[1])
	resp, err := h.c.PostForm(h.base+path, form)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

var (
	csrfRe = regexp.MustCompile(`name="_csrf" value="([^"]+)"`)
	tokRe  = regexp.MustCompile(`tok(\d+)`)
)

// hostCookies checks that resp sets want and that every cookie it sets carries the
// __Host- prefix with what the prefix demands (Secure, path /, no domain).
func hostCookies(resp *http.Response, want string) error {
	found := false
	for _, c := range resp.Cookies() {
		if !strings.HasPrefix(c.Name, "__Host-") {
			return fmt.Errorf("cookie %q without the __Host- prefix", c.Name)
		}
		if !c.Secure || c.Path != "/" || c.Domain != "" {
			return fmt.Errorf("cookie %s Secure=%v Path=%q Domain=%q", c.Name, c.Secure, c.Path, c.Domain)
		}
		found = found || c.Name == want
	}
	if !found {
		return fmt.Errorf("no %s cookie (Set-Cookie: %q)", want, resp.Header.Values("Set-Cookie"))
	}
	return nil
}

// first checks a new stack: redirect, TLS, setup with __Host- cookies, a websocket
// upgrade with a streamed reply, logout, a forged X-Forwarded-For, and a login. It
// writes the chat's id to -state for `again`.
func first(args []string) bool {
	fs := flag.NewFlagSet("first", flag.ExitOnError)
	base := fs.String("base", "https://localhost", "Atrium's public https URL (through Caddy)")
	plain := fs.String("http", "http://localhost", "the same host over plain http")
	ca := fs.String("ca", "", "Caddy's root certificate (PEM)")
	model := fs.String("model", "", "the fake model's base URL as the containers reach it (ending in /v1)")
	state := fs.String("state", "", "file to write the chat id to")
	_ = fs.Parse(args)
	var c checks
	h, err := newClient(*base, *ca)
	if err != nil {
		c.fail("tls", "%v", err)
		return false
	}

	// Plain http is redirected to https by Caddy.
	if resp, err := h.c.Get(*plain + "/login"); err != nil {
		c.fail("redirect", "%v", err)
	} else {
		resp.Body.Close()
		loc := resp.Header.Get("Location")
		if (resp.StatusCode == http.StatusMovedPermanently || resp.StatusCode == http.StatusPermanentRedirect) &&
			loc == *base+"/login" {
			c.pass("redirect", "%s/login -> %d %s", *plain, resp.StatusCode, loc)
		} else {
			c.fail("redirect", "%s/login -> %d Location %q; want a permanent redirect to %s/login", *plain, resp.StatusCode, loc, *base)
		}
	}

	// https with a certificate that Caddy's CA signed, verified (no -k).
	if resp, body, err := h.get("/healthz"); err != nil {
		c.fail("tls", "GET /healthz: %v", err)
		return false
	} else if resp.StatusCode != http.StatusOK {
		c.fail("tls", "GET /healthz: %d %q", resp.StatusCode, body)
		return false
	} else {
		c.pass("tls", "GET %s/healthz 200 over %s, certificate issued by %q", *base,
			tls.VersionName(resp.TLS.Version), resp.TLS.PeerCertificates[0].Issuer.CommonName)
	}

	// Setup: every cookie is __Host- and Secure, because ATRIUM_BASE_URL is https.
	resp, _, err := h.get("/setup")
	if err == nil {
		err = hostCookies(resp, "__Host-atrium_csrf")
	}
	if err != nil {
		c.fail("cookies", "GET /setup: %v", err)
		return false
	}
	resp, body, err := h.post("/setup", "/setup", url.Values{"username": {adminUser},
		"password": {adminPassword}, "password2": {adminPassword}})
	if err == nil && resp.StatusCode != http.StatusSeeOther {
		err = fmt.Errorf("%d %.200q", resp.StatusCode, body)
	}
	if err == nil {
		err = hostCookies(resp, "__Host-atrium_login")
	}
	if err != nil {
		c.fail("setup", "POST /setup: %v", err)
		return false
	}
	c.pass("setup", "admin created; __Host-atrium_csrf and __Host-atrium_login are Secure, path /, no domain")

	// A provider pointing at the fake model, and a chat.
	resp, body, err = h.post("/settings/providers", "/settings/providers", url.Values{"name": {"fake"},
		"kind": {"openai"}, "base_url": {*model}, "models": {"fake-model"}})
	if err == nil && resp.StatusCode != http.StatusSeeOther {
		err = fmt.Errorf("%d %.300q", resp.StatusCode, body)
	}
	if err != nil {
		c.fail("provider", "add the fake model at %s: %v", *model, err)
		return false
	}
	resp, _, err = h.post("/sessions", "/settings/providers", url.Values{})
	id := ""
	if err == nil {
		id = strings.TrimPrefix(resp.Header.Get("Location"), "/s/")
	}
	if err != nil || id == "" || strings.Contains(id, "/") {
		c.fail("chat", "POST /sessions: %v, Location %q", err, resp.Header.Get("Location"))
		return false
	}

	// The websocket upgrades through Caddy and streams the reply token by token.
	if err := streamReply(h, id, &c); err != nil {
		c.fail("websocket", "%v", err)
		return false
	}
	if err := os.WriteFile(*state, []byte(id+"\n"), 0o600); err != nil {
		c.fail("state", "%v", err)
		return false
	}

	// Logout, a failed login with a forged X-Forwarded-For (the script then reads the
	// log for the address Atrium recorded), and the right password.
	resp, _, err = h.post("/logout", "/s/"+id, url.Values{})
	if err != nil || resp.StatusCode != http.StatusSeeOther {
		c.fail("login", "logout: %v %v", err, resp)
		return false
	}
	if err := forgedFailedLogin(h); err != nil {
		c.fail("login", "a wrong password: %v", err)
	}
	if err := login(h); err != nil {
		c.fail("login", "%v", err)
	} else {
		c.pass("login", "logout, a wrong password refused, the right one accepted with a new __Host-atrium_login")
	}
	return !c.failed
}

// streamReply sends a message on chat id's websocket and checks that the reply arrives
// in many frames up to the last token, and that the chat page then shows it saved.
func streamReply(h *client, id string, c *checks) error {
	d := websocket.Dialer{Jar: h.c.Jar, TLSClientConfig: h.tls, HandshakeTimeout: 10 * time.Second}
	wsURL := "wss" + strings.TrimPrefix(h.base, "https") + "/s/" + id + "/ws"
	conn, resp, err := d.Dial(wsURL, http.Header{"Origin": {h.base}})
	if err != nil {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		return fmt.Errorf("dial %s: %v (HTTP %d)", wsURL, err, code)
	}
	defer conn.Close()
	c.pass("websocket", "%s upgraded: %d %s", wsURL, resp.StatusCode, resp.Header.Get("Upgrade"))
	if err := conn.WriteJSON(map[string]string{"type": "send", "text": "tell me a story"}); err != nil {
		return err
	}
	var steps []int // the furthest token shown, each time it grew
	start := time.Now()
	deadline := start.Add(30 * time.Second)
	for len(steps) == 0 || steps[len(steps)-1] < replyTokens {
		_ = conn.SetReadDeadline(deadline)
		_, data, err := conn.ReadMessage()
		if err != nil {
			return fmt.Errorf("reading the reply after tokens %v: %v", steps, err)
		}
		n := 0
		for _, m := range tokRe.FindAllStringSubmatch(string(data), -1) {
			if v, _ := strconv.Atoi(m[1]); v > n {
				n = v
			}
		}
		if n > 0 && (len(steps) == 0 || n > steps[len(steps)-1]) {
			steps = append(steps, n)
		}
	}
	if len(steps) < 5 {
		c.fail("stream", "the reply arrived in %d steps (%v); want it streamed in many frames", len(steps), steps)
	} else {
		c.pass("stream", "the fake model's reply (%d tokens) arrived in %d steps in %.1f s", replyTokens, len(steps), time.Since(start).Seconds())
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if saved, err := chatSaved(h, id); err == nil && saved {
			return nil
		} else if time.Now().After(end) {
			return fmt.Errorf("the reply was streamed but /s/%s does not show it saved (err %v)", id, err)
		}
	}
}

// chatSaved reports whether chat id shows the whole reply, complete.
func chatSaved(h *client, id string) (bool, error) {
	resp, page, err := h.get("/s/" + id)
	if err != nil {
		return false, err
	}
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("GET /s/%s: %d", id, resp.StatusCode)
	}
	return strings.Contains(page, fmt.Sprintf("tok%d", replyTokens)) &&
		strings.Contains(page, `data-role="assistant" data-status="complete"`), nil
}

// forgedFailedLogin tries a wrong password with an X-Forwarded-For that Caddy must not
// pass on as the client's address.
func forgedFailedLogin(h *client) error {
	_, page, err := h.get("/login")
	if err != nil {
		return err
	}
	m := csrfRe.FindStringSubmatch(page)
	if m == nil {
		return errors.New("no CSRF token on /login")
	}
	req, _ := http.NewRequest(http.MethodPost, h.base+"/login", strings.NewReader(url.Values{
		"_csrf": {m[1]}, "username": {adminUser}, "password": {"a wrong password"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Forwarded-For", "203.0.113.9")
	resp, err := h.c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusSeeOther {
		return errors.New("a wrong password was accepted")
	}
	return nil
}

func login(h *client) error {
	resp, body, err := h.post("/login", "/login", url.Values{"username": {adminUser}, "password": {adminPassword}})
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusSeeOther {
		return fmt.Errorf("POST /login: %d %.200q", resp.StatusCode, body)
	}
	return hostCookies(resp, "__Host-atrium_login")
}

// again checks, after `docker-compose down && up`, that the account and the chat written
// by `first` are still there.
func again(args []string) bool {
	fs := flag.NewFlagSet("again", flag.ExitOnError)
	base := fs.String("base", "https://localhost", "Atrium's public https URL (through Caddy)")
	ca := fs.String("ca", "", "Caddy's root certificate (PEM)")
	state := fs.String("state", "", "the file `first` wrote")
	_ = fs.Parse(args)
	var c checks
	raw, err := os.ReadFile(*state)
	id := strings.TrimSpace(string(raw))
	if err != nil || id == "" {
		c.fail("persist", "no chat id from the first run in %s: %v", *state, err)
		return false
	}
	h, err := newClient(*base, *ca)
	if err == nil {
		err = login(h)
	}
	if err != nil {
		c.fail("persist", "log in again: %v", err)
		return false
	}
	if saved, err := chatSaved(h, id); err != nil || !saved {
		c.fail("persist", "chat %s after down/up: saved=%v err=%v", id, saved, err)
		return false
	}
	c.pass("persist", "after down and up: the admin logs in and chat %s still shows the whole reply", id)
	return true
}
