package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"atrium/internal/sandbox"
	"atrium/internal/testkit"
)

// TestSandboxExecSubcommand runs the built binary as `atrium sandbox-exec`, as the MCP
// supervisor does: main hands it to the sandbox before anything else, so a file under
// --ro is readable and one outside is not.
func TestSandboxExecSubcommand(t *testing.T) {
	if st := sandbox.Check(); !st.Available() {
		testkit.Skip(t, "the kernel lacks Landlock: "+st.Err.Error())
	}
	bin := buildBinary(t)
	inside, outside := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(inside, "in"), []byte("inside-ok"), 0o600)
	os.WriteFile(filepath.Join(outside, "out"), []byte("outside-secret"), 0o600)
	out, err := exec.Command(bin, "sandbox-exec", "--ro", inside, "--", "cat", filepath.Join(inside, "in")).CombinedOutput()
	if err != nil || string(out) != "inside-ok" {
		t.Errorf("read inside: %q, %v", out, err)
	}
	out, err = exec.Command(bin, "sandbox-exec", "--ro", inside, "--", "cat", filepath.Join(outside, "out")).CombinedOutput()
	if err == nil || strings.Contains(string(out), "outside-secret") {
		t.Errorf("read outside: %q, %v; want a denial", out, err)
	}
	out, err = exec.Command(bin, "sandbox-exec", "--ro").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--ro needs a path") {
		t.Errorf("bad arguments: %q, %v", out, err)
	}
}
