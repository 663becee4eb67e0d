package agent

import (
	"context"
	"sync"
	"time"

	"atrium/internal/llm"
	"atrium/internal/tools"
)

// PurposeSampling marks the model request and response events of a run made for an
// MCP server's sampling request during a tool call ("mcp_sampling:<server>").
const PurposeSampling = "mcp_sampling"

// toolHooks connects one tool call to its run: progress reports become
// EventToolProgress (until the call has returned), and an MCP server's sampling
// request runs the chat's model, recorded as a model request of the run.
//
// They are called from other goroutines than the turn's while the turn waits for the
// call; mu keeps their events and token counts apart from the turn's own.
type toolHooks struct {
	t    *turn
	call llm.ToolCall
	key  string

	mu       sync.Mutex
	done     bool                 // the call returned: later reports are dropped
	reported time.Time            // when the last progress event went out
	stops    []context.CancelFunc // of the samples running, called by finish
	samples  sync.WaitGroup       // the samples running: finish waits for them
}

// progressEvery bounds the progress events of one call: a server reporting faster is
// shown at this pace (its last report of a total always shows).
const progressEvery = 100 * time.Millisecond

func (h *toolHooks) hooks() tools.Hooks {
	return tools.Hooks{CallKey: h.key, Progress: h.progress, Sample: h.sample}
}

func (h *toolHooks) progress(p tools.Progress) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.t.a.Now()
	if h.done || now.Sub(h.reported) < progressEvery && (p.Total == 0 || p.Progress < p.Total) {
		return
	}
	h.reported = now
	h.t.emit(Event{Kind: EventToolProgress, ToolCall: &h.call, Text: h.key, Progress: &p})
}

func (h *toolHooks) sample(ctx context.Context, server string, req llm.Request) (llm.Response, error) {
	t, a := h.t, h.t.a
	req.Model, req.Tools = t.model, nil
	purpose := PurposeSampling + ":" + server
	// A server may go on sampling after its call returned; the call's end cancels the
	// sample and waits for it, so that its tokens and events stay within the turn.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h.mu.Lock()
	if h.done {
		h.mu.Unlock()
		return llm.Response{}, context.Canceled
	}
	h.stops = append(h.stops, cancel)
	h.samples.Add(1)
	defer h.samples.Done()
	started := a.Now()
	t.emit(Event{Kind: EventModelRequest, Model: t.model, Request: &req, Purpose: purpose})
	h.mu.Unlock()
	var sent *llm.HTTPRequest
	resp, err := t.provider.Stream(llm.WithCapture(ctx, func(r *llm.HTTPRequest) { sent = r }), req, func(llm.Event) {})
	h.mu.Lock()
	defer h.mu.Unlock()
	t.inTok += resp.Usage.InputTokens
	t.outTok += resp.Usage.OutputTokens
	t.emit(Event{Kind: EventModelResponse, Model: t.model, Request: &req, Response: &resp, Wire: sent, Err: err,
		Duration: a.Now().Sub(started), Purpose: purpose})
	a.Log.Info("agent: sampling for an MCP server", "session", t.s.ID, "server", server, "model", t.model, "ok", err == nil)
	return resp, err
}

// finish marks the call returned; it waits for a report being emitted, and cancels
// the samples still running and waits for them to record their end.
func (h *toolHooks) finish() {
	h.mu.Lock()
	h.done = true
	for _, stop := range h.stops {
		stop()
	}
	h.mu.Unlock()
	h.samples.Wait()
}
