package mcp_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"atrium/internal/mcp"
	"atrium/internal/testkit"
)

// switchProxy forwards to one server-everything and can be pointed at another, as a
// server restarted behind a stable address looks: the new one knows none of the old
// sessions (and answers them with 400, as the TypeScript SDK does), while the old
// event stream stays open.
type switchProxy struct {
	mu      sync.Mutex
	target  *url.URL
	refuse  bool // answer the GET event stream with 400
	gets    atomic.Int32
	handler http.Handler
}

func newSwitchProxy(t *testing.T, target string) (*switchProxy, string) {
	p := &switchProxy{}
	p.point(target)
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			p.mu.Lock()
			r.SetURL(p.target)
			p.mu.Unlock()
			r.Out.URL.Path = r.In.URL.Path
		},
		FlushInterval: -1,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			p.gets.Add(1)
			p.mu.Lock()
			refuse := p.refuse
			p.mu.Unlock()
			if refuse {
				http.Error(w, `{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: no GET stream here"},"id":null}`, http.StatusBadRequest)
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return p, srv.URL + "/mcp"
}

func (p *switchProxy) point(target string) {
	u, _ := url.Parse(target)
	u.Path = ""
	p.mu.Lock()
	p.target = u
	p.mu.Unlock()
}

// errorLines counts ERROR records.
type errorLines struct {
	slog.Handler
	n   atomic.Int32
	mu  sync.Mutex
	buf *bytes.Buffer
}

func (e *errorLines) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		e.n.Add(1)
	}
	return e.Handler.Handle(ctx, r)
}

func countingLog() (*slog.Logger, *errorLines) {
	buf := &bytes.Buffer{}
	e := &errorLines{buf: buf}
	e.Handler = slog.NewTextHandler(&lockedWriter{mu: &e.mu, w: buf}, &slog.HandlerOptions{Level: slog.LevelDebug})
	return slog.New(e), e
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// A server restarted within one ping interval forgets the session: the next call must
// re-initialise and succeed, not fail with "No valid session ID" while the card says ready.
func TestHTTPForgottenSessionReconnects(t *testing.T) {
	t.Parallel()
	node := needNode(t)
	first := startEverythingHTTP(t, node)
	second := startEverythingHTTP(t, node)
	proxy, addr := newSwitchProxy(t, first)
	h := newHarness(t)
	h.sup.PingInterval = time.Minute // the restart falls inside one ping interval
	h.sup.Apply(context.Background(), []mcp.ServerConfig{{Name: "remote", Transport: mcp.TransportHTTP, URL: addr, Enabled: true}})
	h.waitState(t, "remote", 30*time.Second, mcp.StateReady)
	if res := h.call(t, "remote__echo", map[string]any{"message": "one"}); res.Content != "Echo: one" {
		t.Fatalf("echo before: %+v", res)
	}

	proxy.point(second)
	start := time.Now()
	res := h.call(t, "remote__echo", map[string]any{"message": "two"})
	took := time.Since(start)
	if res.Content != "Echo: two" {
		t.Fatalf("echo after the restart: %+v", res)
	}
	t.Logf("call after the restart answered in %s", took)
	if took > 3*time.Second {
		t.Errorf("recovery took %s, want ≤ 3 s", took)
	}
	h.waitState(t, "remote", 10*time.Second, mcp.StateReady)
}

// A server that answers the standalone GET stream with 400 is asked once, not once a
// second forever, and that is no ERROR.
func TestHTTPRefusedEventStreamStops(t *testing.T) {
	t.Parallel()
	node := needNode(t)
	proxy, addr := newSwitchProxy(t, startEverythingHTTP(t, node))
	proxy.refuse = true
	log, errs := countingLog()
	h := newHarnessLog(t, log)
	h.sup.Apply(context.Background(), []mcp.ServerConfig{{Name: "remote", Transport: mcp.TransportHTTP, URL: addr, Enabled: true}})
	h.waitState(t, "remote", 30*time.Second, mcp.StateReady)
	time.Sleep(3500 * time.Millisecond)
	if n := proxy.gets.Load(); n > 1 {
		t.Errorf("%d GET requests in 3.5 s, want 1", n)
	}
	if n := errs.n.Load(); n > 0 {
		errs.mu.Lock()
		t.Errorf("%d ERROR lines:\n%s", n, errs.buf.String())
		errs.mu.Unlock()
	}
	if res := h.call(t, "remote__echo", map[string]any{"message": "still"}); res.Content != "Echo: still" {
		t.Fatalf("echo: %+v", res)
	}
}

// A dead HTTP server is noticed when its event stream ends, not at the next ping.
func TestHTTPDeadServerNoticedAtStreamEnd(t *testing.T) {
	t.Parallel()
	node := needNode(t)
	port := freePort(t)
	cmd := execEverything(t, node, "streamableHttp", port)
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	h := newHarness(t)
	h.sup.PingInterval = time.Minute
	h.sup.Apply(context.Background(), []mcp.ServerConfig{{Name: "remote", Transport: mcp.TransportHTTP,
		URL: fmt.Sprintf("http://127.0.0.1:%d/mcp", port), Enabled: true}})
	h.waitState(t, "remote", 30*time.Second, mcp.StateReady)
	// Let the GET stream open.
	time.Sleep(500 * time.Millisecond)
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Wait()
	start := time.Now()
	testkit.Eventually(t, 5*time.Second, "the server to be seen down", func() bool {
		return h.status("remote").State != mcp.StateReady
	})
	t.Logf("seen down %s after the kill", time.Since(start))
	if strings.Contains(h.status("remote").Error, "health check") {
		t.Errorf("noticed by the ping, not the stream: %q", h.status("remote").Error)
	}
}

// A credential in the URL never reaches the logs or the card, whatever fails.
func TestURLCredentialNotLogged(t *testing.T) {
	t.Parallel()
	const secret = "SEKRET-url-9876"
	log, errs := countingLog()
	h := newHarnessLog(t, log)
	for _, tr := range []mcp.Transport{mcp.TransportHTTP, mcp.TransportSSE} {
		h.sup.Apply(context.Background(), []mcp.ServerConfig{{Name: "dead-" + string(tr), Transport: tr, Enabled: true,
			URL: fmt.Sprintf("http://127.0.0.1:%d/mcp?api_key=%s", freePort(t), secret)}})
		st := h.waitState(t, "dead-"+string(tr), 30*time.Second, mcp.StateDegraded, mcp.StateFailed)
		if strings.Contains(st.Error, secret) || !strings.Contains(st.Error, "api_key=REDACTED") {
			t.Errorf("%s card error: %q", tr, st.Error)
		}
	}
	errs.mu.Lock()
	defer errs.mu.Unlock()
	if strings.Contains(errs.buf.String(), secret) {
		t.Errorf("the log holds the credential:\n%s", errs.buf.String())
	}
}
