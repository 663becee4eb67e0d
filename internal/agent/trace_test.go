package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"atrium/internal/errs"
	"atrium/internal/llm"
	"atrium/internal/llm/llmtest"
	"atrium/internal/store"
	"atrium/internal/store/storetest"
	"atrium/internal/trace"
)

// spanKinds lists the kinds of spans in seq order.
func spanKinds(spans []trace.SpanInfo) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Kind)
	}
	return out
}

// columnsContaining returns "table.column" for every column of tables whose value,
// read as text, contains needle.
func columnsContaining(t *testing.T, db *store.DB, needle string, tables ...string) []string {
	t.Helper()
	var hits []string
	for _, table := range tables {
		cols := storetest.Strings(t, db, `SELECT name FROM pragma_table_info(?)`, table)
		if len(cols) == 0 {
			t.Fatalf("table %s has no columns", table)
		}
		for _, c := range cols {
			q := fmt.Sprintf(`SELECT count(*) FROM %q WHERE instr(CAST(%q AS TEXT), ?) > 0`, table, c)
			if n := storetest.Int(t, db, q, needle); n > 0 {
				hits = append(hits, table+"."+c)
			}
		}
	}
	return hits
}

// TestTurnIsRecorded: a tool-using turn is recorded as one run whose spans follow the
// steps in order, whose model requests rebuild byte for byte what the provider got,
// and which never stores the API key.
func TestTurnIsRecorded(t *testing.T) {
	const key = "sk-test-supersecret-123456"
	h := newHarness(t, options{apiKey: key})
	h.llm.Enqueue(
		llmtest.Reply{ToolCalls: calls(llmtest.ToolCall{ID: "c1", Name: "calculator", Arguments: `{"expression":"6*7"}`}),
			Usage: &llm.Usage{InputTokens: 120, OutputTokens: 8}},
		llmtest.Reply{Text: llmtest.Words("It is 42."), Usage: &llm.Usage{InputTokens: 150, OutputTokens: 5}},
	)

	h.send(t, "What is 6*7?")
	final := h.sink.waitFinal(t, 1)
	h.waitIdle(t) // the run is ended after the final event
	if final.Status != store.StatusComplete || final.Content != "It is 42." {
		t.Fatalf("final %q %q (error %q)", final.Status, final.Content, final.Error)
	}

	ctx := context.Background()
	runs, err := h.trace.Runs(ctx, h.session.OwnerID, h.session.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 {
		t.Fatalf("%d runs recorded, want 1", len(runs))
	}
	ri, spans, err := h.trace.Run(ctx, h.session.OwnerID, runs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if ri.Status != trace.StatusComplete || ri.Steps != 2 || ri.SessionID != h.session.ID || ri.EndedAt.IsZero() {
		t.Errorf("run %+v, want complete, 2 steps, ended", ri)
	}
	if ri.InputTokens != 270 || ri.OutputTokens != 13 {
		t.Errorf("run tokens in %d out %d, want 270 and 13", ri.InputTokens, ri.OutputTokens)
	}
	step := []string{trace.KindContext, trace.KindToolSelection, trace.KindModelRequest, trace.KindModelResponse}
	want := slices.Concat([]string{trace.KindMemory}, step, []string{trace.KindToolCall}, step, []string{trace.KindFinal})
	if got := spanKinds(spans); !slices.Equal(got, want) {
		t.Fatalf("span kinds %v\nwant %v", got, want)
	}
	for i, s := range spans {
		if s.Seq != i+1 || s.Status != trace.SpanOK || s.EndedAt.IsZero() || s.EndedAt.Before(s.StartedAt) {
			t.Errorf("span %d (%s): seq %d status %q started %v ended %v", i, s.Kind, s.Seq, s.Status, s.StartedAt, s.EndedAt)
		}
		if i > 0 && s.EndedAt.Before(spans[i-1].EndedAt) {
			t.Errorf("span %d (%s) ended before span %d (%s)", i, s.Kind, i-1, spans[i-1].Kind)
		}
	}
	toolSpan := spans[slices.IndexFunc(spans, func(s trace.SpanInfo) bool { return s.Kind == trace.KindToolCall })]
	var data struct {
		ID        string
		Arguments json.RawMessage
		Result    json.RawMessage
	}
	if err := json.Unmarshal(toolSpan.Data, &data); err != nil {
		t.Fatal(err)
	}
	if toolSpan.Name != "calculator" || data.ID != "c1" || !strings.Contains(string(data.Result), `"result":42`) {
		t.Errorf("tool span %s %s", toolSpan.Name, toolSpan.Data)
	}

	// The recorded requests are the ones the provider got, byte for byte.
	bodies, err := trace.RebuildRequests(spans)
	if err != nil {
		t.Fatal(err)
	}
	reqs := h.llm.Requests()
	if len(bodies) != len(reqs) || len(reqs) != 2 {
		t.Fatalf("rebuilt %d requests, the provider got %d, want 2", len(bodies), len(reqs))
	}
	for i := range reqs {
		if !bytes.Equal(bodies[i], reqs[i].Body) {
			t.Errorf("request %d differs\nrecorded %s\nsent     %s", i+1, bodies[i], reqs[i].Body)
		}
		if got := reqs[i].Header.Get("Authorization"); got != "Bearer "+key {
			t.Errorf("request %d had Authorization %q, want the key", i+1, got)
		}
	}

	// The key never reaches the trace tables; the header is kept, redacted.
	if hits := columnsContaining(t, h.db, "supersecret", "runs", "spans"); len(hits) > 0 {
		t.Errorf("the API key is stored in %v", hits)
	}
	if !slices.ContainsFunc(spans, func(s trace.SpanInfo) bool {
		return s.Kind == trace.KindModelRequest && bytes.Contains(s.Data, []byte(trace.Redacted))
	}) {
		t.Errorf("no redacted header in the recorded requests")
	}
	// Model requests carry the whole context (recalled memories too): they are sealed
	// with the owner's key in the file, and opened only by Run.
	if hits := columnsContaining(t, h.db, "You are Atrium, a helpful assistant", "spans"); len(hits) > 0 {
		t.Errorf("a model request is stored in the clear in %v", hits)
	}

	// Another user cannot read the run.
	bob := &store.User{Username: "bob", PasswordHash: "x", Role: store.RoleUser}
	if err := h.db.CreateUser(ctx, bob); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.trace.Run(ctx, bob.ID, ri.ID); !errs.Is(err, errs.NotFound) {
		t.Errorf("another user reading the run: %v, want errs.NotFound", err)
	}
	if list, err := h.trace.Runs(ctx, bob.ID, h.session.ID, 0); err != nil || len(list) != 0 {
		t.Errorf("another user lists %d runs (%v)", len(list), err)
	}
}
