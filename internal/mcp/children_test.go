package mcp

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"atrium/internal/testkit"
)

// A recorded group is killed only while it is still the one recorded: a leader with
// another start time is a process that got the number later and is left alone.
func TestReapChildFile(t *testing.T) {
	if bootID() == "" {
		t.Skip("no /proc boot id here")
	}
	start := func() *exec.Cmd {
		cmd := exec.Command("sh", "-c", "sleep 60 & sleep 60")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
		return cmd
	}
	ours, stranger := start(), start()
	path := filepath.Join(t.TempDir(), "x.children")
	f := NewChildFile(path)
	f.started(ours.Process.Pid)
	f.started(stranger.Process.Pid)
	f.mu.Lock()
	f.groups[stranger.Process.Pid]++ // as if the number had been reused since
	f.write()
	f.mu.Unlock()

	waited := make(chan error, 1)
	go func() { waited <- ours.Wait() }()
	n, err := ReapChildFile(path, slog.New(slog.DiscardHandler))
	if err != nil || n != 1 {
		t.Fatalf("reaped %d, %v; want 1", n, err)
	}
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("the recorded group still runs")
	}
	testkit.Eventually(t, 5*time.Second, "the whole group to end", func() bool {
		n, _ := groupMembers(ours.Process.Pid)
		return n == 0
	})
	if err := syscall.Kill(stranger.Process.Pid, 0); err != nil {
		t.Fatalf("the stranger was killed: %v", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the file is still there: %v", err)
	}
	// Another boot's file kills nothing.
	os.WriteFile(path, fmt.Appendf(nil, "boot other\n%d 0\n", stranger.Process.Pid), 0o600)
	if n, _ := ReapChildFile(path, slog.New(slog.DiscardHandler)); n != 0 {
		t.Fatalf("reaped %d groups of another boot", n)
	}
}
