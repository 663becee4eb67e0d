package trace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"atrium/internal/agent"
	"atrium/internal/errs"
	"atrium/internal/llm"
	"atrium/internal/store"
)

// Consumer records runs from the agent's event stream: it is an agent.Sink. Every run
// event becomes a span (token deltas are not stored one by one: the model response
// holds their concatenation), so that a stored run holds what the model was sent (the
// bytes on the wire; see ModelRequest), what it answered, every tool call and
// result, summary updates, errors and the final reply.
//
// Recording is off the turn's path: Publish only describes the event's spans and
// queues them (a few microseconds); one goroutine per Consumer redacts, compresses
// and seals them and writes what is queued in one transaction through the store's
// writer, in the order the events were published. The queue is bounded: when it is
// full, Publish waits for room (the run slows down) rather than drop a span. Failed
// writes are logged here, in one place; they never reach the run. Sinks given to
// NewConsumer as after get every event once everything published before it is
// written, so a reply's "How was this answered?" link appears when its run is
// stored. An event that is not recorded (a token delta) and that no after sink wants
// (see EventFilter) is not queued, so a reply streams on while the disk is behind.
// Close drains the queue. Safe for concurrent use by many runs.
type Consumer struct {
	rec   *Recorder
	log   *slog.Logger
	after []agent.Sink

	mu     sync.RWMutex // read-held by Publish while it queues; Close takes it to close the queue
	closed bool
	queue  chan job
	done   chan struct{}
	late   sync.Mutex // serialises the writes of events published after Close

	runs map[string]*liveRun // the writer goroutine's, by run id, from its first event to EventRunEnded
}

// QueueLen bounds the events waiting to be written. A turn publishes a few dozen;
// a full queue (the disk far behind many runs at once) makes Publish wait.
const QueueLen = 1024

// maxBatch bounds the events written in one transaction, so that the writer is
// never held long by the recording when messages wait to be saved.
const maxBatch = 128

// job is one published event and what it records.
type job struct {
	ev       agent.Event
	at       time.Time // the recorder's time when the event was published
	recorded bool      // a run's event: it starts the run's recording if it is the first
	spans    []span
	flush    chan struct{}
}

type liveRun struct {
	start   store.RunStart
	created bool // a write of it was stored: its row is there
	refused bool // the run may not be recorded (its session is not its owner's, its id taken, ...)
	seq     int
	models  map[*llm.Request]*openSpan // the model requests in flight (sampling for parallel tool calls overlaps)
}

// EventFilter is what a sink given to NewConsumer as after may implement to say which
// events it needs; a sink without it gets every event.
type EventFilter interface {
	Wants(agent.EventKind) bool
}

// wants reports whether an after sink needs events of kind k.
func (c *Consumer) wants(k agent.EventKind) bool {
	for _, s := range c.after {
		if f, ok := s.(EventFilter); !ok || f.Wants(k) {
			return true
		}
	}
	return false
}

// openSpan is a model request whose response has not come yet: its start is
// written, and its end is written over it.
type openSpan struct {
	row  store.SpanRow
	data json.RawMessage // redacted
}

// NewConsumer returns a consumer that records through rec, logs failures to log and
// passes every event to the after sinks once it is written (see Consumer). Call
// Close to stop it.
func NewConsumer(rec *Recorder, log *slog.Logger, after ...agent.Sink) *Consumer {
	if log == nil {
		log = slog.Default()
	}
	c := &Consumer{rec: rec, log: log, after: after, queue: make(chan job, QueueLen), done: make(chan struct{}),
		runs: map[string]*liveRun{}}
	go c.loop()
	return c
}

// Publish implements agent.Sink: it queues the event for the writer, waiting while
// the queue is full. After Close, the event is written (or logged as lost) on the
// caller's goroutine.
func (c *Consumer) Publish(ev agent.Event) {
	// Progress reports are shown live, not recorded (the tool's result is).
	recorded := ev.RunID != "" && ev.Seq != 0 && ev.Kind != agent.EventText && ev.Kind != agent.EventReasoning &&
		ev.Kind != agent.EventToolProgress
	if !recorded && !c.wants(ev.Kind) {
		return
	}
	j := job{ev: ev, recorded: recorded}
	if recorded {
		j.at, j.spans = c.rec.now(), describe(ev)
	}
	c.mu.RLock()
	if !c.closed {
		c.queue <- j
		c.mu.RUnlock()
		return
	}
	c.mu.RUnlock()
	<-c.done // the writer is gone: write here, one publisher at a time
	c.late.Lock()
	defer c.late.Unlock()
	c.write([]job{j})
	c.passOn([]job{j})
}

// Flush returns once everything published before it is written (or has failed
// and been logged).
func (c *Consumer) Flush() {
	j := job{flush: make(chan struct{})}
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		return
	}
	c.queue <- j
	c.mu.RUnlock()
	<-j.flush
}

// Close writes what is queued and stops the writer. Events published afterwards
// are written on the publisher's goroutine.
func (c *Consumer) Close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.queue)
	}
	c.mu.Unlock()
	<-c.done
}

// loop writes the queue, as many events a transaction as are waiting.
func (c *Consumer) loop() {
	defer close(c.done)
	for j := range c.queue {
		batch := []job{j}
	fill:
		for len(batch) < maxBatch {
			select {
			case j, ok := <-c.queue:
				if !ok {
					break fill
				}
				batch = append(batch, j)
			default:
				break fill
			}
		}
		c.write(batch)
		c.passOn(batch)
	}
}

func (c *Consumer) passOn(batch []job) {
	for _, j := range batch {
		if j.flush != nil {
			close(j.flush)
			continue
		}
		for _, s := range c.after {
			if f, ok := s.(EventFilter); !ok || f.Wants(j.ev.Kind) {
				s.Publish(j.ev)
			}
		}
	}
}

// span is one span to write, as the event describes it.
type span struct {
	kind, name, status string
	data               any
	err                error
	tokIn, tokOut      int
	lazy               func() any   // data built by the writer (it scans long texts)
	open               bool         // a model request: started, ended by the end of the same request
	end                bool         // ends the open model request with data merged into its own
	call               *llm.Request // open and end: the request, which pairs them (see agent.EventModelResponse)
	endRun             bool
	steps              int // endRun
}

// describe says what ev records. It runs on the run's goroutine: it only picks the
// event's values (marshalling, redacting and sealing are the writer's).
func describe(ev agent.Event) []span {
	switch ev.Kind {
	case agent.EventContext:
		return []span{{kind: KindContext, name: fmt.Sprintf("step %d", ev.Step), data: contextData(ev)}}
	case agent.EventToolsSelected:
		return []span{{kind: KindToolSelection, name: ev.Selection.Reason, data: ev.Selection}}
	case agent.EventModelRequest:
		var data any
		if ev.Purpose != "" {
			data = map[string]string{"purpose": ev.Purpose}
		}
		return []span{{kind: KindModelRequest, name: ev.Model, data: data, open: true, call: ev.Request}}
	case agent.EventModelResponse:
		resp, req, wire, purpose := ev.Response, *ev.Request, ev.Wire, ev.Purpose
		request := func() any { // the URL is parsed (credentials out) by the writer
			mr := storedRequest(req, wire)
			if purpose != "" {
				mr.Purpose, mr.Response = purpose, resp
			}
			return mr
		}
		if purpose != "" {
			// The memory extraction or title: request, response, tokens and duration
			// in the one (sealed) model_request span; no response span.
			return []span{{end: true, call: ev.Request, err: ev.Err, tokIn: resp.Usage.InputTokens, tokOut: resp.Usage.OutputTokens, lazy: request}}
		}
		return []span{
			{end: true, call: ev.Request, err: ev.Err, tokIn: resp.Usage.InputTokens, lazy: request},
			{kind: KindModelResponse, name: ev.Model, data: resp, err: ev.Err, tokOut: resp.Usage.OutputTokens},
		}
	case agent.EventToolResult:
		call, res := ev.ToolCall, ev.Result
		var err error
		if res.IsError {
			err = errors.New(res.Code)
		}
		id, args, content, code := call.ID, call.Arguments, res.Content, res.Code
		return []span{{kind: KindToolCall, name: call.Name, err: err, lazy: func() any {
			return map[string]any{"id": id, "arguments": rawJSON(args), "result": rawJSON(content), "code": code}
		}}}
	case agent.EventSummary:
		u := ev.Summary
		return []span{{kind: KindSummary, name: "fold", err: ev.Err, tokOut: u.Tokens, data: map[string]any{
			"from_seq": u.FromSeq, "to_seq": u.ToSeq, "previous_watermark": u.PreviousWatermark, "summary": u.Summary}}}
	case agent.EventMemory:
		if w := ev.MemoryWrite; w != nil {
			// Ids and reasons only: suggestion texts are sealed in their table.
			data := map[string]any{"ids": w.IDs}
			if len(w.Dropped) > 0 {
				data["dropped"] = w.Dropped
			}
			return []span{{kind: KindMemory, name: w.Op, err: w.Err, data: data}}
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
		return []span{{kind: KindMemory, name: "recall", err: m.Err, data: data}}
	case agent.EventError:
		return []span{{kind: KindError, name: ev.Text, err: ev.Err}}
	case agent.EventFinal:
		m := ev.Message
		return []span{{kind: KindFinal, name: m.Status, status: SpanOK, tokOut: m.Tokens, data: map[string]any{
			"seq": m.Seq, "status": m.Status, "error": m.Error, "chars": len(m.Content)}}}
	case agent.EventRunEnded:
		t := ev.Totals
		var err error
		if t.Error != "" {
			err = errors.New(t.Error)
		}
		return []span{{endRun: true, status: runStatus(t.Status), err: err, tokIn: t.InputTokens, tokOut: t.OutputTokens,
			steps: t.Steps}}
	}
	return nil
}

// pending is a prepared write and where it came from, for the log.
type pending struct {
	w   store.RunWrite
	lr  *liveRun
	ev  agent.Event
	err error // preparing it failed (redaction, sealing): it is written without data
}

// write prepares the batch's writes (redact, compress, seal: outside any
// transaction) and writes them in one transaction; when that fails, each alone.
func (c *Consumer) write(batch []job) {
	// Sealing may create the owner's data key: a write, bounded like the others.
	ctx, cancel := writeCtx(context.Background())
	defer cancel()
	var ws []pending
	for _, j := range batch {
		if !j.recorded {
			continue
		}
		lr := c.live(j)
		if j.ev.Kind == agent.EventRunEnded {
			delete(c.runs, j.ev.RunID)
		}
		if lr.refused {
			continue
		}
		for _, s := range j.spans {
			if p, ok := c.prepare(ctx, lr, j, s); ok {
				ws = append(ws, p)
			}
		}
	}
	for _, p := range ws {
		if p.err != nil {
			c.log.Warn("trace: record", "run", p.ev.RunID, "event", p.ev.Kind.String(), "err", p.err)
		}
	}
	if len(ws) == 0 {
		return
	}
	writes := make([]store.RunWrite, len(ws))
	for i, p := range ws {
		writes[i] = p.w
	}
	results, err := c.writeBatch(writes)
	if err != nil && len(ws) > 1 && !errors.Is(err, context.DeadlineExceeded) {
		// One write may sink the transaction (a span too large for the disk
		// left): the others go on alone.
		results = make([]error, len(ws))
		for i := range writes {
			writes[i].New = !ws[i].lr.created
			wctx, cancel := writeCtx(context.Background())
			r, err := c.rec.db.WriteRuns(wctx, writes[i:i+1])
			cancel()
			results[i] = err
			if err == nil {
				results[i] = r[0]
			}
			if results[i] == nil {
				ws[i].lr.created = true
			}
		}
	} else if err != nil {
		results = make([]error, len(ws))
		for i := range results {
			results[i] = err
		}
	}
	for i, err := range results {
		p := ws[i]
		switch {
		case err == nil:
			p.lr.created = true
		case errs.Code(err) == errs.NotFound || errs.Code(err) == errs.Conflict:
			if !p.lr.refused {
				p.lr.refused = true // nothing more of it is recorded
				c.log.Warn("trace: start run", "run", p.ev.RunID, "session", p.ev.SessionID, "err", err)
			}
		default:
			c.log.Warn("trace: record", "run", p.ev.RunID, "event", p.ev.Kind.String(), "err", err)
		}
	}
}

// busyTries bounds how often a batch is written again while the database stays locked
// past WriteTimeout: about a minute, during which Publish waits for room.
const busyTries = 12

// writeBatch writes in one transaction. When the database stays locked past a write's
// time (another process, a long checkpoint), no single write is to blame: it writes
// the whole batch again, up to busyTries times, so the runs slow down instead of
// losing spans.
func (c *Consumer) writeBatch(writes []store.RunWrite) ([]error, error) {
	for try := 1; ; try++ {
		wctx, cancel := writeCtx(context.Background())
		results, err := c.rec.db.WriteRuns(wctx, writes)
		cancel()
		if err == nil || !errors.Is(err, context.DeadlineExceeded) || try == busyTries {
			return results, err
		}
		if try == 1 {
			c.log.Warn("trace: the database stays busy; the recording waits", "err", err)
		}
	}
}

// live returns the run's recording state, starting the run on its first event.
func (c *Consumer) live(j job) *liveRun {
	lr, ok := c.runs[j.ev.RunID]
	if !ok {
		lr = &liveRun{start: store.RunStart{ID: j.ev.RunID, SessionID: j.ev.SessionID, OwnerID: j.ev.OwnerID,
			Model: j.ev.Model, StartedAt: j.at}}
		if lr.start.OwnerID <= 0 {
			lr.refused = true
			c.log.Warn("trace: start run", "run", j.ev.RunID, "err", "a run needs an owner")
		}
		c.runs[j.ev.RunID] = lr
	}
	return lr
}

// prepare turns one described span into a write: redacted, compressed and sealed
// with the owner's key. It reports false when there is nothing to write (the end
// of a model request that was never started).
func (c *Consumer) prepare(ctx context.Context, lr *liveRun, j job, s span) (pending, bool) {
	r, ev := c.rec, j.ev
	p := pending{lr: lr, ev: ev}
	p.w.Run, p.w.New = lr.start, !lr.created
	if s.lazy != nil {
		s.data = s.lazy()
	}
	status := s.status
	if status == "" {
		status = spanStatus("", s.err)
	}
	switch {
	case s.endRun:
		p.w.End = &store.RunEnd{ID: lr.start.ID, Status: s.status, Error: r.errorText(s.err), EndedAt: j.at,
			InputTokens: s.tokIn, OutputTokens: s.tokOut, Steps: s.steps}
		return p, true
	case s.end:
		open := lr.models[s.call]
		if open == nil {
			return p, false
		}
		delete(lr.models, s.call)
		raw, err := r.red.JSON(s.data)
		data := open.data
		if raw != nil {
			data = mergeJSON(open.data, raw)
		}
		row := open.row
		row.Status, row.Error, row.TokensIn, row.TokensOut = status, r.errorText(s.err), s.tokIn, s.tokOut
		row.EndedAt = ev.At
		if row.EndedAt.Before(row.StartedAt) {
			row.EndedAt = row.StartedAt
		}
		row.Data, p.err = r.sealedRow(ctx, lr, row.Seq, data, err)
		p.w.Span = &row
		return p, true
	}
	lr.seq++
	row := store.SpanRow{RunID: lr.start.ID, Seq: lr.seq, Kind: s.kind, Name: r.red.String(s.name), Status: status,
		Error: r.errorText(s.err), StartedAt: ev.At.Add(-ev.Duration), EndedAt: ev.At, TokensIn: s.tokIn, TokensOut: s.tokOut}
	raw, err := r.red.JSON(s.data)
	if s.open {
		row.Status, row.Error, row.StartedAt, row.EndedAt = SpanRunning, "", ev.At, time.Time{}
		if lr.models == nil {
			lr.models = map[*llm.Request]*openSpan{}
		}
		lr.models[s.call] = &openSpan{row: row, data: raw}
	}
	row.Data, p.err = r.sealedRow(ctx, lr, row.Seq, raw, err)
	p.w.Span = &row
	return p, true
}

// sealedRow seals data for the run's span seq; a redaction error (jerr) or a
// sealing error leaves the span without data.
func (r *Recorder) sealedRow(ctx context.Context, lr *liveRun, seq int, data json.RawMessage, jerr error) ([]byte, error) {
	if jerr != nil {
		return nil, jerr
	}
	sealed, err := r.seal(ctx, lr.start.OwnerID, lr.start.ID, seq, data)
	if err != nil {
		return nil, err
	}
	return sealed, nil
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
		"unsummarised": uns, "interrupted": r.Interrupted, "memories": r.Memories}
}

// rawJSON keeps valid JSON as JSON in span data (so redaction sees its keys) and
// anything else as a string.
func rawJSON(s string) any {
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	return s
}
