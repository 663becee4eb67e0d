package main

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkColdStart measures the release binary (CGO_ENABLED=0, -trimpath, -s -w):
// time from exec to the first 200 from /readyz on a fresh data directory (ms-to-ready),
// resident memory of an instance idle for a second (MB-rss-idle, MiB) and the size of
// the binary (MB-binary, MiB). Results: docs/benchmarks.md.
func BenchmarkColdStart(b *testing.B) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		b.Skip("go is not on PATH: cannot build the binary")
	}
	bin := filepath.Join(b.TempDir(), "atrium")
	build := exec.Command(goTool, "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		b.Fatal(err)
	}

	var total time.Duration
	b.ResetTimer()
	for range b.N {
		inst, ready := startBinary(b, bin)
		total += ready
		inst.stop(b)
	}
	b.StopTimer()

	inst, _ := startBinary(b, bin)
	time.Sleep(time.Second)
	rss := vmRSS(b, inst.cmd.Process.Pid)
	inst.stop(b)

	b.ReportMetric(float64(total)/float64(time.Millisecond)/float64(b.N), "ms-to-ready")
	b.ReportMetric(float64(rss)/(1<<20), "MB-rss-idle")
	b.ReportMetric(float64(fi.Size())/(1<<20), "MB-binary")
	b.ReportMetric(0, "ns/op") // ms-to-ready says it; ns/op would count the shutdown too
}

type instance struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
}

// startBinary runs bin on a free port with a fresh data directory and polls /readyz
// every 2 ms; it returns once that answers 200, and how long that took from exec.
func startBinary(b *testing.B, bin string) (*instance, time.Duration) {
	b.Helper()
	addr := freeAddr(b)
	var stderr bytes.Buffer
	cmd := exec.Command(bin)
	cmd.Env = []string{"ATRIUM_ADDR=" + addr, "ATRIUM_DATA=" + filepath.Join(b.TempDir(), "data"),
		"ATRIUM_LOG_LEVEL=warn", "HOME=" + os.Getenv("HOME"), "PATH=" + os.Getenv("PATH")}
	cmd.Stderr = &stderr
	client := &http.Client{Timeout: time.Second}
	url := "http://" + addr + "/readyz"

	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatalf("start: %v", err)
	}
	inst := &instance{cmd: cmd, stderr: &stderr}
	for {
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return inst, time.Since(start)
			}
		}
		if time.Since(start) > 10*time.Second {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			b.Fatalf("not ready after 10s; stderr:\n%s", stderr.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// stop sends SIGTERM and fails unless the process exits 0 within 10 s.
func (i *instance) stop(b *testing.B) {
	b.Helper()
	if err := i.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		b.Fatalf("SIGTERM: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- i.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			b.Fatalf("exit after SIGTERM: %v; stderr:\n%s", err, i.stderr.String())
		}
	case <-time.After(10 * time.Second):
		_ = i.cmd.Process.Kill()
		b.Fatalf("no exit within 10s of SIGTERM")
	}
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(b *testing.B) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// vmRSS returns a process's resident set size from /proc/<pid>/status, in bytes.
func vmRSS(b *testing.B, pid int) int64 {
	b.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatalf("read status: %v", err)
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest) // "12345 kB"
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil || len(f) != 2 || f[1] != "kB" {
				b.Fatalf("VmRSS line %q", line)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmRSS in /proc/<pid>/status")
	return 0
}
