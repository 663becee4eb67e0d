package main

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// runningApp is a running Atrium booted through run(), as the binary would be.
type runningApp struct {
	URL     string
	DataDir string
	stop    func() error
}

// startApp boots Atrium on 127.0.0.1:0 with a fresh data directory and stops it (like
// SIGTERM) when the test ends, failing the test if shutdown returns an error.
func startApp(t testing.TB, env map[string]string) *runningApp {
	t.Helper()
	return startAppLog(t, env, testWriter{t})
}

// startAppLog is startApp with the server log written to logw.
func startAppLog(t testing.TB, env map[string]string, logw io.Writer) *runningApp {
	t.Helper()
	dir := t.TempDir()
	if env == nil {
		env = map[string]string{}
	}
	if env["ATRIUM_DATA"] == "" {
		env["ATRIUM_DATA"] = filepath.Join(dir, "data")
	}
	env["ATRIUM_ADDR"] = "127.0.0.1:0"
	if env["ATRIUM_MEMORY_EXTRACT"] == "" {
		// The scripted fake model would get one more call after every reply.
		env["ATRIUM_MEMORY_EXTRACT"] = "false"
	}
	if env["ATRIUM_GENERATE_TITLES"] == "" {
		env["ATRIUM_GENERATE_TITLES"] = "false" // and one after each chat's first reply
	}
	if env["ATRIUM_LOG_LEVEL"] == "" {
		env["ATRIUM_LOG_LEVEL"] = "warn"
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, nil, func(k string) string { return env[k] }, os.Stdout, logw, ready)
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("atrium did not start: %v", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("atrium did not start within 10s")
	}
	a := &runningApp{URL: "http://" + addr, DataDir: env["ATRIUM_DATA"]}
	stopped := false
	a.stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(15 * time.Second):
			return context.DeadlineExceeded
		}
	}
	t.Cleanup(func() {
		if err := a.stop(); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return a
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// browserless HTTP client with a cookie jar, for protocol-level checks.
type httpClient struct {
	t    testing.TB
	base string
	c    *http.Client
}

func newHTTPClient(t testing.TB, base string) *httpClient {
	jar, _ := cookiejar.New(nil)
	return &httpClient{t: t, base: base, c: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

var csrfRe = regexp.MustCompile(`name="_csrf" value="([^"]+)"`)

// csrf fetches a page and returns the CSRF token in its forms.
func (h *httpClient) csrf(path string) string {
	h.t.Helper()
	body, _ := h.get(path)
	m := csrfRe.FindStringSubmatch(body)
	if m == nil {
		h.t.Fatalf("no csrf token on %s", path)
	}
	return m[1]
}

func (h *httpClient) get(path string) (string, int) {
	h.t.Helper()
	resp, err := h.c.Get(h.base + path)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode
}

func (h *httpClient) post(path string, form url.Values) (*http.Response, string) {
	h.t.Helper()
	resp, err := h.c.PostForm(h.base+path, form)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// setupAdmin creates the first account, admin / "admin password", through /setup.
func (h *httpClient) setupAdmin() {
	h.t.Helper()
	tok := h.csrf("/setup")
	if resp, _ := h.post("/setup", url.Values{"_csrf": {tok}, "username": {"admin"}, "password": {"admin password"},
		"password2": {"admin password"}}); resp.StatusCode != http.StatusSeeOther {
		h.t.Fatalf("setup: %d", resp.StatusCode)
	}
}
