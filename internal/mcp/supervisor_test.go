package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"atrium/internal/errs"
	"atrium/internal/mcp"
	"atrium/internal/testkit"
	"atrium/internal/tools"
)

func TestValidate(t *testing.T) {
	ok := mcp.ServerConfig{Name: "fs", Transport: mcp.TransportStdio, Command: "node"}
	tests := []struct {
		name string
		edit func(c *mcp.ServerConfig)
		want string // "" means valid; else a fragment of the message
	}{
		{"stdio", func(c *mcp.ServerConfig) {}, ""},
		{"http", func(c *mcp.ServerConfig) {
			c.Transport, c.Command, c.URL = mcp.TransportHTTP, "", "https://x.example/mcp"
		}, ""},
		{"bad name", func(c *mcp.ServerConfig) { c.Name = "Bad Name" }, "server name"},
		{"double underscore", func(c *mcp.ServerConfig) { c.Name = "a__b" }, `"__"`},
		{"no command", func(c *mcp.ServerConfig) { c.Command = " " }, "needs a command"},
		{"bad transport", func(c *mcp.ServerConfig) { c.Transport = "ws" }, "transport"},
		{"bad url", func(c *mcp.ServerConfig) { c.Transport, c.Command, c.URL = mcp.TransportSSE, "", "ftp://x" }, "URL"},
		{"bad header", func(c *mcp.ServerConfig) {
			c.Transport, c.Command, c.URL = mcp.TransportHTTP, "", "http://x/mcp"
			c.Headers = map[string]string{"X-A": "b\r\nc"}
		}, "header"},
		{"timeout", func(c *mcp.ServerConfig) { c.CallTimeout = time.Second }, "call timeout"},
		{"allow and deny", func(c *mcp.ServerConfig) { c.AllowTools, c.DenyTools = []string{"a"}, []string{"b"} }, "either"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.edit(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errs.Is(err, errs.Invalid) || !strings.Contains(errs.Message(err), tt.want) {
				t.Fatalf("Validate = %v, want errs.Invalid mentioning %q", err, tt.want)
			}
		})
	}
}

func TestSecrets(t *testing.T) {
	c := mcp.ServerConfig{
		Env:         map[string]string{"A": "env-secret", "B": ""},
		Headers:     map[string]string{"X-Key": "header-secret"},
		BearerToken: "token-secret-long",
	}
	got := c.Secrets()
	want := []string{"token-secret-long", "header-secret", "env-secret"}
	if !slices.Equal(got, want) {
		t.Fatalf("Secrets = %q, want %q", got, want)
	}
}

// testEverything discovers server-everything's tools, resources and prompts
// and uses them through the registry.
func testEverything(t *testing.T, h *harness, name string) {
	st := h.waitState(t, name, 30*time.Second, mcp.StateReady)

	var names []string
	for _, ti := range st.Tools {
		names = append(names, ti.Name)
	}
	for _, want := range []string{"echo", "get-sum", "get-tiny-image"} {
		if !slices.Contains(names, want) {
			t.Fatalf("tools %v lack %q", names, want)
		}
	}
	if !slices.Contains(h.toolNames(), name+"__echo") {
		t.Fatalf("registry %v lacks %s__echo", h.toolNames(), name)
	}
	if st.Resources == 0 || st.Prompts == 0 {
		t.Fatalf("status counts %d resources and %d prompts, want some of each", st.Resources, st.Prompts)
	}

	t.Run("echo", func(t *testing.T) {
		res := h.call(t, name+"__echo", map[string]any{"message": "hello atrium"})
		if res.IsError || res.Content != "Echo: hello atrium" {
			t.Fatalf("echo = %+v", res)
		}
	})
	t.Run("add", func(t *testing.T) {
		res := h.call(t, name+"__get-sum", map[string]any{"a": 2, "b": 40})
		if res.IsError || !strings.Contains(res.Content, "42") {
			t.Fatalf("get-sum = %+v", res)
		}
	})
	t.Run("validation", func(t *testing.T) {
		res := h.call(t, name+"__get-sum", map[string]any{"a": "two", "b": 40})
		if res.Code != tools.CodeInvalidArguments {
			t.Fatalf("get-sum with a string = %+v, want invalid_arguments", res)
		}
	})
	t.Run("image as metadata", func(t *testing.T) {
		res := h.call(t, name+"__get-tiny-image", map[string]any{})
		if res.IsError || !strings.Contains(res.Content, `{"bytes":`) || !strings.Contains(res.Content, `"type":"image"`) {
			t.Fatalf("get-tiny-image = %+v", res)
		}
		if strings.Contains(res.Content, "iVBOR") { // the start of base64 PNG data
			t.Fatalf("image data leaked into the result: %.200s", res.Content)
		}
	})
	t.Run("resources", func(t *testing.T) {
		ctx := context.Background()
		rs, err := h.sup.Resources(ctx, name)
		if err != nil || len(rs) == 0 {
			t.Fatalf("Resources = %v, %v", rs, err)
		}
		var text *mcp.Resource
		for i, r := range rs {
			if strings.HasPrefix(r.MimeType, "text/") {
				text = &rs[i]
				break
			}
		}
		if text == nil {
			t.Fatalf("no text resource among %+v", rs)
		}
		rc, err := h.sup.ReadResource(ctx, name, text.URI)
		if err != nil || rc.Text == "" || rc.URI != text.URI {
			t.Fatalf("ReadResource(%s) = %+v, %v", text.URI, rc, err)
		}
		if _, err := h.sup.Resources(ctx, "nope"); !errs.Is(err, errs.NotFound) {
			t.Fatalf("Resources of an unknown server: %v, want not_found", err)
		}
	})
	t.Run("prompts", func(t *testing.T) {
		var args *mcp.Prompt
		for _, p := range h.sup.Prompts() {
			if p.Server == name && p.Name == "args-prompt" {
				args = &p
			}
		}
		if args == nil || len(args.Arguments) != 2 || !args.Arguments[0].Required || args.Arguments[0].Name != "city" {
			t.Fatalf("args-prompt = %+v in %+v", args, h.sup.Prompts())
		}
		text, err := h.sup.GetPrompt(context.Background(), name, "args-prompt", map[string]string{"city": "Lyon"})
		if err != nil || !strings.Contains(text, "Lyon") {
			t.Fatalf("GetPrompt = %q, %v", text, err)
		}
	})
}

func TestEverythingStdio(t *testing.T) {
	t.Parallel()
	node := needNode(t)
	h := newHarness(t)
	h.sup.Apply(context.Background(), []mcp.ServerConfig{everythingStdio(node, "everything")})
	testEverything(t, h, "everything")

	t.Run("disable", func(t *testing.T) {
		pid := h.sup.ChildPID("everything")
		cfg := everythingStdio(node, "everything")
		cfg.Enabled = false
		h.sup.Apply(context.Background(), []mcp.ServerConfig{cfg})
		if hasPrefixed(h.toolNames(), "everything__") {
			t.Fatalf("tools still registered after disabling: %v", h.toolNames())
		}
		if st := h.status("everything"); st.State != mcp.StateDisabled {
			t.Fatalf("state %q, want disabled", st.State)
		}
		waitGone(t, pid, 5*time.Second)
	})
}

func TestEverythingStreamableHTTP(t *testing.T) {
	t.Parallel()
	node := needNode(t)
	url := startEverythingHTTP(t, node)
	h := newHarness(t)
	h.sup.Apply(context.Background(), []mcp.ServerConfig{{
		Name: "remote", Transport: mcp.TransportHTTP, URL: url, Enabled: true,
		Headers: map[string]string{"X-Test": "1"}, BearerToken: "not-checked",
	}})
	testEverything(t, h, "remote")
}

func TestEverythingSSE(t *testing.T) {
	t.Parallel()
	node := needNode(t)
	h := newHarness(t)
	h.sup.Apply(context.Background(), []mcp.ServerConfig{{
		Name: "legacy", Transport: mcp.TransportSSE, URL: startEverythingSSE(t, node), Enabled: true,
	}})
	testEverything(t, h, "legacy")
}

func TestStdioEnvIsolation(t *testing.T) {
	t.Parallel()
	node := needNode(t)
	os.Setenv("ATRIUM_TEST_PROVIDER_KEY", "sk-must-not-leak") // not t.Setenv: the test is parallel
	defer os.Unsetenv("ATRIUM_TEST_PROVIDER_KEY")
	h := newHarness(t)
	cfg := everythingStdio(node, "env")
	cfg.Env = map[string]string{"GREETING": "bonjour"}
	cfg.AllowTools = []string{"get-env"}
	h.sup.Apply(context.Background(), []mcp.ServerConfig{cfg})
	h.waitState(t, "env", 30*time.Second, mcp.StateReady)
	if got := h.toolNames(); !slices.Equal(got, []string{"env__get-env"}) {
		t.Fatalf("allow-list: registered %v, want only env__get-env", got)
	}
	res := h.call(t, "env__get-env", map[string]any{})
	var env map[string]string
	if err := json.Unmarshal([]byte(res.Content), &env); err != nil {
		t.Fatalf("get-env = %+v: %v", res, err)
	}
	if env["GREETING"] != "bonjour" || env["PATH"] == "" {
		t.Fatalf("child env %v lacks GREETING or PATH", env)
	}
	if _, leaked := env["ATRIUM_TEST_PROVIDER_KEY"]; leaked {
		t.Fatal("the child inherited Atrium's environment")
	}
}

// TestStdioKillRecovers kills server-everything mid-session: a call in flight
// gets the unavailable shape, the state goes degraded then ready, and the tools
// come back; it reports how long the tools were unusable.
func TestStdioKillRecovers(t *testing.T) {
	t.Parallel()
	node := needNode(t)
	h := newHarness(t)
	h.sup.BackoffBase = 200 * time.Millisecond // the production default
	applied := time.Now()
	h.sup.Apply(context.Background(), []mcp.ServerConfig{everythingStdio(node, "everything")})
	h.waitState(t, "everything", 30*time.Second, mcp.StateReady)
	recoverBound := restartBound(time.Since(applied))
	if res := h.call(t, "everything__echo", map[string]any{"message": "before"}); res.IsError {
		t.Fatalf("echo before the kill: %+v", res)
	}
	pid := h.sup.ChildPID("everything")
	if pid == 0 {
		t.Fatal("no child pid")
	}

	// A call in flight when the server dies.
	racing := make(chan tools.Result, 1)
	go func() {
		racing <- h.call(t, "everything__trigger-long-running-operation", map[string]any{"duration": 5, "steps": 5})
	}()
	testkit.Eventually(t, 5*time.Second, "the call to be in the server's hands", func() bool { return h.sup.InFlight("everything") > 0 })

	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	res := <-racing
	wantShape := regexp.MustCompile(`^\{"error":"unavailable","detail":"everything unavailable since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"\}$`)
	if res.Code != tools.CodeUnavailable || !wantShape.MatchString(res.Content) {
		t.Fatalf("racing call = %+v, want the unavailable shape", res)
	}

	// Use the tools as a chat would, until they work again.
	var usable time.Duration
	for {
		res := h.call(t, "everything__echo", map[string]any{"message": "after"})
		if !res.IsError {
			usable = time.Since(killed)
			break
		}
		if res.Code != tools.CodeUnavailable {
			t.Fatalf("call while restarting = %+v, want unavailable (the tools are hidden, not removed)", res)
		}
		if time.Since(killed) > 10*time.Second {
			t.Fatalf("tools not usable 10s after the kill; status %+v", h.status("everything"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("kill to usable again: %s", usable.Round(time.Millisecond))
	if usable > recoverBound {
		t.Errorf("kill to usable took %s, want ≤ %s", usable, recoverBound.Round(time.Millisecond))
	}
	states := h.rec.states("everything")
	i := slices.Index(states, mcp.StateDegraded)
	if i < 0 || !slices.Contains(states[i:], mcp.StateReady) {
		t.Fatalf("states %v, want degraded then ready", states)
	}
	if newPID := h.sup.ChildPID("everything"); newPID == 0 || newPID == pid {
		t.Fatalf("child pid %d after restart (was %d)", newPID, pid)
	}
	if !slices.Contains(h.toolNames(), "everything__get-sum") {
		t.Fatalf("tools after restart: %v", h.toolNames())
	}
}

// TestHangServer: a tool that never answers gets the registry's timeout, a
// sampling request from a server gets a prompt "not supported" answer, isError
// results become structured errors, and huge results are cut.
func TestHangServer(t *testing.T) {
	t.Parallel()
	node := needNode(t)
	h := newHarness(t)
	h.sup.Apply(context.Background(), []mcp.ServerConfig{{
		Name: "hang", Transport: mcp.TransportStdio, Command: node, Args: []string{hangJS()},
		Enabled: true, CallTimeout: tools.MinTimeout,
	}})
	st := h.waitState(t, "hang", 30*time.Second, mcp.StateReady)
	if !slices.Contains(st.Stderr, "hang server ready") {
		t.Errorf("stderr %q lacks the server's start-up line", st.Stderr)
	}

	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		res := h.call(t, "hang__hang", map[string]any{})
		took := time.Since(start)
		if res.Code != tools.CodeTimeout || !strings.HasPrefix(res.Content, `{"error":"timeout","detail":`) {
			t.Fatalf("hang = %+v, want the timeout error", res)
		}
		if took < tools.MinTimeout || took > tools.MinTimeout+2*time.Second {
			t.Fatalf("hang returned after %s, want about %s", took, tools.MinTimeout)
		}
		// The connection survives a timed-out call.
		if st := h.status("hang"); st.State != mcp.StateReady {
			t.Fatalf("state after a timeout: %q", st.State)
		}
	})
	t.Run("sampling not supported", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		res := h.call(t, "hang__ask", map[string]any{"prompt": "hi"})
		if res.IsError || !strings.Contains(res.Content, "sampling") || time.Since(start) > 5*time.Second {
			t.Fatalf("ask = %+v after %s, want the client's error answer, promptly", res, time.Since(start))
		}
		t.Logf("the server was told: %s", res.Content)
	})
	t.Run("isError", func(t *testing.T) {
		t.Parallel()
		res := h.call(t, "hang__fail", map[string]any{})
		if res.Content != `{"error":"execution_failed","detail":"the disk is on fire"}` {
			t.Fatalf("fail = %+v", res)
		}
	})
	t.Run("list_changed", func(t *testing.T) {
		t.Parallel()
		if res := h.call(t, "hang__grow", map[string]any{}); res.Content != "grown" {
			t.Fatalf("grow = %+v", res)
		}
		testkit.Eventually(t, 5*time.Second, "hang__extra to be registered after list_changed", func() bool {
			return slices.Contains(h.toolNames(), "hang__extra")
		})
		if res := h.call(t, "hang__extra", map[string]any{}); res.Content != "extra works" {
			t.Fatalf("extra = %+v", res)
		}
	})
	t.Run("big result cut", func(t *testing.T) {
		t.Parallel()
		res := h.call(t, "hang__big", map[string]any{})
		if res.IsError || len(res.Content) > mcp.MaxResultBytes+100 || !strings.Contains(res.Content, "[result cut: 262144 of 300000 bytes shown]") {
			t.Fatalf("big: error %v, %d bytes, tail %q", res.IsError, len(res.Content), res.Content[max(0, len(res.Content)-80):])
		}
	})
}

func TestExitAtOnceFails(t *testing.T) {
	t.Parallel()
	node := needNode(t)
	h := newHarness(t)
	h.sup.Apply(context.Background(), []mcp.ServerConfig{{
		Name: "boom", Transport: mcp.TransportStdio, Command: node,
		Args:    []string{"-e", "console.error('boom ' + process.env.TOKEN); process.exit(1)"},
		Env:     map[string]string{"TOKEN": "hunter2"},
		Enabled: true,
	}})
	st := h.waitState(t, "boom", 20*time.Second, mcp.StateFailed)
	if !slices.Contains(st.Stderr, "boom REDACTED") {
		t.Fatalf("stderr %q lacks boom (with the secret redacted)", st.Stderr)
	}
	if strings.Contains(st.Error, "hunter2") {
		t.Fatalf("the secret leaked into the error: %q", st.Error)
	}
	if !strings.Contains(st.Error, "exited (exit status 1)") {
		t.Fatalf("error %q does not say the process exited", st.Error)
	}
	t.Logf("failed with: %s", st.Error)
	if states := h.rec.states("boom"); states[0] != mcp.StateConnecting {
		t.Fatalf("states %v, want connecting first", states)
	}
}

func TestMissingCommandFails(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.sup.Apply(context.Background(), []mcp.ServerConfig{{
		Name: "nope", Transport: mcp.TransportStdio, Command: "atrium-no-such-command", Enabled: true,
	}})
	st := h.waitState(t, "nope", 10*time.Second, mcp.StateFailed)
	if !strings.Contains(st.Error, "executable file not found") {
		t.Fatalf("error %q", st.Error)
	}
}

func TestWrongURL(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	start := time.Now()
	h.sup.Apply(context.Background(), []mcp.ServerConfig{{
		Name: "wrong", Transport: mcp.TransportHTTP, URL: "http://127.0.0.1:1/mcp", Enabled: true,
		BearerToken: "sekrit-token",
	}})
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Fatalf("Apply took %s", took)
	}
	st := h.waitState(t, "wrong", 10*time.Second, mcp.StateFailed)
	if !strings.Contains(st.Error, "connection refused") {
		t.Fatalf("error %q does not say why", st.Error)
	}
	t.Logf("failed with: %s", st.Error)
	// It keeps retrying, and Close still returns promptly.
	start = time.Now()
	h.sup.Close()
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Close took %s", took)
	}
}

func TestInvalidConfigIsReported(t *testing.T) {
	h := newHarness(t)
	h.sup.Apply(context.Background(), []mcp.ServerConfig{{Name: "x", Transport: "carrier-pigeon", Enabled: true}})
	st := h.status("x")
	if st.State != mcp.StateFailed || !strings.Contains(st.Error, "transport") {
		t.Fatalf("status %+v", st)
	}
}

// TestTwentyServers: Apply with twenty servers, some unreachable, returns at
// once; the good ones get ready regardless of the bad ones.
func TestTwentyServers(t *testing.T) {
	t.Parallel()
	node := needNode(t)
	h := newHarness(t)
	var cfgs []mcp.ServerConfig
	for i := range 20 {
		name := fmt.Sprintf("s%02d", i)
		switch {
		case i%5 == 0:
			cfgs = append(cfgs, everythingStdio(node, name))
		case i%2 == 0:
			cfgs = append(cfgs, mcp.ServerConfig{Name: name, Transport: mcp.TransportHTTP, URL: "http://127.0.0.1:1/mcp", Enabled: true})
		default: // a black hole: connects hang until the connect timeout
			cfgs = append(cfgs, mcp.ServerConfig{Name: name, Transport: mcp.TransportHTTP, URL: "http://10.255.255.1:9/mcp", Enabled: true})
		}
	}
	start := time.Now()
	h.sup.Apply(context.Background(), cfgs)
	took := time.Since(start)
	t.Logf("Apply with 20 servers took %s", took)
	if took > 100*time.Millisecond {
		t.Fatalf("Apply took %s, want < 100ms", took)
	}
	for i := 0; i < 20; i += 5 {
		name := fmt.Sprintf("s%02d", i)
		h.waitState(t, name, 30*time.Second, mcp.StateReady)
		if res := h.call(t, name+"__echo", map[string]any{"message": strconv.Itoa(i)}); res.Content != "Echo: "+strconv.Itoa(i) {
			t.Fatalf("%s echo: %+v", name, res)
		}
	}
	if got := len(h.sup.Statuses()); got != 20 {
		t.Fatalf("%d statuses, want 20", got)
	}
}

// TestCloseKillsProcessGroup: a child that started a grandchild in its group;
// Close leaves neither behind.
func TestCloseKillsProcessGroup(t *testing.T) {
	t.Parallel()
	node := needNode(t)
	pidFile := filepath.Join(t.TempDir(), "sleep.pid")
	h := newHarness(t)
	h.sup.Apply(context.Background(), []mcp.ServerConfig{{
		Name: "group", Transport: mcp.TransportStdio, Command: "/bin/sh", Enabled: true,
		Args: []string{"-c", `trap "" TERM; sleep 1000 & echo $! > "$PIDFILE"; exec "$NODE" "$HANG"`},
		Env:  map[string]string{"PIDFILE": pidFile, "NODE": node, "HANG": hangJS()},
	}})
	h.waitState(t, "group", 30*time.Second, mcp.StateReady)
	leader := h.sup.ChildPID("group")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	sleeper, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	h.sup.Close()
	t.Logf("Close took %s", time.Since(start))
	waitGone(t, leader, time.Second)
	waitGone(t, sleeper, time.Second) // it ignores SIGTERM: this is the SIGKILL
	if hasPrefixed(h.toolNames(), "group__") {
		t.Fatalf("tools left after Close: %v", h.toolNames())
	}
}

// TestHTTPServerRestart: the remote server goes away and comes back on the
// same address; the health check notices and the supervisor reconnects.
func TestHTTPServerRestart(t *testing.T) {
	t.Parallel()
	node := needNode(t)
	port := freePort(t)
	start := func() func() {
		cmd := execEverything(t, node, "streamableHttp", port)
		return func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}
	}
	stop := start()
	h := newHarness(t)
	h.sup.PingInterval = 100 * time.Millisecond
	h.sup.Apply(context.Background(), []mcp.ServerConfig{{
		Name: "remote", Transport: mcp.TransportHTTP, URL: fmt.Sprintf("http://127.0.0.1:%d/mcp", port), Enabled: true,
	}})
	h.waitState(t, "remote", 30*time.Second, mcp.StateReady)
	stop()
	h.waitState(t, "remote", 10*time.Second, mcp.StateDegraded, mcp.StateFailed)
	if hasPrefixed(h.toolNames(), "remote__") {
		t.Fatalf("tools of a down server still registered: %v", h.toolNames())
	}
	stop = start()
	defer stop()
	h.waitState(t, "remote", 30*time.Second, mcp.StateReady)
	if res := h.call(t, "remote__echo", map[string]any{"message": "back"}); res.Content != "Echo: back" {
		t.Fatalf("echo after restart: %+v", res)
	}
}

func TestStderrIsBounded(t *testing.T) {
	t.Parallel()
	node := needNode(t)
	h := newHarness(t)
	h.sup.Apply(context.Background(), []mcp.ServerConfig{{
		Name: "noisy", Transport: mcp.TransportStdio, Command: node, Enabled: true,
		Args: []string{"-e", "for (let i = 0; i < 300; i++) console.error(i + ' ' + 'y'.repeat(1000)); process.exitCode = 1"},
	}})
	st := h.waitState(t, "noisy", 20*time.Second, mcp.StateFailed)
	if len(st.Stderr) != 200 {
		t.Fatalf("%d stderr lines kept, want 200", len(st.Stderr))
	}
	if last := st.Stderr[len(st.Stderr)-1]; !strings.HasPrefix(last, "299 ") {
		t.Fatalf("last line %.20q, want line 299", last)
	}
	for _, l := range st.Stderr {
		if len(l) > 500+len("…") {
			t.Fatalf("a %d-byte line was kept", len(l))
		}
	}
}

// A secret that straddles the 500-byte cut of a stderr line shows no prefix: lines
// are redacted before they are cut.
func TestStderrRedactsBeforeCut(t *testing.T) {
	t.Parallel()
	node := needNode(t)
	h := newHarness(t)
	const secret = "sk-straddling-secret-0123456789"
	h.sup.Apply(context.Background(), []mcp.ServerConfig{{
		Name: "leaky", Transport: mcp.TransportStdio, Command: node, Enabled: true,
		Env: map[string]string{"API_KEY": secret},
		Args: []string{"-e", `for (const n of [490, 495, 499, 500]) console.error('x'.repeat(n) + process.env.API_KEY + ' tail');
			process.exitCode = 1`},
	}})
	st := h.waitState(t, "leaky", 20*time.Second, mcp.StateFailed)
	lines := 0
	for _, l := range st.Stderr {
		if !strings.HasPrefix(l, "xxxx") {
			continue
		}
		lines++
		if strings.Contains(l, secret[:3]) {
			t.Errorf("a line of %d bytes shows part of the secret: …%q", len(l), l[len(l)-30:])
		}
		if len(l) > 500+len("…") {
			t.Errorf("a %d-byte line was kept", len(l))
		}
	}
	if lines < 4 { // 4 per start; failed starts are retried
		t.Fatalf("%d of 4 lines kept", lines)
	}
}

// TestFilesystemServer runs server-filesystem on a temporary directory: every
// tool's schema must compile, and the deny-list hides the write tools.
func TestFilesystemServer(t *testing.T) {
	t.Parallel()
	node := needNode(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "note.txt"), []byte("hello from the disk"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir, _ = filepath.EvalSymlinks(dir)
	h := newHarness(t)
	h.sup.Apply(context.Background(), []mcp.ServerConfig{{
		Name: "fs", Transport: mcp.TransportStdio, Command: node, Enabled: true,
		Args:      []string{filepath.Join(testdataDir, "node_modules", "@modelcontextprotocol", "server-filesystem", "dist", "index.js"), dir},
		DenyTools: []string{"write_file", "edit_file", "move_file", "create_directory"},
	}})
	st := h.waitState(t, "fs", 30*time.Second, mcp.StateReady)
	names := h.toolNames()
	if len(names) != len(st.Tools) || len(names) < 8 {
		t.Fatalf("registered %v for tools %+v: some schemas did not compile?", names, st.Tools)
	}
	if slices.Contains(names, "fs__write_file") || !slices.Contains(names, "fs__read_text_file") {
		t.Fatalf("deny-list not applied: %v", names)
	}
	res := h.call(t, "fs__read_text_file", map[string]any{"path": filepath.Join(dir, "note.txt")})
	if res.IsError || !strings.Contains(res.Content, "hello from the disk") {
		t.Fatalf("read_text_file = %+v", res)
	}
	res = h.call(t, "fs__read_text_file", map[string]any{"path": "/etc/passwd"})
	if res.Code != tools.CodeExecutionFailed || !strings.Contains(res.Content, "denied") {
		t.Fatalf("reading outside the allowed directory = %+v, want the server's isError", res)
	}
}

// Tool schemas reach validation as the server sent them: a top-level anyOf is
// enforced, and a draft-07 schema with tuple items is registered and enforced too.
func TestToolSchemasKeepDetail(t *testing.T) {
	t.Parallel()
	node := needNode(t)
	h := newHarness(t)
	h.sup.Apply(context.Background(), []mcp.ServerConfig{{
		Name: "hang", Transport: mcp.TransportStdio, Command: node, Args: []string{hangJS()}, Enabled: true,
		Env: map[string]string{"HANG_SCHEMA_TOOLS": "1"},
	}})
	h.waitState(t, "hang", 20*time.Second, mcp.StateReady)
	for _, c := range []struct {
		tool string
		args any
		ok   bool
	}{
		{"hang__either", map[string]any{}, false},
		{"hang__either", map[string]any{"a": "x"}, true},
		{"hang__either", map[string]any{"b": "y"}, true},
		{"hang__pair", map[string]any{"p": []any{"s", 1}}, true},
		{"hang__pair", map[string]any{"p": []any{1, "s"}}, false},
		{"hang__pair", map[string]any{"p": []any{"s", 1, "extra"}}, false},
	} {
		res := h.call(t, c.tool, c.args)
		if res.IsError == c.ok {
			t.Errorf("%s %v: error %v (%s), want ok=%v", c.tool, c.args, res.IsError, res.Content, c.ok)
		}
	}
	if !slices.Contains(h.toolNames(), "hang__pair") {
		t.Fatalf("the draft-07 tool was skipped: %v", h.toolNames())
	}
}
