package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"atrium/internal/llm"
	"atrium/internal/mcp"
	"atrium/internal/testkit"
	"atrium/internal/tools"
)

// testdataDir is testdata/mcp at the repository root.
var testdataDir = func() string {
	d, err := filepath.Abs(filepath.Join("..", "..", "testdata", "mcp"))
	if err != nil {
		panic(err)
	}
	return d
}()

func everythingJS() string {
	return filepath.Join(testdataDir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
}

func hangJS() string { return filepath.Join(testdataDir, "hang.js") }

// needNode returns the path of node, skipping the test when node or the test
// servers are missing — or failing it when E2E_REQUIRED=1.
func needNode(tb testing.TB) string {
	tb.Helper()
	miss := func(reason string) {
		tb.Helper()
		if os.Getenv("E2E_REQUIRED") == "1" {
			tb.Fatalf("E2E_REQUIRED=1 but %s", reason)
		}
		testkit.Skip(tb, reason)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		miss("node is not installed")
	}
	if _, err := os.Stat(everythingJS()); err != nil {
		miss("the MCP test servers are not installed (run: npm ci --prefix testdata/mcp)")
	}
	return node
}

func everythingStdio(node, name string) mcp.ServerConfig {
	return mcp.ServerConfig{
		Name:      name,
		Transport: mcp.TransportStdio,
		Command:   node,
		Args:      []string{everythingJS(), "stdio"},
		Enabled:   true,
	}
}

// startEverythingHTTP runs server-everything's streamable HTTP server on a
// free port and returns its /mcp URL; the server is killed when the test ends.
func startEverythingHTTP(tb testing.TB, node string) string {
	return startEverything(tb, node, "streamableHttp")
}

// startEverythingSSE is startEverythingHTTP for the legacy SSE transport (its /sse URL).
func startEverythingSSE(tb testing.TB, node string) string {
	return startEverything(tb, node, "sse")
}

func startEverything(tb testing.TB, node, transport string) string {
	tb.Helper()
	port := freePort(tb)
	cmd := execEverything(tb, node, transport, port)
	tb.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	path := "/mcp"
	if transport == "sse" {
		path = "/sse"
	}
	return fmt.Sprintf("http://127.0.0.1:%d%s", port, path)
}

// execEverything starts server-everything's HTTP server for transport
// ("streamableHttp" or "sse") on port in its own process group and waits
// until it listens.
func execEverything(tb testing.TB, node, transport string, port int) *exec.Cmd {
	tb.Helper()
	cmd := exec.Command(node, everythingJS(), transport)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), fmt.Sprintf("PORT=%d", port)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return cmd
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
			tb.Fatalf("server-everything did not listen on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// recorder keeps every Status passed to onChange.
type recorder struct {
	mu  sync.Mutex
	all []mcp.Status
}

func (r *recorder) add(st mcp.Status) {
	r.mu.Lock()
	r.all = append(r.all, st)
	r.mu.Unlock()
}

// states returns the sequence of distinct consecutive states of server name.
func (r *recorder) states(name string) []mcp.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []mcp.State
	for _, st := range r.all {
		if st.Name == name && (len(out) == 0 || out[len(out)-1] != st.State) {
			out = append(out, st.State)
		}
	}
	return out
}

// harness is a supervisor with fast timings and its registry.
type harness struct {
	sup *mcp.Supervisor
	reg *tools.Registry
	rec *recorder
	cfg mcp.ServerConfig // what everythingEach applied
}

func newHarness(tb testing.TB) *harness {
	tb.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return newHarnessLog(tb, log)
}

// newHarnessLog is newHarness with the supervisor logging to log.
func newHarnessLog(tb testing.TB, log *slog.Logger) *harness {
	tb.Helper()
	reg := tools.NewRegistry(nil, nil)
	rec := &recorder{}
	sup := mcp.NewSupervisor(reg, log, rec.add)
	sup.BackoffBase = 50 * time.Millisecond
	sup.BackoffMax = 500 * time.Millisecond
	sup.ConnectTimeout = 20 * time.Second
	tb.Cleanup(sup.Close)
	return &harness{sup: sup, reg: reg, rec: rec}
}

func (h *harness) status(name string) mcp.Status {
	for _, st := range h.sup.Statuses() {
		if st.Name == name {
			return st
		}
	}
	return mcp.Status{}
}

// waitState waits until server name is in one of states, and returns its status.
func (h *harness) waitState(tb testing.TB, name string, timeout time.Duration, states ...mcp.State) mcp.Status {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st := h.status(name)
		for _, want := range states {
			if st.State == want {
				return st
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("server %s: state %q (error %q) after %s, want one of %v; stderr: %q", name, st.State, st.Error, timeout, states, st.Stderr)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h *harness) call(tb testing.TB, name string, args any) tools.Result {
	tb.Helper()
	b, err := json.Marshal(args)
	if err != nil {
		tb.Fatal(err)
	}
	return h.reg.Dispatch(context.Background(), "session", 1, llm.ToolCall{ID: "c1", Name: name, Arguments: string(b)})
}

func (h *harness) toolNames() []string {
	var out []string
	for _, t := range h.reg.Enabled() {
		out = append(out, t.Name)
	}
	return out
}

func hasPrefixed(names []string, prefix string) bool {
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}

// processGone reports whether pid has exited (a zombie counts as gone: in a
// container nobody may reap orphans).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z'
	}
	return false
}

func waitGone(tb testing.TB, pid int, timeout time.Duration) {
	tb.Helper()
	testkit.Eventually(tb, timeout, fmt.Sprintf("process %d to be gone after it was killed", pid), func() bool { return processGone(pid) })
}

// restartBound is how long recovering from a killed stdio server may take: 3 s (the
// documented figure, on a quiet machine), or twice the first start where the machine
// is so loaded that starting Node took longer (a restart is a start, plus the backoff).
func restartBound(firstStart time.Duration) time.Duration {
	return max(3*time.Second, 2*firstStart)
}
