package store_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"atrium/internal/errs"
	"atrium/internal/store"
	"atrium/internal/store/storetest"
	"atrium/internal/testkit"
)

// A write waits for a lock held longer than busy_timeout (5 s) by another
// connection to the file (another process, a backup tool) instead of failing.
func TestWriteOutlastsForeignLock(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "atrium.db")
	db := mustOpenPath(t, path)
	ann := mustUser(t, db, "ann", store.RoleUser)
	s := mustSession(t, db, "s1", ann.ID)

	other := mustOpenPath(t, path)
	conn, err := storetest.Pool(t, other).Conn(ctx)
	mustNil(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, `BEGIN IMMEDIATE`)
	mustNil(t, err)
	go func() {
		time.Sleep(6 * time.Second)
		conn.ExecContext(ctx, `COMMIT`)
	}()

	start := time.Now()
	m := store.Message{SessionID: s.ID, Role: store.RoleAssistant, Content: "the reply"}
	if err := db.AppendMessage(ctx, &m); err != nil {
		t.Fatalf("append while another connection held the lock for 6 s: %v", err)
	}
	if waited := time.Since(start); waited < 5*time.Second {
		t.Fatalf("append returned after %v, before the lock was released", waited)
	}
	ok, err := db.AcquireLease(ctx, s.ID, "h", 5*time.Second)
	if err != nil || !ok {
		t.Fatalf("lease after the lock: %v %v", ok, err)
	}
}

// Many writers of every kind (leases, messages, runs, spans) at once: none fails.
func TestWritesUnderContention(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	ann := mustUser(t, db, "ann", store.RoleUser)
	const sessions, rounds = 100, 20
	var wg sync.WaitGroup
	errc := make(chan error, sessions)
	for i := range sessions {
		sid := fmt.Sprintf("s%d", i)
		mustSession(t, db, sid, ann.ID)
		wg.Go(func() {
			for r := range rounds {
				if err := oneTurn(ctx, db, ann.ID, sid, r); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if n := storetest.Int(t, db, `SELECT COUNT(*) FROM messages`); n != 2*sessions*rounds {
		t.Errorf("%d messages stored, want %d", n, 2*sessions*rounds)
	}
}

// oneTurn writes what one reply writes: lease, user message, run, spans,
// renewals, the reply, the run's end, the release.
func oneTurn(ctx context.Context, db *store.DB, owner int64, sid string, r int) error {
	holder := fmt.Sprint("h-", sid)
	if ok, err := db.AcquireLease(ctx, sid, holder, 5*time.Second); err != nil || !ok {
		return fmt.Errorf("acquire %s: %v %v", sid, ok, err)
	}
	if err := db.AppendMessage(ctx, &store.Message{SessionID: sid, Role: store.RoleUser, Content: "hello"}); err != nil {
		return err
	}
	run := store.RunStart{ID: fmt.Sprintf("%s-r%d", sid, r), SessionID: sid, OwnerID: owner, StartedAt: time.Now()}
	if err := db.CreateRun(ctx, run); err != nil {
		return err
	}
	for seq := range 4 {
		id, err := db.InsertSpan(ctx, nil, store.SpanRow{RunID: run.ID, Seq: seq, Kind: "context", StartedAt: time.Now()})
		if err != nil {
			return err
		}
		if err := db.EndSpan(ctx, nil, store.SpanEnd{ID: id, Status: "ok", EndedAt: time.Now()}); err != nil {
			return err
		}
		if ok, err := db.RenewLease(ctx, sid, holder, 5*time.Second); err != nil || !ok {
			return fmt.Errorf("renew %s: %v %v", sid, ok, err)
		}
	}
	if err := db.AppendMessage(ctx, &store.Message{SessionID: sid, Role: store.RoleAssistant, Content: "hi"}); err != nil {
		return err
	}
	if err := db.EndRun(ctx, nil, store.RunEnd{ID: run.ID, Status: "complete", EndedAt: time.Now()}); err != nil {
		return err
	}
	return db.ReleaseLease(ctx, sid, holder)
}

// A chat's text is in none of the database's files once the chat is deleted.
func TestDeletedChatLeavesNoText(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "atrium.db")
	db := mustOpenPath(t, path)
	ann := mustUser(t, db, "ann", store.RoleUser)
	const sentinel = "ZEBRA-SENTINEL-4471"
	s := mustSession(t, db, "doomed", ann.ID)
	keep := mustSession(t, db, "kept", ann.ID)
	for i := range 20 {
		mustNil(t, db.AppendMessage(ctx, &store.Message{SessionID: s.ID, Role: store.RoleUser, Content: fmt.Sprint(sentinel, " message ", i)}))
		mustNil(t, db.AppendMessage(ctx, &store.Message{SessionID: keep.ID, Role: store.RoleUser, Content: fmt.Sprint("other ", i)}))
	}
	run := store.RunStart{ID: "run-doomed", SessionID: s.ID, OwnerID: ann.ID, StartedAt: time.Now()}
	mustNil(t, db.CreateRun(ctx, run))
	_, err := db.InsertSpan(ctx, nil, store.SpanRow{RunID: run.ID, Seq: 1, Kind: "model_request", StartedAt: time.Now(),
		Data: []byte(`{"messages":[{"role":"user","content":"` + sentinel + `"}]}`)})
	mustNil(t, err)
	// A reader in the middle of a page of the kept chat must not stop the flush.
	rows, err := db.SQLForTest().QueryContext(ctx, `SELECT content FROM messages WHERE session_id = ?`, keep.ID)
	mustNil(t, err)
	rows.Next()
	go func() { time.Sleep(300 * time.Millisecond); rows.Close() }()

	mustNil(t, db.DeleteSession(ctx, s.ID, ann.ID))
	for _, suffix := range []string{"", "-wal", "-shm"} {
		b, err := os.ReadFile(path + suffix)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if n := bytes.Count(b, []byte(sentinel)); n > 0 {
			t.Errorf("%s holds the deleted chat's text %d times", filepath.Base(path+suffix), n)
		}
	}
	if msgs, _, err := db.LatestMessages(ctx, keep.ID, 50); err != nil || len(msgs) != 20 {
		t.Errorf("kept chat: %d messages, %v", len(msgs), err)
	}
}

// A full database is not ready, and a write to it says the disk is full.
func TestFullDiskIsReportedAndNotReady(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	ann := mustUser(t, db, "ann", store.RoleUser)
	mustNil(t, db.Ready(ctx))
	// SQLite's own size limit stands in for a full disk: writes that need a
	// new page fail with SQLITE_FULL, "database or disk is full".
	pages := storetest.Int(t, db, `PRAGMA page_count`)
	storetest.WriterExec(t, db, fmt.Sprintf(`PRAGMA max_page_count = %d`, pages+2))
	var err error
	for i := 0; err == nil && i < 10000; i++ {
		err = db.CreateSession(ctx, &store.Session{ID: fmt.Sprint("fill-", i), OwnerID: ann.ID, Title: strings.Repeat("x", 500)})
	}
	wantCode(t, err, errs.Storage)
	if msg := errs.Message(err); !strings.Contains(msg, "disk is full") {
		t.Errorf("user sees %q", msg)
	}
	err = db.Ready(ctx)
	wantCode(t, err, errs.Storage)
	if msg := errs.Message(err); !strings.Contains(msg, "full") {
		t.Errorf("ready says %q", msg)
	}
}

// A database whose file was deleted (data directory removed) is not ready.
func TestDeletedFileIsNotReady(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	mustNil(t, os.Mkdir(filepath.Join(dir, "data"), 0o700))
	db := mustOpenPath(t, filepath.Join(dir, "data", "atrium.db"))
	mustNil(t, db.Ready(ctx))
	mustNil(t, os.RemoveAll(filepath.Join(dir, "data")))
	wantCode(t, db.Ready(ctx), errs.Storage)
}

// A connection SQLite opened read-only while the file was read-only (chmod
// 0400) must not stay in the pool: once the file is writable again, writes
// succeed without a restart. Root ignores file modes, so as root this runs in
// a child process as an unprivileged user.
func TestReadOnlyFileRecovers(t *testing.T) {
	if ranAsNonRoot(t) {
		return
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "atrium.db")
	db := mustOpenPath(t, path)
	ann := mustUser(t, db, "ann", store.RoleUser)
	mustNil(t, db.Ready(ctx))

	mustNil(t, os.Chmod(path, 0o400))
	wantCode(t, db.Ready(ctx), errs.Storage)
	// Many at once, so that a pool would open new (read-only) connections:
	// readers hold theirs (as long requests do) while the writes run.
	var wg sync.WaitGroup
	// With a connection budget, the readers past it wait (here until release).
	release, got := make(chan struct{}), make(chan struct{}, 30)
	var readers sync.WaitGroup
	for range 30 {
		readers.Go(func() {
			rows, err := storetest.Pool(t, db).QueryContext(ctx, `SELECT id FROM users`)
			if err != nil {
				t.Error(err)
				return
			}
			got <- struct{}{}
			<-release
			rows.Close()
		})
	}
	for n, timeout := 0, time.After(500*time.Millisecond); n < 30; n++ {
		select {
		case <-got:
			continue
		case <-timeout:
		}
		break
	}
	for i := range 30 {
		wg.Go(func() {
			db.CreateSession(ctx, &store.Session{ID: fmt.Sprint("ro-", i), OwnerID: ann.ID})
		})
	}
	wg.Wait()
	close(release)
	readers.Wait()
	// The writer itself is reopened while the file is read-only: that
	// connection cannot write, says so, and is dropped.
	store.DropConnsForTest(db)
	err := db.CreateSession(ctx, &store.Session{ID: "while-ro", OwnerID: ann.ID})
	wantCode(t, err, errs.Storage)
	if msg := errs.Message(err); !strings.Contains(msg, "read-only") {
		t.Errorf("user sees %q", msg)
	}

	// With every connection closed, the read-only one recreated -shm with
	// the file's mode (0400) too; the operator restores both.
	wantCode(t, db.Ready(ctx), errs.Storage)
	mustNil(t, os.Chmod(path, 0o600))
	wantCode(t, db.Ready(ctx), errs.Storage)
	mustNil(t, os.Chmod(path+"-shm", 0o600))
	for i := range 30 {
		wg.Go(func() {
			if err := db.CreateSession(ctx, &store.Session{ID: fmt.Sprint("rw-", i), OwnerID: ann.ID}); err != nil {
				t.Errorf("create after chmod back: %v", err)
			}
		})
	}
	wg.Wait()
	mustNil(t, db.Ready(ctx))
}

// ranAsNonRoot re-runs the calling test in a child process as uid/gid 65532
// when the test runs as root, and reports whether it did (the child's failure
// fails t).
func ranAsNonRoot(t *testing.T) bool {
	t.Helper()
	if os.Getuid() != 0 {
		return false
	}
	if os.Getenv("ATRIUM_TEST_CHILD") != "" {
		t.Fatal("child still root")
	}
	// The test binary may sit in a directory only root can enter.
	dir, err := os.MkdirTemp("", "atrium-nonroot-")
	mustNil(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	mustNil(t, os.Chmod(dir, 0o755))
	bin := filepath.Join(dir, "store.test")
	self, err := os.ReadFile("/proc/self/exe")
	mustNil(t, err)
	mustNil(t, os.WriteFile(bin, self, 0o755))
	cmd := exec.Command(bin, "-test.run", "^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "ATRIUM_TEST_CHILD=1", "TMPDIR=/tmp")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("as uid 65532: %v\n%s", err, out)
	}
	t.Logf("passed as uid 65532")
	return true
}

// A storm of concurrent requests (a reconnect storm after a restart) opens no
// more SQLite handles than the fixed budget: 6 readers and the writer, each
// with the database and WAL files open, and one -shm.
func TestConnectionBudget(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		testkit.Skip(t, "needs /proc/self/fd (Linux) to count open files")
	}
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "atrium.db")
	db := mustOpenPath(t, path)
	ann := mustUser(t, db, "ann", store.RoleUser)
	s := mustSession(t, db, "s1", ann.ID)
	var most int
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			fds, _ := os.ReadDir("/proc/self/fd")
			n := 0
			for _, fd := range fds {
				if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(target, path) {
					n++
				}
			}
			most = max(most, n)
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	end := time.Now().Add(time.Second)
	for i := range 200 {
		wg.Go(func() {
			for time.Now().Before(end) {
				if _, _, err := db.LatestMessages(ctx, s.ID, 50); err != nil {
					t.Error(err)
					return
				}
				if _, err := db.LatestSpanData(ctx, ann.ID, s.ID, "context"); err != nil {
					t.Error(err)
					return
				}
				if i%10 == 0 {
					if err := db.AppendMessage(ctx, &store.Message{SessionID: s.ID, Role: store.RoleUser, Content: "hi"}); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-sampled
	if budget := 2*(6+1) + 1; most > budget {
		t.Errorf("%d database files open at once, budget %d", most, budget)
	}
	t.Logf("at most %d database files open", most)
}
