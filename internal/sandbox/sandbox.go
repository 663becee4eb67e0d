// Package sandbox restricts a local MCP server with Linux Landlock. Atrium starts the
// server through itself ("atrium sandbox-exec --ro P --rw P [--net] -- cmd args…"):
// Main applies the policy to its own process, then execs the server, which inherits the
// restriction and cannot shed it, nor can anything it starts.
//
// Landlock limits which files the process may open, run and change, and (ABI ≥ 4) TCP
// connect and bind. It does not limit CPU, memory, UDP (before ABI 10) or files opened
// before the restriction. On a kernel without Landlock Main runs the server unrestricted
// and says so on stderr; Check reports it for the settings page.
package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// Subcommand is the first argument that makes atrium run Main.
const Subcommand = "sandbox-exec"

// netABI is the first Landlock ABI that can deny TCP connect and bind.
const netABI = 4

// Policy is what a sandboxed server may touch besides SystemReadOnly: files under
// ReadOnly it may read and run, files under ReadWrite it may also create, change and
// delete; Network lets it open TCP connections and listen.
type Policy struct {
	ReadOnly  []string
	ReadWrite []string
	Network   bool
}

// SystemReadOnly are the directories and files a Node or Python server needs to start:
// libraries, interpreters, /etc (certificates, resolv.conf, passwd), the process's own
// /proc entry and a few global /proc files. Missing ones are skipped.
var SystemReadOnly = []string{
	"/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/opt",
	"/proc/self", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/loadavg",
	"/proc/version", "/proc/sys/kernel", "/proc/sys/vm/overcommit_memory",
	"/sys/fs/cgroup", "/sys/devices/system/cpu",
	"/dev/urandom", "/dev/random",
}

// systemReadWrite are device files every program may write to.
var systemReadWrite = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/tty"}

// Args returns the command line that runs cmd with args under p: self (Atrium's
// executable) with the sandbox-exec subcommand.
func Args(self string, p Policy, cmd string, args []string) (string, []string) {
	out := []string{Subcommand}
	for _, d := range p.ReadOnly {
		out = append(out, "--ro", d)
	}
	for _, d := range p.ReadWrite {
		out = append(out, "--rw", d)
	}
	if p.Network {
		out = append(out, "--net")
	}
	out = append(out, "--", cmd)
	return self, append(out, args...)
}

// parse reads the arguments after the subcommand.
func parse(args []string) (Policy, []string, error) {
	var p Policy
	for i := 0; i < len(args); i++ {
		switch a := args[i]; a {
		case "--ro", "--rw":
			if i+1 >= len(args) {
				return p, nil, fmt.Errorf("%s needs a path", a)
			}
			i++
			if err := CheckPath(args[i]); err != nil {
				return p, nil, err
			}
			if a == "--ro" {
				p.ReadOnly = append(p.ReadOnly, args[i])
			} else {
				p.ReadWrite = append(p.ReadWrite, args[i])
			}
		case "--net":
			p.Network = true
		case "--":
			if i+1 >= len(args) || args[i+1] == "" {
				return p, nil, errors.New("no command after --")
			}
			return p, args[i+1:], nil
		default:
			return p, nil, fmt.Errorf("unknown argument %q (usage: sandbox-exec [--ro PATH] [--rw PATH] [--net] -- COMMAND ARGS…)", a)
		}
	}
	return p, nil, errors.New("no command (usage: sandbox-exec [--ro PATH] [--rw PATH] [--net] -- COMMAND ARGS…)")
}

// CheckPath rejects a path the sandbox cannot take as written: it must be absolute and
// clean (no "..", no trailing slash) and free of NUL and line breaks.
func CheckPath(p string) error {
	switch {
	case p == "":
		return errors.New("a sandbox path is empty")
	case strings.ContainsAny(p, "\x00\r\n"):
		return fmt.Errorf("the sandbox path %q contains a NUL or a line break", p)
	case !filepath.IsAbs(p):
		return fmt.Errorf("the sandbox path %q is not absolute (it must start with /)", p)
	case filepath.Clean(p) != p:
		return fmt.Errorf("the sandbox path %q is not clean; write it as %q", p, filepath.Clean(p))
	}
	return nil
}

// Main runs the sandbox-exec subcommand: restrict this process to the policy in args,
// then replace it with the command. It returns only on failure, with the exit status
// (2 for bad arguments, 126 when the restriction or the exec fails, 127 for a missing
// command), after saying why on stderr.
func Main(args []string) int {
	p, argv, err := parse(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "atrium sandbox-exec:", err)
		return 2
	}
	path, err := exec.LookPath(argv[0]) // before the restriction: PATH may name unreadable dirs
	if err != nil {
		fmt.Fprintln(os.Stderr, "atrium sandbox-exec:", err)
		return 127
	}
	if path, err = filepath.Abs(path); err != nil {
		fmt.Fprintln(os.Stderr, "atrium sandbox-exec:", err)
		return 127
	}
	st := Check()
	if !st.Available() {
		fmt.Fprintln(os.Stderr, "atrium sandbox-exec: "+st.String()+"; running the server unrestricted")
	} else if err := restrict(p, path, st.ABI); err != nil {
		fmt.Fprintln(os.Stderr, "atrium sandbox-exec: restrict:", err)
		return 126
	}
	err = syscall.Exec(path, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "atrium sandbox-exec: run %s: %v\n", path, err)
	return 126
}

// restrict applies p to this process and every thread of it. The command's own
// directory is readable, so that a server installed outside the system directories can
// at least start. A configured path that does not exist is an error; a missing system
// one is skipped.
func restrict(p Policy, command string, abi int) error {
	cfg := landlock.V11
	if p.Network {
		cfg.HandledAccessNet = 0 // do not handle TCP (or UDP): everything stays allowed
	}
	rwDirs := landlock.RWDirs
	if abi >= 2 {
		// Moving a file between directories (npm's cache does) needs "refer", which
		// best effort would turn into no restriction at all on ABI 1.
		rwDirs = func(paths ...string) landlock.FSRule { return landlock.RWDirs(paths...).WithRefer() }
	}
	var rules []landlock.Rule
	add := func(paths []string, dirs, files func(...string) landlock.FSRule, optional bool) error {
		for _, path := range paths {
			fi, err := os.Stat(path)
			switch {
			case err != nil && optional:
			case err != nil:
				return fmt.Errorf("sandbox path: %w", err)
			case fi.IsDir():
				rules = append(rules, dirs(path))
			default: // directory rights on a file are an error to Landlock
				rules = append(rules, files(path))
			}
		}
		return nil
	}
	if err := add(append(SystemReadOnly, filepath.Dir(command)), landlock.RODirs, landlock.ROFiles, true); err != nil {
		return err
	}
	if err := add(systemReadWrite, rwDirs, landlock.RWFiles, true); err != nil {
		return err
	}
	if err := add(p.ReadOnly, landlock.RODirs, landlock.ROFiles, false); err != nil {
		return err
	}
	if err := add(p.ReadWrite, rwDirs, landlock.RWFiles, false); err != nil {
		return err
	}
	return cfg.BestEffort().Restrict(rules...)
}

// Status is what the kernel offers: the Landlock ABI version, 0 without Landlock.
type Status struct {
	ABI int
	Err error // why Landlock is unavailable
}

// Check asks the kernel which Landlock ABI it supports.
func Check() Status {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil || v < 1 {
		if err == nil {
			err = errors.New("ABI version " + strconv.Itoa(v))
		}
		return Status{Err: err}
	}
	return Status{ABI: v}
}

// Available reports whether a sandbox applies.
func (s Status) Available() bool { return s.ABI >= 1 }

// NetworkRestricted reports whether the kernel can deny TCP connections.
func (s Status) NetworkRestricted() bool { return s.ABI >= netABI }

// String is the line for a server card.
func (s Status) String() string {
	if !s.Available() {
		return "not sandboxed: kernel lacks Landlock"
	}
	return fmt.Sprintf("sandboxed (Landlock ABI %d)", s.ABI)
}

// Describe is the card's line for a server with policy p: like String, plus a warning
// when p denies network that the kernel cannot deny.
func (s Status) Describe(p Policy) string {
	if s.Available() && !p.Network && !s.NetworkRestricted() {
		return s.String() + "; network not restricted (needs Landlock ABI 4)"
	}
	return s.String()
}

// DenyAll restricts this process, where the kernel has Landlock, so that it can open
// no file (those already open stay usable), make no file system change and, with ABI 4
// or later, open or accept no TCP connection. It reports the Landlock status it found;
// without Landlock it changes nothing and returns no error.
func DenyAll() (Status, error) {
	st := Check()
	if !st.Available() {
		return st, nil
	}
	return st, landlock.V11.BestEffort().Restrict()
}
