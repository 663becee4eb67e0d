package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"atrium/internal/store"
	"atrium/internal/store/storetest"
)

// TestBackupRestoreLive backs up a running instance while it is being written to (a
// second process, as `docker exec atrium /atrium backup` would be), restores the copy
// and the master key into a fresh data directory, starts Atrium on it and finds the
// chats, the login and the sealed memories readable.
func TestBackupRestoreLive(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	fake := fakeModel(t)
	bin := buildBinary(t)
	tmp := t.TempDir()
	data := filepath.Join(tmp, "data")
	first := runBinary(t, bin, data)

	h := newHTTPClient(t, first.url)
	h.setupAdmin()
	tok := h.csrf("/settings/providers")
	if resp, _ := h.post("/settings/providers", url.Values{"_csrf": {tok}, "name": {"fake"}, "kind": {"openai"},
		"base_url": {fake.URL()}, "models": {"fake-model"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("add provider: %d", resp.StatusCode)
	}
	var chats []string
	for i := range 3 {
		resp, _ := h.post("/sessions", url.Values{"_csrf": {tok}})
		id := strings.TrimPrefix(resp.Header.Get("Location"), "/s/")
		s := dialChat(t, h, first.url, id)
		s.send(t, fmt.Sprintf("backup chat %d", i))
		s.waitFrame(t, fmt.Sprintf("backup chat %d", i)) // saved
		s.conn.Close()
		chats = append(chats, id)
	}
	if resp, body := h.post("/memories", url.Values{"_csrf": {tok}, "kind": {"fact"},
		"text": {"my favourite colour is teal"}}); resp.StatusCode >= 400 {
		t.Fatalf("add memory: %d %s", resp.StatusCode, firstN(body, 300))
	}

	// A writer that keeps creating chats and sealed memories through the server while
	// the backup runs.
	var writes atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			path, form := "/sessions", url.Values{"_csrf": {tok}}
			if i%2 == 1 {
				path, form = "/memories", url.Values{"_csrf": {tok}, "kind": {"other"},
					"text": {fmt.Sprintf("writer note %d about topic %d", i, i*7)}}
			}
			resp, err := h.c.PostForm(first.url+path, form)
			if err != nil {
				return
			}
			resp.Body.Close()
			if resp.StatusCode < 400 {
				writes.Add(1)
			}
		}
	}()
	for writes.Load() < 20 {
		time.Sleep(5 * time.Millisecond)
	}
	backupFile := filepath.Join(tmp, "atrium-backup.db")
	before := writes.Load()
	out, err := exec.Command(bin, "backup", "-data", data, backupFile).CombinedOutput()
	after := writes.Load()
	for writes.Load() < after+20 {
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("backup: %v\n%s", err, out)
	}
	t.Logf("backup taken during writes %d..%d (%d writes in all):\n%s", before, after, writes.Load(), out)
	if !strings.Contains(string(out), "master.key") {
		t.Errorf("backup output does not say to keep the master key:\n%s", out)
	}
	fi, err := os.Stat(backupFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("backup file mode %04o, want 0600", fi.Mode().Perm())
	}
	// A second backup to the same name is refused and leaves the first intact.
	if out, err := exec.Command(bin, "backup", "-data", data, backupFile).CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "refusing to overwrite") {
		t.Errorf("backup over an existing file: err %v, output %s", err, out)
	}
	// To standard output (the Docker route): the same database, and nothing on stdout
	// but the database.
	cmd := exec.Command(bin, "backup", "-data", data, "-")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("backup -: %v\n%s", err, stderr.String())
	}
	streamed := filepath.Join(tmp, "streamed.db")
	os.WriteFile(streamed, stdout.Bytes(), 0o600)
	if out, err := exec.Command(bin, "restore", "-data", filepath.Join(tmp, "from-stdout"), streamed).CombinedOutput(); err != nil {
		t.Errorf("restore of the streamed backup: %v\n%s", err, out)
	}
	if !strings.Contains(stderr.String(), "master.key") {
		t.Errorf("backup - says nothing about the master key on stderr: %s", stderr.String())
	}
	first.stop(t)

	// The copy is intact and holds what was committed before it started.
	db, err := store.Open(context.Background(), backupFile)
	if err != nil {
		t.Fatal(err)
	}
	if got := storetest.Strings(t, db, `PRAGMA integrity_check`); len(got) != 1 || got[0] != "ok" {
		t.Errorf("integrity_check of the backup: %q", got)
	}
	nSessions := storetest.Int(t, db, `SELECT count(*) FROM sessions`)
	db.Close()
	if nSessions < 3 {
		t.Errorf("backup holds %d chats, want at least the 3 made before it", nSessions)
	}
	os.Remove(backupFile + "-wal")
	os.Remove(backupFile + "-shm")

	// Restore into a fresh data directory, with the master key.
	data2 := filepath.Join(tmp, "restored")
	if out, err := exec.Command(bin, "restore", "-data", data2, "-key", filepath.Join(data, "master.key"), backupFile).CombinedOutput(); err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	// Restoring over it again is refused.
	if out, err := exec.Command(bin, "restore", "-data", data2, backupFile).CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "already exists") {
		t.Errorf("restore over a database: err %v, output %s", err, out)
	}
	second := runBinary(t, bin, data2)
	h.base = second.url // same host: the cookie jar sends the old login cookie
	if body, code := h.get("/"); code != http.StatusOK {
		t.Fatalf("the login made before the backup: GET / = %d\n%s", code, firstN(body, 300))
	}
	for i, id := range chats {
		body, code := h.get("/s/" + id)
		if code != http.StatusOK || !strings.Contains(body, fmt.Sprintf("backup chat %d", i)) {
			t.Errorf("restored chat %s: %d, message missing", id, code)
		}
	}
	body, code := h.get("/memories")
	if code != http.StatusOK || !strings.Contains(body, "my favourite colour is teal") {
		t.Errorf("restored sealed memory not readable: %d\n%s", code, firstN(body, 500))
	}
	// And a fresh login works.
	h2 := newHTTPClient(t, second.url)
	tok = h2.csrf("/login")
	if resp, _ := h2.post("/login", url.Values{"_csrf": {tok}, "username": {"admin"}, "password": {"admin password"}}); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("login on the restored instance: %d", resp.StatusCode)
	}
	second.stop(t)
}

// TestRootOwnedDataDirSaysWhatToDo is the Docker restore that goes wrong: the data
// directory's files copied in as root (docker cp), Atrium running as uid 65532. Start-up
// must name the fix (chown), and `atrium restore` run as root must give the files the
// data directory's owner so that Atrium starts.
func TestRootOwnedDataDirSaysWhatToDo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to run Atrium as another uid")
	}
	bin := buildBinary(t)
	tmp := t.TempDir()
	os.Chmod(tmp, 0o755)
	// Made by a root Atrium: owned by root, 0600 (as docker cp leaves them).
	data := filepath.Join(tmp, "data")
	first := runBinary(t, bin, data)
	first.stop(t)
	// Let uid 65532 reach the binary and the data directory (t.TempDir is 0700).
	for _, d := range []string{filepath.Dir(bin), filepath.Dir(filepath.Dir(bin))} {
		os.Chmod(d, 0o755)
	}
	asUser := func(env ...string) (string, error) {
		cmd := exec.Command(bin)
		cmd.Env = append([]string{"ATRIUM_ADDR=127.0.0.1:0", "ATRIUM_DATA=" + data, "ATRIUM_LOG_LEVEL=warn"}, env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			return out.String(), err
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
			return out.String(), nil // still running: it started
		}
	}
	os.Chown(data, 65532, 65532) // the volume's directory is the user's; its files are root's
	out, err := asUser()
	if err == nil {
		t.Fatalf("Atrium started on root-owned files:\n%s", out)
	}
	if !strings.Contains(out, "permission denied") || !strings.Contains(out, "chown -R 65532:65532") {
		t.Errorf("start-up error does not say to chown the data directory:\n%s", out)
	}

	// An unreadable key file outside the data directory is named, without the chown advice
	// for the data directory.
	rootKey := filepath.Join(tmp, "root-only-key")
	os.WriteFile(rootKey, []byte(strings.Repeat("ab", 32)), 0o600)
	out, err = asUser("ATRIUM_MASTER_KEY_FILE=" + rootKey)
	if err == nil || !strings.Contains(out, "ATRIUM_MASTER_KEY_FILE") || !strings.Contains(out, "permission denied") ||
		strings.Contains(out, "chown") {
		t.Errorf("unreadable ATRIUM_MASTER_KEY_FILE: %v\n%s", err, out)
	}

	// The restore route: a backup restored as root into a directory owned by 65532.
	backupFile := filepath.Join(tmp, "b.db")
	if out, err := exec.Command(bin, "backup", "-data", data, backupFile).CombinedOutput(); err != nil {
		t.Fatalf("backup: %v\n%s", err, out)
	}
	data = filepath.Join(tmp, "restored")
	os.Mkdir(data, 0o700)
	os.Chown(data, 65532, 65532)
	if out, err := exec.Command(bin, "restore", "-data", data, "-key", filepath.Join(tmp, "data", "master.key"), backupFile).CombinedOutput(); err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	for _, f := range []string{"atrium.db", "master.key"} {
		fi, err := os.Stat(filepath.Join(data, f))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65532 || st.Gid != 65532 || fi.Mode().Perm() != 0o600 {
			t.Errorf("restored %s: uid %d gid %d mode %04o, want 65532 65532 0600", f, st.Uid, st.Gid, fi.Mode().Perm())
		}
	}
	if out, err := asUser(); err != nil {
		t.Errorf("Atrium as uid 65532 on the restored directory: %v\n%s", err, out)
	}
}
