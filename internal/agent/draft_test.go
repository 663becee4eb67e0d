package agent_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"atrium/internal/agent"
	"atrium/internal/llm/llmtest"
	"atrium/internal/store"
	"atrium/internal/testkit"
)

// draftWrites counts the draft writes the agent logs at the end of each model call.
type draftWrites struct {
	mu     sync.Mutex
	writes []int64
}

func (d *draftWrites) Enabled(context.Context, slog.Level) bool { return true }
func (d *draftWrites) WithAttrs([]slog.Attr) slog.Handler       { return d }
func (d *draftWrites) WithGroup(string) slog.Handler            { return d }
func (d *draftWrites) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "agent: reply draft saved" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "writes" {
			d.mu.Lock()
			d.writes = append(d.writes, a.Value.Int64())
			d.mu.Unlock()
		}
		return true
	})
	return nil
}

// TestStreamingReplyIsSavedProgressively: while a reply streams, its text so far is in
// the database (so a kill -9 loses at most DraftInterval of it), marked interrupted
// until it ends; the finished reply rewrites that row in place (no second row), and
// the writes are one per interval, not one per token. Before, nothing of the reply was
// stored until it ended.
func TestStreamingReplyIsSavedProgressively(t *testing.T) {
	const interval = 250 * time.Millisecond
	writes := &draftWrites{}
	h := newHarness(t, options{cfg: agent.Config{DraftInterval: interval}, log: slog.New(writes)})
	full := strings.Repeat("tok ", 80)
	h.llm.Enqueue(llmtest.Reply{Text: llmtest.Words(full), ChunkDelay: 25 * time.Millisecond}) // ≈ 2 s

	started := time.Now()
	h.send(t, "Tell me a long story")
	h.sink.waitFor(t, agent.EventText, 20)
	var draft store.Message
	testkit.Eventually(t, 2*time.Second, "the draft to hold text", func() bool {
		msgs := h.messages(t)
		if len(msgs) == 2 && msgs[1].Content != "" {
			draft = msgs[1]
			return true
		}
		return false
	})
	streamed := 0
	for _, ev := range h.sink.all() {
		if ev.Kind == agent.EventText {
			streamed += len(ev.Text)
		}
	}
	if draft.Role != store.RoleAssistant || draft.Status != store.StatusStopped || draft.Error != store.ReplyInterrupted {
		t.Errorf("draft while streaming: %s %s %q; want an assistant reply marked interrupted", draft.Role, draft.Status, draft.Error)
	}
	if !strings.HasPrefix(full, draft.Content) || len(draft.Content) >= len(full) {
		t.Errorf("draft %q is not a strict prefix of the reply", draft.Content)
	}
	// About one interval (10 tokens of 4 bytes) behind what was streamed; four are
	// allowed, since a loaded machine delays the draft writer as well as this check.
	if lag := streamed - len(draft.Content); lag > 4*int(4*interval/(25*time.Millisecond)) {
		t.Errorf("draft is %d bytes behind the %d streamed", lag, streamed)
	}

	final := h.sink.waitFinal(t, 1)
	elapsed := time.Since(started)
	h.waitIdle(t)
	msgs := h.messages(t)
	if len(msgs) != 2 || msgs[1].ID != draft.ID || msgs[1].Seq != final.Seq {
		t.Fatalf("stored %v (reply id %d, draft id %d); want the draft finished in place", shape(msgs), msgs[len(msgs)-1].ID, draft.ID)
	}
	if got := msgs[1]; got.Status != store.StatusComplete || got.Error != "" || got.Content != full {
		t.Errorf("finished reply %s %q, %d bytes; want complete, no error, the whole text", got.Status, got.Error, len(got.Content))
	}
	writes.mu.Lock()
	defer writes.mu.Unlock()
	if len(writes.writes) != 1 {
		t.Fatalf("draft logs %v, want one per model call", writes.writes)
	}
	// 80 tokens over ≥ 2 s at one write per 250 ms: about 8, never one per token. The
	// bound follows how long the reply really took: a loaded machine streams slower.
	if n, most := writes.writes[0], int64(elapsed/interval)+2; n < 3 || n > most || n >= 80 {
		t.Errorf("%d draft writes for an 80-token reply that took %s at one per %s (want 3..%d)", n, elapsed.Round(time.Millisecond), interval, most)
	}
	t.Logf("draft writes: %d for 80 tokens streamed over about 2 s (interval %s)", writes.writes[0], interval)
}
