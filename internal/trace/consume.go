package trace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"atrium/internal/agent"
	"atrium/internal/llm"
	"atrium/internal/store"
)

// Consumer records runs from the agent's event stream: it is an agent.Sink. Every run
// event becomes a span (token deltas are not stored one by one: the model response
// holds their concatenation), so that a stored run holds what the model was sent (the
// request as built and the bytes on the wire), what it answered, every tool call and
// result, summary updates, errors and the final reply. Failed writes are logged here,
// in one place; they never reach the run. Safe for concurrent use by many runs.
type Consumer struct {
	rec *Recorder
	log *slog.Logger

	mu   sync.Mutex
	runs map[string]*liveRun // by run id, from its first event to EventRunEnded
}

type liveRun struct {
	run   *Run  // nil when the run could not be started (nothing is recorded)
	model *Span // the model request in flight
}

// NewConsumer returns a consumer that records through rec and logs failures to log.
func NewConsumer(rec *Recorder, log *slog.Logger) *Consumer {
	if log == nil {
		log = slog.Default()
	}
	return &Consumer{rec: rec, log: log, runs: map[string]*liveRun{}}
}

// Publish implements agent.Sink. Writes happen on the caller's goroutine, in event
// order, each bounded by WriteTimeout.
func (c *Consumer) Publish(ev agent.Event) {
	if ev.RunID == "" || ev.Seq == 0 || ev.Kind == agent.EventText || ev.Kind == agent.EventReasoning {
		return
	}
	lr := c.live(ev)
	if lr.run == nil {
		if ev.Kind == agent.EventRunEnded {
			c.forget(ev.RunID)
		}
		return
	}
	if err := c.record(lr, ev); err != nil {
		c.log.Warn("trace: record", "run", ev.RunID, "event", ev.Kind.String(), "err", err)
	}
	if ev.Kind == agent.EventRunEnded {
		c.forget(ev.RunID)
	}
}

// live returns the run's recording state, starting the run on its first event.
func (c *Consumer) live(ev agent.Event) *liveRun {
	c.mu.Lock()
	lr, ok := c.runs[ev.RunID]
	if !ok {
		lr = &liveRun{}
		c.runs[ev.RunID] = lr
	}
	c.mu.Unlock()
	if ok {
		return lr
	}
	run, err := c.rec.StartRun(context.Background(), ev.RunID, ev.SessionID, ev.OwnerID, ev.Model)
	if err != nil {
		c.log.Warn("trace: start run", "run", ev.RunID, "session", ev.SessionID, "err", err)
	}
	lr.run = run // only this run's goroutine publishes its events, so no lock is needed
	return lr
}

func (c *Consumer) forget(runID string) {
	c.mu.Lock()
	delete(c.runs, runID)
	c.mu.Unlock()
}

// span is one finished span to write.
type span struct {
	kind, name, status string
	data               any
	err                error
	tokIn, tokOut      int
}

func (c *Consumer) record(lr *liveRun, ev agent.Event) error {
	ctx := context.Background()
	write := func(s span) error {
		status := s.status
		if status == "" {
			status = spanStatus("", s.err)
		}
		return lr.run.RecordEnded(ctx, s.kind, s.name, s.data, ev.At.Add(-ev.Duration), ev.At, status, s.err, s.tokIn, s.tokOut)
	}
	switch ev.Kind {
	case agent.EventContext:
		return write(span{kind: KindContext, name: fmt.Sprintf("step %d", ev.Step), data: contextData(ev)})
	case agent.EventToolsSelected:
		return write(span{kind: KindToolSelection, name: ev.Selection.Reason, data: ev.Selection})
	case agent.EventModelRequest:
		var data any
		if ev.Purpose != "" {
			data = map[string]string{"purpose": ev.Purpose}
		}
		s, err := lr.run.SpanAt(ctx, ev.At, KindModelRequest, ev.Model, data)
		lr.model = s
		return err
	case agent.EventModelResponse:
		resp := ev.Response
		var err error
		if ev.Purpose != "" {
			// The memory extraction: request, response, tokens and duration in the
			// one (sealed) model_request span; no plaintext response span.
			if lr.model == nil {
				return nil
			}
			err = lr.model.EndAt(ctx, ev.At, spanStatus("", ev.Err), ev.Err, resp.Usage.InputTokens, resp.Usage.OutputTokens,
				ModelRequest{Request: builtRequest(ev), HTTP: redactWire(ev.Wire), Purpose: ev.Purpose, Response: resp})
			lr.model = nil
			return err
		}
		if lr.model != nil {
			err = lr.model.EndAt(ctx, ev.At, spanStatus("", ev.Err), ev.Err, resp.Usage.InputTokens, 0,
				ModelRequest{Request: builtRequest(ev), HTTP: redactWire(ev.Wire)})
			lr.model = nil
		}
		return errors.Join(err, write(span{kind: KindModelResponse, name: ev.Model, data: resp, err: ev.Err,
			tokOut: resp.Usage.OutputTokens}))
	case agent.EventToolResult:
		call, res := ev.ToolCall, ev.Result
		var err error
		if res.IsError {
			err = errors.New(res.Code)
		}
		return write(span{kind: KindToolCall, name: call.Name, err: err, data: map[string]any{
			"id": call.ID, "arguments": rawJSON(call.Arguments), "result": rawJSON(res.Content), "code": res.Code}})
	case agent.EventSummary:
		u := ev.Summary
		return write(span{kind: KindSummary, name: "fold", err: ev.Err, tokOut: u.Tokens, data: map[string]any{
			"from_seq": u.FromSeq, "to_seq": u.ToSeq, "previous_watermark": u.PreviousWatermark, "summary": u.Summary}})
	case agent.EventMemory:
		if w := ev.MemoryWrite; w != nil {
			// Ids and reasons only: suggestion texts are sealed in their table.
			data := map[string]any{"ids": w.IDs}
			if len(w.Dropped) > 0 {
				data["dropped"] = w.Dropped
			}
			return write(span{kind: KindMemory, name: w.Op, err: w.Err, data: data})
		}
		m := ev.Memory
		hits := make([]map[string]any, len(m.Hits))
		for i, h := range m.Hits {
			hits[i] = map[string]any{"id": h.ID, "kind": h.Kind, "score": h.Score, "similarity": h.Similarity, "lexical": h.Lexical}
		}
		data := map[string]any{"hits": hits, "lexical_only": m.LexicalOnly}
		if m.VectorErr != nil {
			data["vector_error"] = m.VectorErr.Error()
		}
		// Ids and scores only: the memories' texts are sealed in the memories table.
		return write(span{kind: KindMemory, name: "recall", err: m.Err, data: data})
	case agent.EventError:
		return write(span{kind: KindError, name: ev.Text, err: ev.Err})
	case agent.EventFinal:
		m := ev.Message
		return write(span{kind: KindFinal, name: m.Status, status: SpanOK, tokOut: m.Tokens, data: map[string]any{
			"seq": m.Seq, "status": m.Status, "error": m.Error, "chars": len(m.Content)}})
	case agent.EventRunEnded:
		t := ev.Totals
		var err error
		if t.Error != "" {
			err = errors.New(t.Error)
		}
		return lr.run.End(ctx, runStatus(t.Status), err, t.InputTokens, t.OutputTokens, t.Steps)
	}
	return nil
}

// runStatus maps a final message's status to the run's.
func runStatus(messageStatus string) string {
	switch messageStatus {
	case store.StatusStopped:
		return StatusStopped
	case store.StatusError:
		return StatusError
	}
	return StatusComplete
}

// contextData is what the context span keeps: zones, what was included and what was
// cut and why (seqs, not message bodies, which are in the messages table).
func contextData(ev agent.Event) map[string]any {
	r := ev.Report
	uns := make([]int64, len(r.Unsummarised))
	for i, m := range r.Unsummarised {
		uns[i] = m.Seq
	}
	return map[string]any{"zones": r.Zones, "included": r.Included, "cut": r.Cut,
		"unsummarised": uns, "interrupted": r.Interrupted}
}

// rawJSON keeps valid JSON as JSON in span data (so redaction sees its keys) and
// anything else as a string.
func rawJSON(s string) any {
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	return s
}

// builtRequest is the request as built, for a model_request span. When the wire
// capture has the body, the images' bytes are left out of it (their media types
// stay): the body holds them exactly as sent, and a second copy of each image
// doubled the span's size and the time to store it.
func builtRequest(ev agent.Event) llm.Request {
	req := *ev.Request
	if ev.Wire == nil {
		return req
	}
	cloned := false
	for i, m := range req.Messages {
		if len(m.Images) == 0 {
			continue
		}
		if !cloned { // the event's request is shared with other consumers
			req.Messages, cloned = slices.Clone(req.Messages), true
		}
		imgs := make([]llm.Image, len(m.Images))
		for k, img := range m.Images {
			imgs[k] = llm.Image{MediaType: img.MediaType}
		}
		req.Messages[i].Images = imgs
	}
	return req
}
