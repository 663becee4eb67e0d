package app

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/uuid"
)

// instanceLock tells live Atrium processes on a data directory from dead ones. Each
// process holds an exclusive flock on instances/<id>.lock for its whole life; the kernel
// drops it when the process dies, kill -9 included. So an instance whose file is there
// and locked is alive, and any other is gone: its leases can be taken at once instead of
// waiting for them to expire.
type instanceLock struct {
	dir, id string
	f       *os.File
}

const instancesDir = "instances"

// lockInstance creates and locks this process's file. The file is locked under a
// temporary name and then renamed, so that nobody ever sees it unlocked.
func lockInstance(dataDir string) (*instanceLock, error) {
	dir := filepath.Join(dataDir, instancesDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, ".starting-*")
	if err != nil {
		return nil, err
	}
	l := &instanceLock{dir: dir, id: uuid.NewString(), f: f}
	if err := tryLock(f); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	if err := os.Rename(f.Name(), l.path(l.id)); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return l, nil
}

func (l *instanceLock) path(id string) string { return filepath.Join(l.dir, id+".lock") }

// childFile is where this instance records its MCP servers' process groups.
func (l *instanceLock) childFile() string { return filepath.Join(l.dir, l.id+".children") }

// alive reports whether instance id still runs. A file that is missing or can be locked
// means no: the locked file of a dead instance is removed on the way. When in doubt (an
// odd name, an I/O error) the answer is yes, which only means waiting for the lease.
func (l *instanceLock) alive(id string) bool {
	if id == l.id {
		return true
	}
	if id == "" || strings.ContainsAny(id, `/\.`) {
		return true // not a name this code gave out
	}
	f, err := os.Open(l.path(id))
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err != nil {
		return true
	}
	defer f.Close()
	if tryLock(f) != nil {
		return true
	}
	os.Remove(l.path(id)) // while locked, so no live instance's file is ever removed
	return false
}

// sweep removes the files of dead instances (those that held no lease, and processes
// killed while starting).
func (l *instanceLock) sweep() {
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if id, ok := strings.CutSuffix(name, ".lock"); ok && !strings.HasPrefix(name, ".") {
			l.alive(id)
		} else if strings.HasPrefix(name, ".starting-") {
			if f, err := os.Open(filepath.Join(l.dir, name)); err == nil {
				if tryLock(f) == nil {
					os.Remove(filepath.Join(l.dir, name))
				}
				f.Close()
			}
		}
	}
}

// close removes the file and drops the lock (at exit, after the database is closed).
func (l *instanceLock) close() {
	if l == nil {
		return
	}
	os.Remove(l.path(l.id))
	l.f.Close()
}
