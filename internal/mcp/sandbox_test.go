package mcp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"atrium/internal/errs"
	"atrium/internal/mcp"
	"atrium/internal/sandbox"
	"atrium/internal/store"
	"atrium/internal/testkit"
)

func needLandlock(tb testing.TB) {
	tb.Helper()
	if st := sandbox.Check(); !st.Available() {
		testkit.Skip(tb, "the kernel lacks Landlock: "+st.Err.Error())
	}
}

func filesystemJS() string {
	return filepath.Join(testdataDir, "node_modules", "@modelcontextprotocol", "server-filesystem", "dist", "index.js")
}

// sandboxHarness is a harness whose supervisor runs sandboxed servers through this test
// binary (TestMain hands "sandbox-exec" to sandbox.Main) with private homes in a temp dir.
func sandboxHarness(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h.sup.SelfExe, h.sup.SandboxDir = self, t.TempDir()
	return h
}

// TestSandboxFilesystemServer gives server-filesystem "/" as its allowed root: under the
// sandbox it reads a file in the configured read paths and cannot read one outside, and
// the same server without the sandbox reads both (so the denial is the sandbox's).
func TestSandboxFilesystemServer(t *testing.T) {
	node := needNode(t)
	needLandlock(t)
	inside, outside := t.TempDir(), t.TempDir()
	in, out := filepath.Join(inside, "in.txt"), filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(in, []byte("inside-content-42"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, []byte("outside-secret-17"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := sandboxHarness(t)
	fs := mcp.ServerConfig{Name: "fs", Transport: mcp.TransportStdio, Command: node, Args: []string{filesystemJS(), "/"}, Enabled: true,
		Sandbox: true, ReadPaths: []string{filepath.Join(testdataDir, "node_modules"), inside}}
	open := fs
	open.Name, open.Sandbox = "open", false
	h.sup.Apply(context.Background(), []mcp.ServerConfig{fs, open})
	h.waitState(t, "fs", 30*time.Second, mcp.StateReady)
	h.waitState(t, "open", 30*time.Second, mcp.StateReady)

	if res := h.call(t, "fs__read_text_file", map[string]string{"path": in}); res.IsError || !strings.Contains(res.Content, "inside-content-42") {
		t.Errorf("sandboxed read of a file inside the read paths: %+v", res)
	}
	res := h.call(t, "fs__read_text_file", map[string]string{"path": out})
	if !res.IsError || strings.Contains(res.Content, "outside-secret-17") {
		t.Errorf("sandboxed read of a file outside the read paths: %+v, want an error without the content", res)
	}
	if !strings.Contains(res.Content, "EACCES") && !strings.Contains(res.Content, "denied") {
		t.Errorf("the error does not say the access was denied: %q", res.Content)
	}
	if res := h.call(t, "fs__write_file", map[string]string{"path": filepath.Join(inside, "new.txt"), "content": "x"}); !res.IsError {
		t.Errorf("sandboxed write under a read-only path succeeded: %+v", res)
	}
	if _, err := os.Stat(filepath.Join(inside, "new.txt")); err == nil {
		t.Error("the sandboxed server created a file under a read-only path")
	}
	if res := h.call(t, "open__read_text_file", map[string]string{"path": out}); res.IsError || !strings.Contains(res.Content, "outside-secret-17") {
		t.Errorf("unsandboxed read of the same file: %+v", res)
	}
}

// TestSandboxWritePaths: a sandboxed server may write under its write paths.
func TestSandboxWritePaths(t *testing.T) {
	node := needNode(t)
	needLandlock(t)
	work := t.TempDir()
	h := sandboxHarness(t)
	fs := mcp.ServerConfig{Name: "fs", Transport: mcp.TransportStdio, Command: node, Args: []string{filesystemJS(), work}, Enabled: true,
		Sandbox: true, ReadPaths: []string{filepath.Join(testdataDir, "node_modules")}, WritePaths: []string{work}}
	h.sup.Apply(context.Background(), []mcp.ServerConfig{fs})
	h.waitState(t, "fs", 30*time.Second, mcp.StateReady)
	target := filepath.Join(work, "made.txt")
	if res := h.call(t, "fs__write_file", map[string]string{"path": target, "content": "written"}); res.IsError {
		t.Fatalf("write under a write path: %+v", res)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "written" {
		t.Errorf("the file: %q, %v", b, err)
	}
}

// TestSandboxNetwork: a sandboxed server without network cannot reach a local HTTP
// listener; with Network it can, and so can an unsandboxed one.
func TestSandboxNetwork(t *testing.T) {
	node := needNode(t)
	needLandlock(t)
	if !sandbox.Check().NetworkRestricted() {
		testkit.Skip(t, "the kernel's Landlock cannot restrict TCP (needs ABI 4)")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello-from-listener") }))
	t.Cleanup(srv.Close)
	h := sandboxHarness(t)
	base := mcp.ServerConfig{Transport: mcp.TransportStdio, Command: node, Args: []string{filepath.Join(testdataDir, "fetch.js")}, Enabled: true,
		Sandbox: true, ReadPaths: []string{testdataDir}}
	offline, online, open := base, base, base
	offline.Name = "offline"
	online.Name, online.Network = "online", true
	open.Name, open.Sandbox = "open", false
	h.sup.Apply(context.Background(), []mcp.ServerConfig{offline, online, open})
	for _, name := range []string{"offline", "online", "open"} {
		h.waitState(t, name, 30*time.Second, mcp.StateReady)
	}
	args := map[string]string{"url": srv.URL}
	if res := h.call(t, "offline__fetch", args); !res.IsError || strings.Contains(res.Content, "hello-from-listener") {
		t.Errorf("a sandboxed server without network reached the listener: %+v", res)
	} else if !strings.Contains(res.Content, "EACCES") {
		t.Errorf("the failure is not a denied connect: %q", res.Content)
	}
	for _, name := range []string{"online", "open"} {
		if res := h.call(t, name+"__fetch", args); res.IsError || !strings.Contains(res.Content, "status 200: hello-from-listener") {
			t.Errorf("%s: %+v, want the listener's answer", name, res)
		}
	}
}

// TestSandboxHome: a sandboxed server's HOME and TMPDIR are its private, writable
// directory (npx keeps its cache under HOME); a configured HOME wins. The probe is
// written aside and renamed so that the test never reads a file created but not yet filled.
func TestSandboxHome(t *testing.T) {
	node := needNode(t)
	needLandlock(t)
	h := sandboxHarness(t)
	script := `process.stdin.resume(); const fs = require("node:fs"); ` +
		`fs.writeFileSync(process.env.HOME + "/probe.part", process.env.TMPDIR); ` +
		`fs.renameSync(process.env.HOME + "/probe.part", process.env.HOME + "/probe"); console.error("wrote probe"); process.exit(3)`
	cfg := mcp.ServerConfig{Name: "home", Transport: mcp.TransportStdio, Command: node, Args: []string{"-e", script}, Enabled: true, Sandbox: true}
	ownHome := t.TempDir()
	own := cfg
	own.Name, own.Env, own.WritePaths = "own", map[string]string{"HOME": ownHome}, []string{ownHome}
	h.sup.Apply(context.Background(), []mcp.ServerConfig{cfg, own})
	for _, probe := range []string{filepath.Join(h.sup.SandboxDir, "home", "probe"), filepath.Join(ownHome, "probe")} {
		testkit.Eventually(t, 20*time.Second, "the server to write "+probe, func() bool {
			_, err := os.Stat(probe)
			return err == nil
		})
	}
	if b, _ := os.ReadFile(filepath.Join(h.sup.SandboxDir, "home", "probe")); string(b) != filepath.Join(h.sup.SandboxDir, "home", "tmp") {
		t.Errorf("TMPDIR = %q", b)
	}
}

func TestSandboxConfigValidate(t *testing.T) {
	stdio := mcp.ServerConfig{Name: "s", Transport: mcp.TransportStdio, Command: "node", Sandbox: true}
	for _, tc := range []struct {
		name string
		edit func(*mcp.ServerConfig)
		want string // "" = valid
	}{
		{"plain", func(c *mcp.ServerConfig) { c.ReadPaths, c.WritePaths = []string{"/srv"}, []string{"/var/lib/x"} }, ""},
		{"relative", func(c *mcp.ServerConfig) { c.ReadPaths = []string{"srv/data"} }, "not absolute"},
		{"unclean", func(c *mcp.ServerConfig) { c.WritePaths = []string{"/srv/../etc"} }, `write it as "/etc"`},
		{"nul", func(c *mcp.ServerConfig) { c.ReadPaths = []string{"/srv\x00"} }, "NUL"},
		{"empty", func(c *mcp.ServerConfig) { c.ReadPaths = []string{""} }, "empty"},
		{"relative dir", func(c *mcp.ServerConfig) { c.Dir = "work" }, "working directory"},
		{"remote", func(c *mcp.ServerConfig) {
			c.Transport, c.Command, c.URL = mcp.TransportHTTP, "", "https://example.com/mcp"
		}, "only a local (stdio) server can be sandboxed"},
	} {
		c := stdio
		tc.edit(&c)
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (errs.Code(err) != errs.Invalid || !strings.Contains(errs.Message(err), tc.want)):
			t.Errorf("%s: %v, want invalid with %q", tc.name, err, tc.want)
		}
	}
}

// TestSandboxSettingsPersist: the sandbox fields survive the store and the mcpServers
// JSON, and a server stored before they existed is not sandboxed.
func TestSandboxSettingsPersist(t *testing.T) {
	ctx := context.Background()
	cs, db := newConfigStore(t)
	cfg := mcp.ServerConfig{Name: "fs", Transport: mcp.TransportStdio, Command: "npx", Args: []string{"-y", "x"}, Enabled: true,
		Sandbox: true, ReadPaths: []string{"/srv/ro"}, WritePaths: []string{"/srv/rw"}, Network: true}
	if err := cs.Save(ctx, &cfg); err != nil {
		t.Fatal(err)
	}
	old := store.MCPServer{Name: "old", Transport: store.MCPStdio, Config: []byte(`{"command":"node","args":["s.js"]}`)}
	if err := db.SaveMCPServer(ctx, &old, nil); err != nil {
		t.Fatal(err)
	}
	rows, err := db.ListMCPServers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		got, err := cs.Config(ctx, row)
		if err != nil {
			t.Fatal(err)
		}
		switch row.Name {
		case "fs":
			if !got.Sandbox || !got.Network || !reflect.DeepEqual(got.ReadPaths, cfg.ReadPaths) || !reflect.DeepEqual(got.WritePaths, cfg.WritePaths) {
				t.Errorf("stored and read back: %+v", got)
			}
		case "old":
			if got.Sandbox || got.Network || got.ReadPaths != nil {
				t.Errorf("a server saved before the sandbox: %+v, want it off", got)
			}
		}
	}

	out, err := mcp.ExportServersJSON([]mcp.ServerConfig{cfg}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"sandbox": {`) || !strings.Contains(string(out), `"/srv/rw"`) {
		t.Errorf("export:\n%s", out)
	}
	back, err := mcp.ParseServersJSON(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != 1 || !back[0].Sandbox || !back[0].Network || !reflect.DeepEqual(back[0].ReadPaths, cfg.ReadPaths) || !reflect.DeepEqual(back[0].WritePaths, cfg.WritePaths) {
		t.Errorf("import of the export: %+v", back)
	}

	for in, want := range map[string]string{
		`{"mcpServers": {"a": {"command": "x", "sandbox": true}}}`:                                    `field "sandbox"`,
		`{"mcpServers": {"a": {"command": "x", "sandbox": {"enabled": true, "readPaths": ["rel"]}}}}`: "not absolute",
		`{"mcpServers": {"a": {"url": "https://e.example/mcp", "sandbox": {"enabled": true}}}}`:       "only a local (stdio) server",
	} {
		if _, err := mcp.ParseServersJSON([]byte(in)); errs.Code(err) != errs.Invalid || !strings.Contains(errs.Message(err), want) {
			t.Errorf("import %s: %v, want invalid with %q", in, err, want)
		}
	}
}

// BenchmarkSandboxStart measures Apply → ready for server-filesystem over stdio, with
// and without the sandbox (the sandbox adds one exec of the wrapper and the Landlock
// set-up). Each iteration starts a fresh server and stops it.
//
//	go test -run '^$' -bench SandboxStart -benchtime 5x ./internal/mcp
func BenchmarkSandboxStart(b *testing.B) {
	node := needNode(b)
	needLandlock(b)
	for _, sandboxed := range []bool{false, true} {
		name := "plain"
		if sandboxed {
			name = "sandboxed"
		}
		b.Run(name, func(b *testing.B) {
			h := newHarness(b)
			self, err := os.Executable()
			if err != nil {
				b.Fatal(err)
			}
			h.sup.SelfExe, h.sup.SandboxDir = self, b.TempDir()
			root := b.TempDir()
			cfg := mcp.ServerConfig{Name: "fs", Transport: mcp.TransportStdio, Command: node, Args: []string{filesystemJS(), root}, Enabled: true,
				Sandbox: sandboxed, ReadPaths: []string{filepath.Join(testdataDir, "node_modules"), root}}
			for b.Loop() {
				h.sup.Apply(context.Background(), []mcp.ServerConfig{cfg})
				h.waitState(b, "fs", 30*time.Second, mcp.StateReady)
				b.StopTimer()
				h.sup.Apply(context.Background(), nil)
				b.StartTimer()
			}
		})
	}
}
