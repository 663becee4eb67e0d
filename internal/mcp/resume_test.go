package mcp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gomcp "github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"atrium/internal/mcp"
	"atrium/internal/testkit"
	"atrium/internal/tools"
)

// How a forgetfulServer answers a new session (an initialize) after it forgot the old ones.
const (
	newSessionServe        = iota // open it
	newSessionHold                // hold the request until the client gives up, as a server slow to start
	newSessionUnauthorized        // 401
	newSessionBroken              // 500
)

// forgetfulServer is an in-process MCP server (mcp-go's streamable HTTP, with one
// tool, echo) that can play a restart: after forget, the sessions opened so far are
// answered 404, as a restarted server answers a session it no longer knows, and new
// sessions are answered as newSession says.
type forgetfulServer struct {
	url        string
	newSession atomic.Int32

	mu        sync.Mutex
	seen      map[string]bool
	forgotten map[string]bool
}

func newForgetfulServer(t *testing.T) *forgetfulServer {
	ms := mcpserver.NewMCPServer("forgetful", "1", mcpserver.WithToolCapabilities(true))
	ms.AddTool(gomcp.NewTool("echo", gomcp.WithString("message")), func(_ context.Context, r gomcp.CallToolRequest) (*gomcp.CallToolResult, error) {
		return gomcp.NewToolResultText("Echo: " + r.GetString("message", "")), nil
	})
	inner := mcpserver.NewStreamableHTTPServer(ms)
	f := &forgetfulServer{seen: map[string]bool{}, forgotten: map[string]bool{}}
	released := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get("Mcp-Session-Id"); id != "" {
			f.mu.Lock()
			f.seen[id] = true
			gone := f.forgotten[id]
			f.mu.Unlock()
			if gone {
				http.Error(w, "session not found", http.StatusNotFound)
				return
			}
		} else if r.Method == http.MethodPost {
			switch f.newSession.Load() {
			case newSessionHold:
				select {
				case <-r.Context().Done():
				case <-released:
				}
				http.Error(w, "starting", http.StatusServiceUnavailable)
				return
			case newSessionUnauthorized:
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			case newSessionBroken:
				http.Error(w, "broken", http.StatusInternalServerError)
				return
			}
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	t.Cleanup(func() { close(released) }) // before ts.Close, which waits for held requests
	f.url = ts.URL + "/mcp"
	return f
}

// forget plays a restart: the sessions used so far are unknown from now on, and a
// new one is answered as newSession says.
func (f *forgetfulServer) forget(newSession int32) {
	f.newSession.Store(newSession)
	f.mu.Lock()
	for id := range f.seen {
		f.forgotten[id] = true
	}
	f.mu.Unlock()
}

func (f *forgetfulServer) config() mcp.ServerConfig {
	return mcp.ServerConfig{Name: "forgetful", Transport: mcp.TransportHTTP, URL: f.url, Enabled: true}
}

// forgetfulHarness is a harness with a ready forgetfulServer, whose connect timeout
// (10 s) is well above what any call here may take.
func forgetfulHarness(t *testing.T, ping time.Duration, subscribe func(*harness, mcp.Status)) (*harness, *forgetfulServer) {
	t.Helper()
	f := newForgetfulServer(t)
	h := newHarness(t)
	h.sup.ConnectTimeout = 10 * time.Second
	h.sup.PingInterval = ping
	if subscribe != nil {
		h.sup.Subscribe(func(st mcp.Status) { subscribe(h, st) })
	}
	h.sup.Apply(context.Background(), []mcp.ServerConfig{f.config()})
	h.waitState(t, "forgetful", 10*time.Second, mcp.StateReady)
	if res := h.call(t, "forgetful__echo", map[string]any{"message": "one"}); res.Content != "Echo: one" {
		t.Fatalf("echo before the restart: %+v", res)
	}
	return h, f
}

// A server that forgot the session and then refuses the new one shows as unauthorized:
// a call then fails at once, not after waiting the connect timeout for a session that
// only an admin can bring.
func TestHTTPUnauthorizedAfterForgottenSessionFailsCallsAtOnce(t *testing.T) {
	t.Parallel()
	h, f := forgetfulHarness(t, 100*time.Millisecond, nil) // the health check finds the loss
	f.forget(newSessionUnauthorized)
	h.waitState(t, "forgetful", 10*time.Second, mcp.StateUnauthorized)

	start := time.Now()
	res := h.call(t, "forgetful__echo", map[string]any{"message": "two"})
	took := time.Since(start)
	if res.Code != tools.CodeUnavailable {
		t.Fatalf("call while unauthorized = %+v, want unavailable", res)
	}
	if took > time.Second {
		t.Errorf("the call took %s to fail, want at once", took)
	}
}

// A call waiting for the new session of a server that forgot its old one ends as soon
// as the new session fails, whether the server errs or refuses it.
func TestHTTPCallWaitingForNewSessionEndsWhenItFails(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		newSession int32
	}{
		{"error", newSessionBroken},
		{"unauthorized", newSessionUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, f := forgetfulHarness(t, time.Minute, nil) // the call finds the loss
			f.forget(tc.newSession)
			start := time.Now()
			res := h.call(t, "forgetful__echo", map[string]any{"message": "two"})
			took := time.Since(start)
			if res.Code != tools.CodeUnavailable {
				t.Fatalf("call = %+v, want unavailable", res)
			}
			if took > 2*time.Second {
				t.Errorf("the call took %s to fail, want it to end when the new session failed", took)
			}
		})
	}
}

// A call waiting for the new session of a server that forgot its old one ends when
// the server is disabled, saying so, not after the connect timeout.
func TestHTTPCallWaitingForNewSessionEndsWhenDisabled(t *testing.T) {
	t.Parallel()
	h, f := forgetfulHarness(t, time.Minute, nil)
	f.forget(newSessionHold)
	disabled := make(chan time.Time, 1)
	go func() {
		time.Sleep(500 * time.Millisecond)
		cfg := f.config()
		cfg.Enabled = false
		h.sup.Apply(context.Background(), []mcp.ServerConfig{cfg})
		disabled <- time.Now()
	}()
	res := h.call(t, "forgetful__echo", map[string]any{"message": "two"})
	ended := time.Now()
	at := <-disabled
	if res.Code != tools.CodeUnavailable || !strings.Contains(res.Content, "stopped") {
		t.Fatalf("call = %+v, want unavailable because the server was stopped", res)
	}
	if late := ended.Sub(at); late > 500*time.Millisecond {
		t.Errorf("the call ended %s after the server was disabled, want at once", late)
	}
}

// A call that arrives just as the loss of the forgotten session is recorded (here:
// while the status saying so is being published) waits for the new session like the
// calls after it, instead of failing in the moment before the reconnect is marked.
func TestHTTPCallAtForgottenSessionLossWaits(t *testing.T) {
	t.Parallel()
	var once sync.Once
	result := make(chan tools.Result, 1)
	h, f := forgetfulHarness(t, 100*time.Millisecond, func(h *harness, st mcp.Status) {
		if st.Name != "forgetful" || st.State != mcp.StateDegraded {
			return
		}
		once.Do(func() {
			go func() { result <- h.call(t, "forgetful__echo", map[string]any{"message": "two"}) }()
			// Hold the supervisor in the moment after the loss was recorded, so that
			// the call arrives in it.
			time.Sleep(300 * time.Millisecond)
		})
	})
	f.forget(newSessionServe)
	var res tools.Result
	select {
	case res = <-result:
	case <-time.After(15 * time.Second):
		t.Fatal("no call was made at the loss")
	}
	if res.Content != "Echo: two" {
		t.Fatalf("call at the loss = %+v, want it answered on the new session", res)
	}
	testkit.Eventually(t, 5*time.Second, "the server to be ready again", func() bool {
		return h.status("forgetful").State == mcp.StateReady
	})
}
