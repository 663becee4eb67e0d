package agent_test

import (
	"fmt"
	"strings"
	"testing"

	"atrium/internal/llm/llmtest"
	"atrium/internal/store"
	"atrium/internal/store/storetest"
)

// A reply that cannot be saved because the disk filled up while the model
// answered says so, instead of only "could not be saved".
func TestReplyOnFullDiskSaysSo(t *testing.T) {
	h := newHarness(t, options{})
	h.llm.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		// The user's message is saved; now the disk fills (SQLite's size
		// limit on the writer stands in for it), big rows first, then small.
		pages := storetest.Int(t, h.db, `PRAGMA page_count`)
		storetest.WriterExec(t, h.db, fmt.Sprintf(`PRAGMA max_page_count = %d`, pages+2))
		for _, size := range []int{2000, 200, 1} {
			for i := 0; i < 100000; i++ {
				m := store.Message{SessionID: h.session.ID, Role: store.RoleUser, Content: strings.Repeat("f", size)}
				if err := h.db.AppendMessage(t.Context(), &m); err != nil {
					break
				}
			}
		}
		return llmtest.Reply{Text: llmtest.Words(strings.Repeat("a reply that finds no room ", 20))}
	})
	h.send(t, "hello")
	final := h.sink.waitFinal(t, 1)
	if final.Status != store.StatusError || !strings.Contains(final.Error, "disk is full") {
		t.Fatalf("reply on a full disk: %s %q", final.Status, final.Error)
	}
}
