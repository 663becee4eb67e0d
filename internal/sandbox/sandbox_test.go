package sandbox_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"atrium/internal/sandbox"
	"atrium/internal/testkit"
)

// TestMain lets the test binary stand in for atrium: started as "sandbox-exec" it runs Main.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == sandbox.Subcommand {
		os.Exit(sandbox.Main(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == denyAllProbe {
		os.Exit(probeDenyAll(os.Args[2], os.Args[3], os.Args[4]))
	}
	os.Exit(m.Run())
}

const denyAllProbe = "deny-all-probe"

// probeDenyAll restricts itself with DenyAll, then tries to create a file in dir,
// read file and connect to addr, and prints what each did.
func probeDenyAll(dir, file, addr string) int {
	if _, err := sandbox.DenyAll(); err != nil {
		fmt.Println("deny-all:", err)
		return 1
	}
	if f, err := os.Create(filepath.Join(dir, "written")); err == nil {
		f.Close()
		fmt.Println("create: allowed")
	}
	if _, err := os.ReadFile(file); err == nil {
		fmt.Println("read: allowed")
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		fmt.Println("connect: allowed")
	}
	fmt.Println("done")
	return 0
}

// TestDenyAll: after DenyAll a process (the PDF reader) can create no file, open no
// file for reading and, with Landlock ABI 4, connect nowhere over TCP.
func TestDenyAll(t *testing.T) {
	needLandlock(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "secret")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	self, _ := os.Executable()
	out, err := exec.Command(self, denyAllProbe, dir, file, ln.Addr().String()).CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "done\n") {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	for _, what := range []string{"create", "read"} {
		if strings.Contains(string(out), what+": allowed") {
			t.Errorf("%s was allowed after DenyAll", what)
		}
	}
	if sandbox.Check().NetworkRestricted() && strings.Contains(string(out), "connect: allowed") {
		t.Error("a TCP connect was allowed after DenyAll")
	}
	if _, err := os.Stat(filepath.Join(dir, "written")); err == nil {
		t.Error("the file was created")
	}
}

func needLandlock(t *testing.T) {
	t.Helper()
	if st := sandbox.Check(); !st.Available() {
		testkit.Skip(t, "the kernel lacks Landlock: "+st.Err.Error())
	}
}

// run starts the test binary as sandbox-exec with p around argv and returns its output.
func run(t *testing.T, p sandbox.Policy, argv ...string) (string, error) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	name, args := sandbox.Args(self, p, argv[0], argv[1:])
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

func TestArgsRoundTrip(t *testing.T) {
	name, args := sandbox.Args("/opt/atrium", sandbox.Policy{ReadOnly: []string{"/a"}, ReadWrite: []string{"/b", "/c"}, Network: true},
		"node", []string{"--ro", "x"})
	want := []string{"sandbox-exec", "--ro", "/a", "--rw", "/b", "--rw", "/c", "--net", "--", "node", "--ro", "x"}
	if name != "/opt/atrium" || !slices.Equal(args, want) {
		t.Fatalf("Args = %q %q, want %q", name, args, want)
	}
}

func TestCheckPath(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"/srv/data", ""},
		{"/", ""},
		{"", "empty"},
		{"srv", "not absolute"},
		{"/srv/../etc", `write it as "/etc"`},
		{"/srv/", `write it as "/srv"`},
		{"/srv\x00x", "NUL"},
		{"/srv\nx", "line break"},
	} {
		err := sandbox.CheckPath(tc.path)
		if tc.want == "" {
			if err != nil {
				t.Errorf("CheckPath(%q) = %v, want nil", tc.path, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckPath(%q) = %v, want an error containing %q", tc.path, err, tc.want)
		}
	}
}

func TestMainRejectsBadArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--ro"}, "--ro needs a path"},
		{[]string{"--ro", "rel", "--", "true"}, "not absolute"},
		{[]string{"--bogus", "--", "true"}, `unknown argument "--bogus"`},
		{[]string{"--ro", "/usr"}, "no command"},
		{[]string{"--"}, "no command after --"},
		{[]string{"--", "atrium-no-such-command"}, "executable file not found"},
	} {
		self, _ := os.Executable()
		out, err := exec.Command(self, append([]string{sandbox.Subcommand}, tc.args...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("sandbox-exec %q: err %v, output %q; want a failure saying %q", tc.args, err, out, tc.want)
		}
	}
}

// TestSandboxLimitsFiles runs cat under the sandbox: it reads a file under a read-only
// path, cannot read one outside, cannot write under the read-only path and can write
// under the read-write one.
func TestSandboxLimitsFiles(t *testing.T) {
	needLandlock(t)
	inside, outside, writable := t.TempDir(), t.TempDir(), t.TempDir()
	in, out := filepath.Join(inside, "in.txt"), filepath.Join(outside, "out.txt")
	os.WriteFile(in, []byte("inside-content"), 0o600)
	os.WriteFile(out, []byte("outside-content"), 0o600)
	p := sandbox.Policy{ReadOnly: []string{inside}, ReadWrite: []string{writable}}

	if got, err := run(t, p, "cat", in); err != nil || got != "inside-content" {
		t.Errorf("cat inside: %q, %v; want the content", got, err)
	}
	got, err := run(t, p, "cat", out)
	if err == nil || strings.Contains(got, "outside-content") || !strings.Contains(got, "Permission denied") {
		t.Errorf("cat outside: %q, %v; want permission denied", got, err)
	}
	if got, err := run(t, p, "sh", "-c", "echo x > "+filepath.Join(inside, "new")); err == nil {
		t.Errorf("write under a read-only path succeeded: %q", got)
	}
	if got, err := run(t, p, "sh", "-c", "echo x > "+filepath.Join(writable, "new")+" && mkdir "+filepath.Join(writable, "d")+
		" && mv "+filepath.Join(writable, "new")+" "+filepath.Join(writable, "d", "moved")); err != nil {
		t.Errorf("write and move under the read-write path: %q, %v", got, err)
	}
	// Without the sandbox the same read works: the denial is the sandbox's doing.
	if b, err := exec.Command("cat", out).Output(); err != nil || string(b) != "outside-content" {
		t.Fatalf("cat without the sandbox: %q, %v", b, err)
	}
}

func TestStatusLine(t *testing.T) {
	if got := (sandbox.Status{}).String(); got != "not sandboxed: kernel lacks Landlock" {
		t.Errorf("no Landlock: %q", got)
	}
	if got := (sandbox.Status{ABI: 7}).Describe(sandbox.Policy{}); got != "sandboxed (Landlock ABI 7)" {
		t.Errorf("ABI 7: %q", got)
	}
	if got := (sandbox.Status{ABI: 3}).Describe(sandbox.Policy{}); !strings.Contains(got, "network not restricted") {
		t.Errorf("ABI 3 without network: %q", got)
	}
	if got := (sandbox.Status{ABI: 3}).Describe(sandbox.Policy{Network: true}); got != "sandboxed (Landlock ABI 3)" {
		t.Errorf("ABI 3 with network: %q", got)
	}
}
