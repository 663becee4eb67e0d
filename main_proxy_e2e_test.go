package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"atrium/internal/llm/llmtest"
	"atrium/internal/testkit"
)

// TestBehindNginx runs nginx with the shipped deploy/nginx-atrium.conf (only its listen
// ports, upstream and certificate paths replaced) as a TLS proxy in front of the real
// Atrium and checks it with checkThroughProxy.
func TestBehindNginx(t *testing.T) {
	nginx := proxyTool(t, "nginx")
	a, fakeURL, logs := startProxiedAtrium(t)
	dir := t.TempDir()
	pool := writeSelfSignedCert(t, dir)
	httpAddr, httpsAddr := freeLoopbackAddr(t), freeLoopbackAddr(t)
	startNginx(t, nginx, dir, httpsAddr, map[string]string{
		"listen 80;":             "listen " + httpAddr + ";",
		"listen 443 ssl;":        "listen " + httpsAddr + " ssl;",
		"server 127.0.0.1:8080;": "server " + strings.TrimPrefix(a.URL, "http://") + ";",
		"/etc/letsencrypt/live/atrium.example.com/fullchain.pem": filepath.Join(dir, "cert.pem"),
		"/etc/letsencrypt/live/atrium.example.com/privkey.pem":   filepath.Join(dir, "key.pem"),
	})
	checkThroughProxy(t, "http://"+httpAddr, "https://"+httpsAddr, pool, fakeURL, logs)
}

// TestBehindCaddy runs Caddy with the shipped deploy/Caddyfile (the one
// docker-compose.yml mounts) in front of the real Atrium and checks it with
// checkThroughProxy. The site address becomes https://127.0.0.1:port, for which Caddy
// issues a certificate from its own local CA instead of a public one, the upstream
// atrium:8080 becomes Atrium's address, and a global options block sets the ports
// and keeps Caddy from touching the system trust store or opening its admin API.
func TestBehindCaddy(t *testing.T) {
	caddy := proxyTool(t, "caddy")
	a, fakeURL, logs := startProxiedAtrium(t)
	dir := t.TempDir()
	httpAddr, httpsAddr := freeLoopbackAddr(t), freeLoopbackAddr(t)
	_, httpPort, _ := net.SplitHostPort(httpAddr)
	_, httpsPort, _ := net.SplitHostPort(httpsAddr)
	shipped, err := os.ReadFile(filepath.Join("deploy", "Caddyfile"))
	if err != nil {
		t.Fatal(err)
	}
	conf := string(shipped)
	for old, new := range map[string]string{
		"{$ATRIUM_DOMAIN} {":         "https://" + httpsAddr + " {",
		"reverse_proxy atrium:8080 ": "reverse_proxy " + strings.TrimPrefix(a.URL, "http://") + " ",
	} {
		if n := strings.Count(conf, old); n != 1 {
			t.Fatalf("deploy/Caddyfile has %q %d times; the test replaces it once", old, n)
		}
		conf = strings.Replace(conf, old, new, 1)
	}
	conf = fmt.Sprintf("{\n\tadmin off\n\thttp_port %s\n\thttps_port %s\n\tskip_install_trust\n\tdefault_bind 127.0.0.1\n}\n\n", httpPort, httpsPort) + conf
	if err := os.WriteFile(filepath.Join(dir, "Caddyfile"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(caddy, "run", "--adapter", "caddyfile", "--config", filepath.Join(dir, "Caddyfile"))
	cmd.Env = []string{"HOME=" + dir, "XDG_DATA_HOME=" + filepath.Join(dir, "data"),
		"XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "PATH=" + os.Getenv("PATH")}
	waitListening(t, startProxy(t, cmd, ""), httpsAddr)
	// Caddy's local CA root, made at its first start.
	root := filepath.Join(dir, "data", "caddy", "pki", "authorities", "local", "root.crt")
	var pem []byte
	testkit.Eventually(t, 10*time.Second, "Caddy's local CA root", func() bool {
		pem, err = os.ReadFile(root)
		return err == nil && len(pem) > 0
	})
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("%s holds no certificate", root)
	}
	// Caddy listens before it has issued the site's certificate.
	probe := proxyClient(t, "https://"+httpsAddr, "127.0.0.3", pool)
	testkit.Eventually(t, 10*time.Second, "Caddy's certificate for "+httpsAddr, func() bool {
		resp, err := probe.c.Get(probe.base + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	})
	checkThroughProxy(t, "http://"+httpAddr, "https://"+httpsAddr, pool, fakeURL, logs)
}

// proxyTool is the path of the proxy program name; without it the test skips, or
// fails under E2E_REQUIRED=1.
func proxyTool(t *testing.T, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs " + name + "; skipped with -short")
	}
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("E2E_REQUIRED") != "" {
			t.Fatalf("%s not found and E2E_REQUIRED is set (apt-get update && apt-get install %s)", name, name)
		}
		testkit.Skip(t, fmt.Sprintf("%s not found; install it (apt-get update && apt-get install %s) or set E2E_REQUIRED=1 to fail instead", name, name))
	}
	return path
}

// startProxiedAtrium starts Atrium trusting 127.0.0.1 (where the proxy connects from)
// as a proxy, with a fake model that streams 20 tokens, and returns it with its log.
func startProxiedAtrium(t *testing.T) (a *runningApp, fakeURL string, logs *syncBuffer) {
	t.Helper()
	fake := llmtest.NewServer(t)
	fake.SetModels("fake-model")
	var story strings.Builder
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&story, "tok%d ", i)
	}
	fake.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		return llmtest.Reply{Text: llmtest.Words(story.String()), ChunkDelay: 40 * time.Millisecond}
	})
	logs = &syncBuffer{}
	a = startAppLog(t, map[string]string{"ATRIUM_TRUSTED_PROXIES": "127.0.0.1", "ATRIUM_LOG_LEVEL": "info"},
		io.MultiWriter(testWriter{t}, logs))
	return a, fake.URL(), logs
}

// checkThroughProxy checks what a TLS proxy at base (and httpBase for plain http) in
// front of Atrium must do: plain http redirected to https, Secure __Host- cookies
// because the proxy says https (ATRIUM_BASE_URL is deliberately unset, so
// X-Forwarded-Proto is the only way Atrium can know), a login, the client's address
// taken from X-Forwarded-For of a trusted proxy (a forged entry ignored; the log names
// the client; one client's failed logins do not slow down another), and a reply
// streamed token by token over a websocket upgraded through the proxy.
//
// The clients dial from 127.0.0.3 and 127.0.0.4 and the proxy reaches Atrium from
// 127.0.0.1, the only trusted proxy, so each side has its own address on loopback.
func checkThroughProxy(t *testing.T, httpBase, base string, pool *x509.CertPool, fakeURL string, logs *syncBuffer) {
	t.Helper()
	// Plain http is sent to https.
	plain := proxyClient(t, httpBase, "127.0.0.3", pool)
	resp, err := plain.c.Get(httpBase + "/login")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if (resp.StatusCode != http.StatusMovedPermanently && resp.StatusCode != http.StatusPermanentRedirect) ||
		!strings.HasPrefix(resp.Header.Get("Location"), "https://") {
		t.Errorf("plain http through the proxy: %d Location %q; want a permanent redirect to https", resp.StatusCode, resp.Header.Get("Location"))
	}

	// Setup through the proxy: the cookies are Secure and carry the __Host- prefix.
	admin := proxyClient(t, base, "127.0.0.4", pool)
	resp, err = admin.c.Get(base + "/setup")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	checkHostCookies(t, "GET /setup", resp, "__Host-atrium_csrf")
	tok := admin.csrf("/setup")
	resp, _ = admin.post("/setup", url.Values{"_csrf": {tok}, "username": {"admin"}, "password": {"admin password"},
		"password2": {"admin password"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("setup through the proxy: %d", resp.StatusCode)
	}
	checkHostCookies(t, "POST /setup", resp, "__Host-atrium_login")
	tok = admin.csrf("/settings/providers")
	if resp, _ := admin.post("/settings/providers", url.Values{"_csrf": {tok}, "name": {"fake"}, "kind": {"openai"},
		"base_url": {fakeURL}, "models": {"fake-model"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("add provider: %d", resp.StatusCode)
	}
	resp, _ = admin.post("/sessions", url.Values{"_csrf": {tok}})
	id := strings.TrimPrefix(resp.Header.Get("Location"), "/s/")
	if resp, _ := admin.post("/logout", url.Values{"_csrf": {tok}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d", resp.StatusCode)
	}

	// Someone at 127.0.0.3 guesses the admin's password, forging X-Forwarded-For, until
	// the login slows down.
	guesser := proxyClient(t, base, "127.0.0.3", pool)
	slowed := false
	for i := 0; i < 12 && !slowed; i++ {
		req, _ := http.NewRequest(http.MethodPost, base+"/login", strings.NewReader(url.Values{
			"_csrf": {guesser.csrf("/login")}, "username": {"admin"}, "password": {fmt.Sprintf("guess %d", i)}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-For", "203.0.113.9")
		resp, err := guesser.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body bytes.Buffer
		_, _ = body.ReadFrom(resp.Body)
		resp.Body.Close()
		slowed = strings.Contains(body.String(), "Try again in")
	}
	if !slowed {
		t.Fatal("12 failed logins through the proxy were never slowed down")
	}
	// The admin, at another address, logs in at once with the right password.
	tok = admin.csrf("/login")
	resp, body := admin.post("/login", url.Values{"_csrf": {tok}, "username": {"admin"}, "password": {"admin password"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login from 127.0.0.4 after another address's failures: %d, %q; want 303 (the proxy's address was taken for the client's)",
			resp.StatusCode, firstN(body, 300))
	}
	checkHostCookies(t, "POST /login", resp, "__Host-atrium_login")
	log := logs.String()
	if !strings.Contains(log, "web: login failed") || !strings.Contains(log, "ip=127.0.0.3") ||
		!strings.Contains(log, "ip=127.0.0.4") || strings.Contains(log, "203.0.113.9") {
		t.Errorf("the log should name the clients 127.0.0.3 and 127.0.0.4 and never the forged 203.0.113.9:\n%s", log)
	}

	// A websocket through the proxy streams the reply token by token.
	conn := dialThroughProxy(t, admin, base, id, "127.0.0.4", pool)
	defer conn.Close()
	if err := conn.WriteJSON(map[string]string{"type": "send", "text": "tell me a story"}); err != nil {
		t.Fatal(err)
	}
	var steps []int // the furthest token shown, each time it grew
	deadline := time.Now().Add(15 * time.Second)
	for len(steps) == 0 || steps[len(steps)-1] < 20 {
		_ = conn.SetReadDeadline(deadline)
		_, data, err := conn.ReadMessage()
		if err != nil {
			t.Fatalf("websocket through the proxy after tokens %v: %v", steps, err)
		}
		if n := lastTok(string(data)); n > 0 && (len(steps) == 0 || n > steps[len(steps)-1]) {
			steps = append(steps, n)
		}
	}
	if len(steps) < 5 {
		t.Errorf("the reply arrived in %d steps (%v); want it streamed, in many frames", len(steps), steps)
	}
	testkit.Eventually(t, 5*time.Second, "the reply saved", func() bool {
		page, _ := admin.get("/s/" + id)
		return strings.Contains(page, "tok20") && strings.Contains(page, `data-role="assistant" data-status="complete"`)
	})
}

// startNginx runs nginx in the foreground on dir with deploy/nginx-atrium.conf, each
// key of replace replaced (exactly once) by its value, and waits until it listens on addr.
func startNginx(t *testing.T, nginx, dir, addr string, replace map[string]string) {
	t.Helper()
	shipped, err := os.ReadFile(filepath.Join("deploy", "nginx-atrium.conf"))
	if err != nil {
		t.Fatal(err)
	}
	conf := string(shipped)
	for old, new := range replace {
		if n := strings.Count(conf, old); n != 1 {
			t.Fatalf("deploy/nginx-atrium.conf has %q %d times; the test replaces it once", old, n)
		}
		conf = strings.Replace(conf, old, new, 1)
	}
	if err := os.WriteFile(filepath.Join(dir, "atrium.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	// A foreground nginx without a master process, all of its files in dir.
	main := fmt.Sprintf(`daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 64; }
http {
    access_log %[1]s/access.log;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    include %[1]s/atrium.conf;
}
`, dir)
	if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(main), 0o600); err != nil {
		t.Fatal(err)
	}
	errlog := filepath.Join(dir, "error.log")
	cmd := exec.Command(nginx, "-p", dir, "-e", errlog, "-c", filepath.Join(dir, "nginx.conf"))
	waitListening(t, startProxy(t, cmd, errlog), addr)
}

// proxyProc is a running proxy.
type proxyProc struct {
	out    *syncBuffer
	errlog string // a log file to show as well when the test fails
	done   chan error
}

// startProxy starts cmd and stops it when the test ends, showing its output if the
// test failed.
func startProxy(t *testing.T, cmd *exec.Cmd, errlog string) *proxyProc {
	t.Helper()
	p := &proxyProc{out: &syncBuffer{}, errlog: errlog, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s output:\n%s%s", filepath.Base(cmd.Path), p.out.String(), p.log())
		}
	})
	return p
}

func (p *proxyProc) log() string {
	if p.errlog == "" {
		return ""
	}
	b, _ := os.ReadFile(p.errlog)
	return "\n" + p.errlog + ":\n" + string(b)
}

// waitListening waits until addr accepts connections, failing if the proxy exits.
func waitListening(t *testing.T, p *proxyProc, addr string) {
	t.Helper()
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("the proxy exited: %v\n%s%s", err, p.out.String(), p.log())
		default:
		}
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the proxy did not listen on %s within 10 s", addr)
		}
	}
}

// checkHostCookies fails t unless resp sets the cookie want, Secure, for path / and
// without a domain (what the __Host- prefix asks of a browser), and sets no cookie
// without the prefix.
func checkHostCookies(t *testing.T, what string, resp *http.Response, want string) {
	t.Helper()
	found := false
	for _, c := range resp.Cookies() {
		if !strings.HasPrefix(c.Name, "__Host-") {
			t.Errorf("%s through the https proxy set cookie %q without the __Host- prefix", what, c.Name)
			continue
		}
		if !c.Secure || c.Path != "/" || c.Domain != "" {
			t.Errorf("%s: cookie %s Secure=%v Path=%q Domain=%q; want Secure, path / and no domain", what, c.Name, c.Secure, c.Path, c.Domain)
		}
		found = found || c.Name == want
	}
	if !found {
		t.Errorf("%s through the https proxy did not set %s (Set-Cookie: %q)", what, want, resp.Header.Values("Set-Cookie"))
	}
}

// proxyClient is an httpClient that trusts pool and connects from the loopback address from.
func proxyClient(t *testing.T, base, from string, pool *x509.CertPool) *httpClient {
	jar, _ := cookiejar.New(nil)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool},
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &httpClient{t: t, base: base, c: &http.Client{Jar: jar, Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// dialThroughProxy opens chat id's websocket at base like a browser on that page would.
func dialThroughProxy(t *testing.T, h *httpClient, base, id, from string, pool *x509.CertPool) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{Jar: h.c.Jar, TLSClientConfig: &tls.Config{RootCAs: pool},
		NetDialContext:   (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).DialContext,
		HandshakeTimeout: 10 * time.Second}
	conn, resp, err := d.Dial("wss"+strings.TrimPrefix(base, "https")+"/s/"+id+"/ws", http.Header{"Origin": {base}})
	if err != nil {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		t.Fatalf("websocket through the proxy: %v (HTTP %d)", err, code)
	}
	return conn
}

// writeSelfSignedCert writes cert.pem and key.pem for 127.0.0.1 into dir and returns
// a pool that trusts the certificate.
func writeSelfSignedCert(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "atrium test proxy"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

// freeLoopbackAddr is a 127.0.0.1 address with a port free a moment ago.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// syncBuffer collects a log written from several goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
