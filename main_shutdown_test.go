package main

import (
	"context"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"atrium/internal/llm/llmtest"
	"atrium/internal/store"
	"atrium/internal/store/storetest"
)

// TestShutdownSavesPartialReply: a shutdown (what SIGTERM triggers) in the middle of a
// reply saves the partial text as stopped, tells the browser, and run returns nil.
func TestShutdownSavesPartialReply(t *testing.T) {
	fake := llmtest.NewServer(t)
	fake.SetHandler(func(llmtest.ChatRequest) llmtest.Reply {
		return llmtest.Reply{Text: llmtest.Words(strings.Repeat("slow words ", 500)), ChunkDelay: 10 * time.Millisecond}
	})
	a := startApp(t, nil)
	h := newHTTPClient(t, a.URL)

	tok := h.csrf("/setup")
	form := url.Values{"_csrf": {tok}, "username": {"admin"}, "password": {"admin password"}, "password2": {"admin password"}}
	if resp, _ := h.post("/setup", form); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("setup: %d", resp.StatusCode)
	}
	tok = h.csrf("/settings/providers")
	form = url.Values{"_csrf": {tok}, "name": {"fake"}, "kind": {"openai"}, "base_url": {fake.URL()}, "models": {"m"}}
	if resp, _ := h.post("/settings/providers", form); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("add provider: %d", resp.StatusCode)
	}
	resp, _ := h.post("/sessions", url.Values{"_csrf": {tok}})
	sessionPath := resp.Header.Get("Location")
	if !strings.HasPrefix(sessionPath, "/s/") {
		t.Fatalf("create session: %d %q", resp.StatusCode, sessionPath)
	}

	u, _ := url.Parse(a.URL)
	dialer := websocket.Dialer{Jar: h.c.Jar}
	conn, _, err := dialer.Dial("ws://"+u.Host+sessionPath+"/ws", http.Header{"Origin": {a.URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.WriteJSON(map[string]string{"type": "send", "text": "talk slowly"}); err != nil {
		t.Fatal(err)
	}
	frames := make(chan string, 1000)
	go func() {
		defer close(frames)
		for {
			_, data, err := conn.ReadMessage()
			if err != nil {
				return
			}
			frames <- string(data)
		}
	}()
	waitFrame(t, frames, "slow words")

	if err := a.stop(); err != nil {
		t.Fatalf("run returned %v, want nil", err)
	}
	sawFinal, sawLink := false, false
	for f := range frames { // the socket closes after the last frames
		if strings.Contains(f, `outerHTML:#msg-live`) && strings.Contains(f, "stopped") {
			sawFinal = true
		}
		sawLink = sawLink || strings.Contains(f, `data-testid="run-link"`)
	}
	if !sawFinal {
		t.Error("the browser was not told that the reply stopped")
	}
	if !sawLink {
		t.Error("the stopped reply got no \"How was this answered?\" link before the socket closed")
	}

	db, err := store.Open(context.Background(), filepath.Join(a.DataDir, "atrium.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	msgs, _, err := db.LatestMessages(context.Background(), strings.TrimPrefix(sessionPath, "/s/"), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || msgs[1].Status != store.StatusStopped || !strings.HasPrefix(msgs[1].Content, "slow words") ||
		strings.Count(msgs[1].Content, "slow") >= 500 {
		t.Fatalf("after shutdown the session holds %+v; want the user message and a partial stopped reply", msgs)
	}
	// The recording's queue was drained before the database closed: the run ended
	// stopped, with its spans, not left running for the next start to close.
	if got := storetest.Strings(t, db, `SELECT status || ' ' || (SELECT group_concat(kind, ',') FROM
		(SELECT kind FROM spans WHERE run_id = runs.id ORDER BY seq)) FROM runs`); len(got) != 1 ||
		!strings.HasPrefix(got[0], "stopped memory,context,tool_selection,model_request,model_response,final") {
		t.Errorf("after shutdown the runs are %q; want one stopped run with its spans up to the final reply", got)
	}
}

// waitFrame reads frames until one contains want.
func waitFrame(t *testing.T, frames <-chan string, want string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case f, ok := <-frames:
			if !ok {
				t.Fatalf("socket closed before a frame with %q", want)
			}
			if strings.Contains(f, want) {
				return
			}
		case <-timeout:
			t.Fatalf("no frame with %q within 10s", want)
		}
	}
}
