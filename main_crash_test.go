package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"atrium/internal/contextwin"
	"atrium/internal/llm/llmtest"
	"atrium/internal/store"
	"atrium/internal/store/storetest"
)

// TestCrashKeepsPartialReplies runs the real binary, streams replies in several chats,
// kill -9s it mid-stream and starts it again on the same data directory. Then: the
// database is intact, every user message is there, every partial reply is kept (at
// most about 2 s behind what the browser had seen) and shown as interrupted, the dead
// process's leases are gone, a new send in those chats starts at once, and the next
// model request is well-formed (no two user messages in a row).
func TestCrashKeepsPartialReplies(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	const chats = 8
	fake := llmtest.NewServer(t)
	fake.SetModels("fake-model")
	var story strings.Builder
	for i := 1; i <= 600; i++ {
		fmt.Fprintf(&story, "tok%d ", i)
	}
	fake.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		if strings.HasPrefix(req.LastUser(), "silent") {
			return llmtest.Reply{StallBeforeHeaders: time.Minute} // still waiting at the kill
		}
		if strings.HasPrefix(req.LastUser(), "crash") {
			return llmtest.Reply{Text: llmtest.Words(story.String()), ChunkDelay: 40 * time.Millisecond} // 24 s
		}
		return llmtest.Reply{Text: []string{"fine ", "again"}}
	})

	bin := buildBinary(t)
	data := filepath.Join(t.TempDir(), "data")
	first := runBinary(t, bin, data)

	// An admin, the fake model, and the chats, each streaming a long reply.
	h := newHTTPClient(t, first.url)
	h.setupAdmin()
	tok := h.csrf("/settings/providers")
	if resp, _ := h.post("/settings/providers", url.Values{"_csrf": {tok}, "name": {"fake"}, "kind": {"openai"},
		"base_url": {fake.URL()}, "models": {"fake-model"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("add provider: %d", resp.StatusCode)
	}
	ids := make([]string, chats)
	streams := make([]*tokStream, chats)
	for i := range ids {
		resp, _ := h.post("/sessions", url.Values{"_csrf": {tok}})
		ids[i] = strings.TrimPrefix(resp.Header.Get("Location"), "/s/")
		streams[i] = dialChat(t, h, first.url, ids[i])
		streams[i].send(t, fmt.Sprintf("crash %d: tell me a long story", i))
	}
	// One more chat whose model has not answered yet when the process dies.
	resp, _ := h.post("/sessions", url.Values{"_csrf": {tok}})
	silentID := strings.TrimPrefix(resp.Header.Get("Location"), "/s/")
	silent := dialChat(t, h, first.url, silentID)
	silent.send(t, "silent: are you there?")
	silent.waitFrame(t, "silent: are you there?")

	// Kill once every chat has streamed at least 100 words (4 s), so that "2 s before
	// the kill" is well into the reply.
	deadline := time.Now().Add(20 * time.Second)
	for i := range streams {
		for streams[i].seen() < 100 {
			if time.Now().After(deadline) {
				t.Fatalf("chat %d streamed %d words in 20 s", i, streams[i].seen())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	killed := time.Now()
	first.kill(t)
	for _, s := range append(streams, silent) {
		s.conn.Close()
	}

	// What the dead process left: an intact file and its leases.
	dbPath := filepath.Join(data, "atrium.db")
	db, err := store.Open(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if got := storetest.Strings(t, db, `PRAGMA integrity_check`); len(got) != 1 || got[0] != "ok" {
		t.Errorf("integrity_check after kill -9: %q", got)
	}
	if n := storetest.Int(t, db, `SELECT count(*) FROM session_leases`); n != chats+1 {
		t.Errorf("the killed process left %d leases, want %d (one per chat answering)", n, chats+1)
	}
	db.Close()

	second := runBinary(t, bin, data)
	t.Logf("restart: ready %s after exec", second.ready.Round(time.Millisecond))
	db, err = store.Open(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := storetest.Strings(t, db, `PRAGMA integrity_check`); len(got) != 1 || got[0] != "ok" {
		t.Errorf("integrity_check after restart: %q", got)
	}
	if n := storetest.Int(t, db, `SELECT count(*) FROM session_leases`); n != 0 {
		t.Errorf("%d leases of the dead process left after the restart", n)
	}

	ctx := context.Background()
	partial := make([]string, chats)
	for i, id := range ids {
		msgs, _, err := db.LatestMessages(ctx, id, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 2 || msgs[0].Role != store.RoleUser || !strings.HasPrefix(msgs[0].Content, fmt.Sprintf("crash %d:", i)) {
			t.Errorf("chat %d holds %d messages, first %+v; want the user message and the partial reply", i, len(msgs), msgs)
			continue
		}
		r := msgs[1]
		if r.Role != store.RoleAssistant || r.Status != store.StatusStopped || r.Error != store.ReplyInterrupted {
			t.Errorf("chat %d reply: %s %s %q; want an assistant reply marked interrupted", i, r.Role, r.Status, r.Error)
		}
		saved := lastTok(r.Content)
		// Saved at least what the browser had 2 s before the kill, never more than was sent.
		bound := streams[i].seenAt(killed.Add(-2 * time.Second))
		if saved == 0 || saved < bound || !strings.HasPrefix(story.String(), r.Content) {
			t.Errorf("chat %d kept words 1–%d (%q…); the browser had %d two seconds before the kill, %d at it",
				i, saved, firstN(r.Content, 40), bound, streams[i].seen())
		}
		t.Logf("chat %d: kept %d words; the browser had %d at the kill, %d two seconds before", i, saved, streams[i].seen(), bound)
		partial[i] = r.Content
	}

	// The chat whose model never answered shows an empty interrupted reply.
	if msgs, _, err := db.LatestMessages(ctx, silentID, 10); err != nil || len(msgs) != 2 ||
		msgs[1].Role != store.RoleAssistant || msgs[1].Content != "" || msgs[1].Error != store.ReplyInterrupted {
		t.Errorf("chat with no reply text yet at the kill holds %+v (%v); want the user message and an empty interrupted reply", msgs, err)
	}

	// The chat page shows the partial text and why it ended.
	h.base = second.url
	page, code := h.get("/s/" + ids[0])
	if code != http.StatusOK || !strings.Contains(page, "Interrupted: the server stopped while this reply was being written.") ||
		!strings.Contains(page, "tok1 tok2") || !strings.Contains(page, `data-testid="stopped-badge">interrupted<`) {
		t.Errorf("chat page after restart (%d) does not show the interrupted partial reply", code)
	}

	// A new send starts at once (no lease to wait for) and the model gets a
	// well-formed history: the partial reply is the assistant turn between the users.
	for i := range 2 {
		s := dialChat(t, h, second.url, ids[i])
		defer s.conn.Close()
		s.waitFrame(t, `id="messages"`) // the snapshot a (re)connect gets
		sent := time.Now()
		s.send(t, "after the restart")
		s.waitFrame(t, "after the restart")
		waited := time.Since(sent)
		s.waitFrame(t, "fine again")
		t.Logf("chat %d: the new message was stored and shown %s after the send", i, waited.Round(time.Millisecond))
		if waited > time.Second {
			t.Errorf("chat %d: the new send took %s to start (the dead process's lease expiry was 2.6–4.5 s)", i, waited)
		}
		req := fake.LastRequest().Chat
		var roles []string
		for j, m := range req.Messages {
			roles = append(roles, m.Role)
			if j > 0 && m.Role == "user" && req.Messages[j-1].Role == "user" {
				t.Errorf("chat %d: request messages %d and %d are both user messages", i, j-1, j)
			}
		}
		if n := len(req.Messages); n < 3 || req.Messages[n-2].Role != "assistant" || req.Messages[n-2].Content != partial[i] ||
			req.Messages[n-1].Content != "after the restart" {
			t.Errorf("chat %d: the model got roles %v; want …, user, the partial reply, the new message", i, roles)
		}
	}

	// After a reply with no text at all, a placeholder stands for it in the request.
	s := dialChat(t, h, second.url, silentID)
	defer s.conn.Close()
	s.waitFrame(t, `id="messages"`)
	s.send(t, "after the restart")
	s.waitFrame(t, "fine again")
	req := fake.LastRequest().Chat
	if n := len(req.Messages); n < 3 || req.Messages[n-3].Role != "user" || req.Messages[n-2].Role != "assistant" ||
		req.Messages[n-2].Content != contextwin.NoReply || req.Messages[n-1].Content != "after the restart" {
		t.Errorf("after an empty interrupted reply the model got %+v; want user, the placeholder, the new message", req.Messages)
	}
	second.stop(t)
}

// buildBinary builds the program into a temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH: cannot build the binary")
	}
	bin := filepath.Join(t.TempDir(), "atrium")
	build := exec.Command(goTool, "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// proc is a running Atrium binary.
type proc struct {
	cmd    *exec.Cmd
	url    string
	ready  time.Duration // from exec to the first 200 from /readyz
	stderr *bytes.Buffer
	done   chan error
}

// runBinary starts bin on data with a free port and waits for /readyz.
func runBinary(t *testing.T, bin, data string) *proc {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := &proc{cmd: exec.Command(bin), url: "http://" + addr, stderr: &bytes.Buffer{}, done: make(chan error, 1)}
	p.cmd.Env = []string{"ATRIUM_ADDR=" + addr, "ATRIUM_DATA=" + data, "ATRIUM_LOG_LEVEL=info",
		"ATRIUM_MEMORY_EXTRACT=false", "ATRIUM_GENERATE_TITLES=false", "HOME=" + os.Getenv("HOME"), "PATH=" + os.Getenv("PATH")}
	p.cmd.Stderr = p.stderr
	p.cmd.Stdout = p.stderr
	start := time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("output of %s:\n%s", addr, p.stderr.String())
		}
	})
	client := &http.Client{Timeout: time.Second}
	for {
		if resp, err := client.Get(p.url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				p.ready = time.Since(start)
				return p
			}
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("not ready after 20 s:\n%s", p.stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// kill sends SIGKILL: nothing of Atrium's shutdown runs.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	p.done <- nil // for the cleanup
}

// stop sends SIGTERM and expects exit 0.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		p.done <- nil
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Error("no exit within 15 s of SIGTERM")
	}
}

var tokRe = regexp.MustCompile(`tok(\d+)`)

// lastTok is the highest tokN in s (0 when none).
func lastTok(s string) int {
	n := 0
	for _, m := range tokRe.FindAllStringSubmatch(s, -1) {
		if v, _ := strconv.Atoi(m[1]); v > n {
			n = v
		}
	}
	return n
}

func firstN(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// tokStream is a chat websocket that remembers, over time, how far the reply it
// shows has got (the highest tokN in its frames).
type tokStream struct {
	conn *websocket.Conn

	mu      sync.Mutex
	history []tokAt
	frames  []string
	changed chan struct{}
}

type tokAt struct {
	at  time.Time
	tok int
}

func dialChat(t *testing.T, h *httpClient, base, id string) *tokStream {
	t.Helper()
	u, _ := url.Parse(base)
	dialer := websocket.Dialer{Jar: h.c.Jar}
	conn, _, err := dialer.Dial("ws://"+u.Host+"/s/"+id+"/ws", http.Header{"Origin": {base}})
	if err != nil {
		t.Fatal(err)
	}
	s := &tokStream{conn: conn, changed: make(chan struct{}, 1)}
	go func() {
		for {
			_, data, err := conn.ReadMessage()
			if err != nil {
				return
			}
			n := lastTok(string(data))
			s.mu.Lock()
			s.frames = append(s.frames, string(data))
			if len(s.history) == 0 || n > s.history[len(s.history)-1].tok {
				s.history = append(s.history, tokAt{time.Now(), n})
			}
			s.mu.Unlock()
			select {
			case s.changed <- struct{}{}:
			default:
			}
		}
	}()
	return s
}

func (s *tokStream) send(t *testing.T, text string) {
	t.Helper()
	if err := s.conn.WriteJSON(map[string]string{"type": "send", "text": text}); err != nil {
		t.Fatal(err)
	}
}

// seen is the furthest word the browser has been shown.
func (s *tokStream) seen() int { return s.seenAt(time.Now()) }

// seenAt is the furthest word shown by time at.
func (s *tokStream) seenAt(at time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, h := range s.history {
		if h.at.After(at) {
			break
		}
		n = h.tok
	}
	return n
}

// waitFrame waits for a frame containing want (frames seen before count too).
func (s *tokStream) waitFrame(t *testing.T, want string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for i := 0; ; {
		s.mu.Lock()
		for ; i < len(s.frames); i++ {
			if strings.Contains(s.frames[i], want) {
				s.mu.Unlock()
				return
			}
		}
		s.mu.Unlock()
		select {
		case <-s.changed:
		case <-timeout:
			t.Fatalf("no frame with %q within 10 s", want)
		}
	}
}
