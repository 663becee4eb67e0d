package main

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"atrium/internal/testkit"
)

// TestCrashLeavesNoMCPChildren: after kill -9 of Atrium, a stdio server that would
// outlive its closed stdin (and the process it started) must not keep running. The
// kernel ends the direct child (parent-death signal); the restarted Atrium kills the
// rest of its process group, which the dead one recorded in its data directory.
func TestCrashLeavesNoMCPChildren(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	node, script := everythingServer(t)
	bin := buildBinary(t)
	data := filepath.Join(t.TempDir(), "data")
	first := runBinary(t, bin, data)

	h := newHTTPClient(t, first.url)
	h.setupAdmin()
	// sh leads the group: it runs the server, then sleeps on after the server has gone,
	// and a background sleep stands for a grandchild.
	cmd := "sleep 300 & " + node + " " + script + " stdio; sleep 300"
	servers, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{
		"stubborn": map[string]any{"command": "sh", "args": []string{"-c", cmd}}}})
	tok := h.csrf("/settings/mcp")
	if resp, body := h.post("/settings/mcp/import", url.Values{"_csrf": {tok}, "json": {string(servers)}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("import: %d %s", resp.StatusCode, body)
	}
	pgid := recordedGroup(t, data)
	testkit.Eventually(t, 10*time.Second, "the grandchild to start", func() bool { return len(groupPIDs(pgid)) >= 2 })

	first.kill(t)
	testkit.Eventually(t, 5*time.Second, "the kernel to end the direct child", func() bool {
		_, err := os.Stat("/proc/" + strconv.Itoa(pgid))
		return err != nil
	})
	if len(groupPIDs(pgid)) == 0 {
		t.Fatal("the grandchild did not outlive the kill: the test shows nothing")
	}

	second := runBinary(t, bin, data)
	testkit.Eventually(t, 10*time.Second, "the restart to kill the orphaned group", func() bool { return len(groupPIDs(pgid)) == 0 })

	// A clean stop ends its own children too.
	again := recordedGroup(t, data)
	second.stop(t)
	testkit.Eventually(t, 5*time.Second, "a clean stop to end its children", func() bool { return len(groupPIDs(again)) == 0 })
}

// recordedGroup waits for the one process group an instance recorded and returns it.
func recordedGroup(t *testing.T, data string) int {
	t.Helper()
	var pgid int
	testkit.Eventually(t, 10*time.Second, "a recorded stdio child", func() bool {
		files, _ := filepath.Glob(filepath.Join(data, "instances", "*.children"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if len(lines) == 2 {
				if n, err := strconv.Atoi(strings.Fields(lines[1])[0]); err == nil {
					pgid = n
					return true
				}
			}
		}
		return false
	})
	return pgid
}

// groupPIDs lists the live processes of group pgid (zombies excluded).
func groupPIDs(pgid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err != nil || g != pgid {
			continue
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if i := strings.LastIndexByte(string(st), ')'); i > 0 && strings.HasPrefix(string(st[i+1:]), " Z") {
				continue
			}
		}
		out = append(out, pid)
	}
	return out
}
