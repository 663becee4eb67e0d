package trace_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"atrium/internal/agent"
	"atrium/internal/contextwin"
	"atrium/internal/llm"
	"atrium/internal/store"
	"atrium/internal/tools"
	"atrium/internal/trace"
)

// runEvents is one run as the agent emits it: a tool call, then a final answer, a
// summary update after the reply, and the end.
func runEvents(runID string, s store.Session) []agent.Event {
	at := time.Now()
	req := llm.Request{Model: "m", Messages: []llm.Message{{Role: llm.RoleUser, Content: "what time is it?"}}}
	call := llm.ToolCall{ID: "c1", Name: "datetime", Arguments: `{"tz":"UTC"}`}
	evs := []agent.Event{
		{Kind: agent.EventRunStarted, Model: "m"},
		{Kind: agent.EventContext, Step: 1, Report: &contextwin.Report{}},
		{Kind: agent.EventToolsSelected, Step: 1, Selection: &tools.Selection{Reason: "all", Offered: []string{"datetime"}}},
		{Kind: agent.EventModelRequest, Step: 1, Model: "m", Request: &req},
		{Kind: agent.EventReasoning, Text: "the user wants the time"},
		{Kind: agent.EventModelResponse, Step: 1, Model: "m", Request: &req, Duration: 5 * time.Millisecond,
			Response: &llm.Response{ToolCalls: []llm.ToolCall{call}, Usage: llm.Usage{InputTokens: 12, OutputTokens: 3}},
			Wire:     llm.NewHTTPRequest("POST", "https://u:pw@api.example/v1/chat/completions?key=k1", nil, []byte(`{"model":"m"}`))},
		{Kind: agent.EventToolStarted, ToolCall: &call},
		{Kind: agent.EventToolResult, ToolCall: &call, Result: &tools.Result{Content: `{"time":"12:00"}`}, Duration: time.Millisecond},
		{Kind: agent.EventModelRequest, Step: 2, Model: "m", Request: &req},
		{Kind: agent.EventText, Text: "It is noon."},
		{Kind: agent.EventModelResponse, Step: 2, Model: "m", Request: &req, Err: errors.New("stream broke"),
			Response: &llm.Response{Content: "It is noon.", Usage: llm.Usage{InputTokens: 20, OutputTokens: 4}}},
		{Kind: agent.EventError, Text: "The model call failed.", Err: errors.New("stream broke")},
		{Kind: agent.EventFinal, Message: &store.Message{Seq: 4, Status: store.StatusError, Error: "The model call failed.", Content: "It is noon."}},
		{Kind: agent.EventSummary, Summary: &agent.SummaryUpdate{FromSeq: 1, ToSeq: 2, Summary: "asked the time"}},
		{Kind: agent.EventRunEnded, Totals: &agent.RunTotals{Status: store.StatusError, Error: "The model call failed.",
			InputTokens: 32, OutputTokens: 7, Steps: 2}},
	}
	for i := range evs {
		evs[i].RunID, evs[i].Seq, evs[i].SessionID, evs[i].OwnerID, evs[i].At = runID, i+1, s.ID, s.OwnerID, at
	}
	return evs
}

// TestConsumerRecordsARunFromItsEvents: every event of a run but the token deltas
// becomes a span, in order, with the request as built and as sent (credentials
// stripped from the URL), and the run ends with the totals.
func TestConsumerRecordsARunFromItsEvents(t *testing.T) {
	f := newFixture(t)
	c := trace.NewConsumer(f.rec, nil)
	for _, ev := range runEvents("run-1", f.sess) {
		c.Publish(ev)
	}
	c.Close() // written once the queue is drained
	ri, spans, err := f.rec.Run(context.Background(), f.ann.ID, "run-1")
	mustNil(t, err)
	if ri.Status != trace.StatusError || ri.Error != "The model call failed." || ri.InputTokens != 32 || ri.OutputTokens != 7 || ri.Steps != 2 ||
		ri.Model != "m" { // from the run's first event, which records no span
		t.Errorf("run %+v", ri)
	}
	var kinds []string
	for _, s := range spans {
		kinds = append(kinds, s.Kind)
	}
	want := []string{trace.KindContext, trace.KindToolSelection, trace.KindModelRequest, trace.KindModelResponse,
		trace.KindToolCall, trace.KindModelRequest, trace.KindModelResponse, trace.KindError, trace.KindFinal, trace.KindSummary}
	if !slices.Equal(kinds, want) {
		t.Fatalf("spans %v, want %v", kinds, want)
	}
	if _, err := trace.RebuildRequests(spans); err == nil {
		t.Error("a model request without its wire bytes was rebuilt") // the second request has no Wire
	}
	first := spans[2]
	if !strings.Contains(string(first.Data), `"body":"{\"model\":\"m\"}"`) || strings.Contains(string(first.Data), "pw@") ||
		strings.Contains(string(first.Data), "k1") || first.Status != trace.SpanOK || first.TokensIn != 12 {
		t.Errorf("model request span %s %+v", first.Data, first)
	}
	if second := spans[6]; second.Status != trace.SpanError || second.Error != "stream broke" {
		t.Errorf("failed model response span %+v", second)
	}
	if tool := spans[4]; tool.Name != "datetime" || !strings.Contains(string(tool.Data), `"result":{"time":"12:00"}`) {
		t.Errorf("tool span %s %+v", tool.Data, tool)
	}
}

// TestConsumerLogsWhatItCannotRecord: a run in another user's session is not
// recorded, the failure is logged once, and the consumer forgets the run at its end.
func TestConsumerLogsWhatItCannotRecord(t *testing.T) {
	f := newFixture(t)
	var logs bytes.Buffer
	c := trace.NewConsumer(f.rec, slog.New(slog.NewTextHandler(&logs, nil)))
	foreign := f.sess
	foreign.OwnerID = f.bob.ID
	for _, ev := range runEvents("run-2", foreign) {
		c.Publish(ev)
	}
	c.Close()
	if n := strings.Count(logs.String(), `msg="trace: start run"`); n != 1 {
		t.Errorf("logged %d start failures, want 1:\n%s", n, logs.String())
	}
	if _, _, err := f.rec.Run(context.Background(), f.bob.ID, "run-2"); err == nil {
		t.Error("a run in another user's session was recorded")
	}
}

// TestConsumerSpansLastAsLongAsTheirEvents: a span recorded from an event ends at
// the event's time, however late the recorder gets to it (the hub and others are
// served first), so a model call's span is as long as the call.
func TestConsumerSpansLastAsLongAsTheirEvents(t *testing.T) {
	f := newFixture(t)
	c := trace.NewConsumer(f.rec, nil)
	for _, ev := range runEvents("run-late", f.sess) {
		ev.At = ev.At.Add(-time.Minute) // the recorder is a minute behind the events
		c.Publish(ev)
	}
	c.Close()
	_, spans, err := f.rec.Run(context.Background(), f.ann.ID, "run-late")
	mustNil(t, err)
	resp := spans[3]
	if resp.Kind != trace.KindModelResponse {
		t.Fatalf("span 4 is %s", resp.Kind)
	}
	if d := resp.EndedAt.Sub(resp.StartedAt); d < 4*time.Millisecond || d > 6*time.Millisecond {
		t.Errorf("the model response span lasts %v, want the call's 5ms", d)
	}
}

// TestConsumerStoresEachRequestOnce: a model request that went on the wire is
// stored as its body alone, and the request as built is read back from it; one
// that failed before it was sent keeps the request as built (there is no body).
func TestConsumerStoresEachRequestOnce(t *testing.T) {
	f := newFixture(t)
	c := trace.NewConsumer(f.rec, nil)
	req := llm.Request{Model: "m", Messages: []llm.Message{{Role: llm.RoleSystem, Content: "be brief"},
		{Role: llm.RoleUser, Content: "what time is it?"}}}
	body := `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"what time is it?"}],"stream":true,"stream_options":{"include_usage":true}}`
	evs := runEvents("run-once", f.sess)
	for i := range evs {
		if evs[i].Request != nil {
			evs[i].Request = &req
		}
		if evs[i].Wire != nil {
			evs[i].Wire = llm.NewHTTPRequest("POST", "https://api.example/v1/chat/completions", nil, []byte(body))
		}
		c.Publish(evs[i])
	}
	c.Close()
	_, spans, err := f.rec.Run(context.Background(), f.ann.ID, "run-once")
	mustNil(t, err)
	var sent, unsent trace.SpanInfo
	for _, s := range spans {
		if s.Kind == trace.KindModelRequest && sent.Seq == 0 {
			sent = s
		} else if s.Kind == trace.KindModelRequest {
			unsent = s
		}
	}
	if bytes.Contains(sent.Data, []byte(`"request"`)) || !bytes.Contains(sent.Data, []byte(`what time is it?`)) {
		t.Errorf("a sent request is stored as %s; want its wire body alone", sent.Data)
	}
	if !bytes.Contains(unsent.Data, []byte(`"request"`)) {
		t.Errorf("a request without a wire body is stored as %s; want the request as built", unsent.Data)
	}
	got, err := trace.RebuildLLMRequests([]trace.SpanInfo{sent, unsent})
	mustNil(t, err)
	if len(got) != 2 || !reflect.DeepEqual(got[0], req) || !reflect.DeepEqual(got[1], req) {
		t.Errorf("rebuilt %+v, want twice %+v", got, req)
	}
	if bodies, err := trace.RebuildRequests([]trace.SpanInfo{sent}); err != nil || string(bodies[0]) != body {
		t.Errorf("the body comes back as %q (%v)", bodies, err)
	}
}
