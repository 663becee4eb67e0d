package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"atrium/internal/llm"
	"atrium/internal/llm/llmtest"
	"atrium/internal/store/storetest"
)

// TestTraceBytesPerTurn measures what a tool-using turn costs in the trace (the
// issue counted 11 KB per model call): the sealed, deflated span data must take
// less room than the same data in plaintext JSON, although it is sealed (base64
// and a nonce and tag per span). Run with -v for the figures.
func TestTraceBytesPerTurn(t *testing.T) {
	h := newHarness(t, options{})
	ctx := context.Background()
	const turns = 12
	for i := range turns {
		h.llm.Enqueue(
			llmtest.Reply{ToolCalls: calls(llmtest.ToolCall{ID: fmt.Sprint("c", i), Name: "calculator", Arguments: `{"expression":"6*7"}`}),
				Usage: &llm.Usage{InputTokens: 120, OutputTokens: 8}},
			llmtest.Reply{Text: llmtest.Words(strings.Repeat("The answer to what you asked is 42, as the calculator says. ", 8)),
				Usage: &llm.Usage{InputTokens: 150, OutputTokens: 60}},
		)
		h.send(t, fmt.Sprintf("Question %d: what is 6*7, and why does it matter to the story we talked about?", i))
		h.sink.waitFinal(t, i+1)
		h.waitIdle(t)
	}
	runs, err := h.trace.Runs(ctx, h.session.OwnerID, h.session.ID, 0)
	if err != nil || len(runs) != turns {
		t.Fatalf("%d runs (%v)", len(runs), err)
	}
	plain, calls := 0, 0
	for _, r := range runs {
		_, spans, err := h.trace.Run(ctx, h.session.OwnerID, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range spans {
			plain += len(s.Data)
			if s.Kind == "model_request" {
				calls++
			}
		}
	}
	stored := int(storetest.Int(t, h.db, `SELECT COALESCE(SUM(length(CAST(data AS BLOB))), 0) FROM spans`))
	t.Logf("%d turns, %d model calls: span data %d B/turn stored (%d B per model call), %d B/turn as plaintext JSON",
		turns, calls, stored/turns, stored/calls, plain/turns)
	if stored >= plain {
		t.Errorf("stored span data %d B is not smaller than its plaintext %d B", stored, plain)
	}
}
