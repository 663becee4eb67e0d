package mcp

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// ChildFile records the process groups of the running stdio children in a file, so that
// after Atrium dies without cleaning up (kill -9, OOM) the next start can kill what is
// left: a server that ignores its closed stdin, and its own children, otherwise live on
// under PID 1 forever. The parent-death signal (sysProcAttr) ends the direct child; the
// file covers the rest of its group.
//
// The file holds the boot id, then one "pgid starttime" line per group. A group id cannot
// be given to a new process while any member of the old group lives, so a group that still
// has members is ours; a leader with another start time is a stranger that got the number.
type ChildFile struct {
	path   string
	mu     sync.Mutex
	groups map[int]uint64 // pgid → the leader's start time (clock ticks since boot)
}

// NewChildFile returns a recorder writing to path (created on the first child).
func NewChildFile(path string) *ChildFile { return &ChildFile{path: path, groups: map[int]uint64{}} }

func (f *ChildFile) started(pgid int) {
	if f == nil {
		return
	}
	start, _ := procStart(pgid)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.groups[pgid] = start
	f.write()
}

func (f *ChildFile) ended(pgid int) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.groups, pgid)
	f.write()
}

// write replaces the file (under f.mu). Failing to record is logged by nobody: the
// parent-death signal still ends the direct children.
func (f *ChildFile) write() {
	if len(f.groups) == 0 {
		os.Remove(f.path)
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "boot %s\n", bootID())
	for _, pgid := range slices.Sorted(maps.Keys(f.groups)) {
		fmt.Fprintf(&b, "%d %d\n", pgid, f.groups[pgid])
	}
	tmp := f.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err == nil {
		os.Rename(tmp, f.path)
	}
}

// ReapChildFile kills the process groups a dead Atrium recorded in path and removes the
// file. It returns how many groups it killed. Groups from another boot are gone already.
func ReapChildFile(path string, log *slog.Logger) (int, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer os.Remove(path)
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	if !sc.Scan() || sc.Text() != "boot "+bootID() || bootID() == "" {
		return 0, nil
	}
	killed := 0
	for sc.Scan() {
		var pgid int
		var start uint64
		if _, err := fmt.Sscanf(sc.Text(), "%d %d", &pgid, &start); err != nil || pgid <= 1 {
			continue
		}
		if !orphanGroup(pgid, start) {
			continue
		}
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err == nil {
			killed++
			log.Warn("mcp: killed the processes a stopped Atrium left running", "pgid", pgid)
		}
	}
	return killed, nil
}

// orphanGroup reports whether group pgid is still the one recorded: its leader runs with
// the recorded start time, or the leader is gone and members of the group remain.
func orphanGroup(pgid int, start uint64) bool {
	if s, err := procStart(pgid); err == nil {
		return s == start && start != 0
	}
	members, _ := groupMembers(pgid)
	return members > 0
}

// ChildFiles lists the child files in dir whose instance is not alive.
func ChildFiles(dir string, alive func(id string) bool) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), ".children"); ok && !alive(id) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// procStart is a process's start time in clock ticks since boot (field 22 of
// /proc/<pid>/stat, read after the command name, which may hold spaces and parentheses).
func procStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("bad stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, errors.New("bad stat")
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// groupMembers counts the processes whose group is pgid.
func groupMembers(pgid int) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err == nil && g == pgid {
			n++
		}
	}
	return n, nil
}

func bootID() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}
