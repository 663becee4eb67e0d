package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"atrium/internal/contextwin"
	"atrium/internal/errs"
	"atrium/internal/llm"
	"atrium/internal/store"
	"atrium/internal/tools"
)

// turn is one run: the model steps and tool calls answering one user message.
type turn struct {
	a        *Agent
	r        *run
	s        store.Session
	seq      atomic.Int32 // the last event's Seq
	started  time.Time
	provider llm.Provider
	model    string
	user     *store.Message // the user message the turn answers
	query    string         // its text (for tool selection and memory)
	again    bool           // a new version of a reply (regenerate, retry): the message's memory work is done

	// recalled long-term memories for the pinned zone, one line each with its date
	preferences, memories []string
	recalled              []string // their ids, marked used when the run ends
	memoryLookup          bool     // the lookup for this turn answered (hits or none)
	memoryUsed            bool     // a step's context held at least one recalled memory
	memoryRequest         bool     // the message was an explicit "remember"/"forget", already acted on
	memoryOn, extractOn   bool     // see memorySettings
	askFirst              bool     // extraction suggests instead of writing
	saved                 []string // memories an explicit "remember …" created, shown on the reply

	budgets       contextwin.Budgets // the instance's, fitted to this model's window
	instructions  store.Instructions // the user's custom instructions
	steps         int
	inTok, outTok int
	unsummarised  []store.Message // turns that left the verbatim window at the last step
	foldDecided   bool            // foldDue ran for this turn; foldOK is its answer
	foldOK        bool
	summary       string
	summarySeq    int64
	final         *store.Message
}

// runTurn runs the steps of one reply. It always ends with exactly one EventFinal.
// again: the user message was answered before (regenerate, retry).
func (a *Agent) runTurn(ctx context.Context, r *run, s store.Session, user *store.Message, again bool) {
	stopLease := a.keepLease(r, s)
	defer a.releaseLease(r, s)
	defer stopLease()

	t := &turn{a: a, r: r, s: s, user: user, query: user.Content, started: a.Now(), again: again}
	t.final = &store.Message{SessionID: s.ID, Role: store.RoleAssistant, Status: store.StatusComplete, RunID: r.id}
	t.loop(ctx)
	t.commitFinal()
	a.foldLater(t)
}

// emit publishes one event of this run, numbered in order.
func (t *turn) emit(ev Event) {
	ev.RunID, ev.Seq = t.r.id, int(t.seq.Add(1))
	ev.SessionID, ev.OwnerID = t.s.ID, t.s.OwnerID
	if ev.Step == 0 {
		ev.Step = t.steps
	}
	t.a.publish(ev)
}

// end closes the run with its outcome: the last event of the run. The memories it
// used are counted as used now, so that the write is never on the way to the reply.
func (t *turn) end() {
	if len(t.recalled) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), recallTimeout)
		if err := t.a.Memory.MarkUsed(ctx, t.s.OwnerID, t.recalled); err != nil {
			t.a.Log.Warn("agent: mark memories used", "session", t.s.ID, "err", err)
		}
		cancel()
	}
	t.emit(Event{Kind: EventRunEnded, Totals: &RunTotals{Status: t.final.Status, Error: t.final.Error,
		InputTokens: t.inTok, OutputTokens: t.outTok, Steps: t.steps, StartedAt: t.started,
		MemoryLookup: t.memoryLookup, MemoryUsed: t.memoryUsed}})
}

// stopped marks the final message stopped when ctx was cancelled (Stop, shutdown, lost
// lease): a failure caused by cancellation is a stop, not an error.
func (t *turn) stopped(ctx context.Context) bool {
	if ctx.Err() == nil {
		return false
	}
	t.final.Status = store.StatusStopped
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, ErrShutdown):
		t.final.Error = "Stopped because the server shut down."
	case errors.Is(cause, ErrLeaseLost):
		t.final.Error = "Stopped: another process took over this chat."
	}
	return true
}

// fail ends the reply with an error: msg is what the user is told, cause what went wrong.
func (t *turn) fail(msg string, cause error) {
	t.final.Status, t.final.Error = store.StatusError, msg
	// Model: the resolved one, or the chat's choice when resolving it failed.
	t.emit(Event{Kind: EventError, Text: msg, Err: cause, Model: cmp.Or(t.model, t.s.Model)})
}

// loop calls the model and runs tools until a final reply, a failure or the step limit.
func (t *turn) loop(ctx context.Context) {
	a := t.a
	provider, model, err := a.Resolve(ctx, t.s.Model)
	if err != nil {
		if !t.stopped(ctx) {
			t.fail(errs.Message(err), err)
		}
		return
	}
	t.provider, t.model, t.final.Model = provider, model, model
	t.budgets = a.cfg.Budgets
	if a.Window != nil {
		if w := a.Window(ctx, t.s.Model); w > 0 {
			t.budgets = t.budgets.WithWindow(w)
		}
	}
	t.emit(Event{Kind: EventRunStarted, Model: model})
	if in, err := a.Store.UserInstructions(ctx, t.s.OwnerID); err != nil {
		a.Log.Warn("agent: custom instructions not loaded", "session", t.s.ID, "err", err)
	} else {
		t.instructions = in
	}
	t.memorySettings(ctx)
	t.memoryCommand(ctx)
	t.recall(ctx)

	for t.steps < a.cfg.MaxSteps {
		t.steps++
		req, err := t.prepare(ctx)
		if err != nil {
			if !t.stopped(ctx) {
				a.Log.Error("agent: prepare context", "session", t.s.ID, "err", err)
				t.fail("Could not read the conversation history.", err)
			}
			return
		}
		resp, err := t.callModel(ctx, req)
		t.final.Content, t.final.Reasoning = resp.Content, resp.Reasoning
		t.final.Tokens = resp.Usage.OutputTokens
		if err != nil {
			if !t.stopped(ctx) {
				msg := "The model call failed."
				var pe *llm.Error
				if errors.As(err, &pe) {
					msg = err.Error()
				}
				t.fail(msg, err)
				a.Log.Warn("agent: model call failed", "session", t.s.ID, "model", model, "err", err)
			}
			return
		}
		if len(resp.ToolCalls) == 0 {
			return // the final answer
		}
		if !t.commitStep(resp) {
			return
		}
		step := t.final
		for i, call := range resp.ToolCalls {
			t.runTool(ctx, call, store.ToolCallKey(step.ID, i))
		}
		// The step message is committed; what follows (a stop included) is a new one.
		t.final = &store.Message{SessionID: t.s.ID, Role: store.RoleAssistant, Status: store.StatusComplete, Model: model, RunID: t.r.id}
		if t.stopped(ctx) {
			return
		}
	}
	t.final.Content = fmt.Sprintf("I stopped after %d steps without reaching a final answer (the step limit). "+
		"Ask me to continue if you want me to go on.", a.cfg.MaxSteps)
	t.final.Reasoning = ""
}

// prepare assembles the context for the next model call and records how.
func (t *turn) prepare(ctx context.Context) (llm.Request, error) {
	a := t.a
	started := a.Now()
	sess, err := a.Store.SessionForOwner(ctx, t.s.ID, t.s.OwnerID)
	if err != nil {
		return llm.Request{}, err
	}
	msgs, unloaded, err := t.loadContext(ctx, sess.SummarySeq)
	if err != nil {
		return llm.Request{}, err
	}
	offered, sel, err := a.Tools.Select(ctx, t.query, recentTools(msgs), a.cfg.MaxTools)
	if err != nil {
		a.Log.Warn("agent: tool selection failed; offering all", "err", err)
		offered = a.Tools.Enabled()
		sel = tools.Selection{Reason: "all (selection failed)"}
	}
	if !t.memoryOn {
		// A temporary chat, or a user with memory off: the memory tools are not offered.
		offered = slices.DeleteFunc(offered, func(tl tools.Tool) bool { return strings.HasPrefix(tl.Name, "memory_") })
		sel.Offered = slices.DeleteFunc(sel.Offered, func(n string) bool { return strings.HasPrefix(n, "memory_") })
	}
	specs := a.Tools.Specs(offered)
	task, _ := tools.ParseTaskState(sess.State)
	in := contextwin.Input{System: a.cfg.SystemPrompt, ChatPrompt: sess.SystemPrompt,
		AboutMe: t.instructions.AboutMe, AnswerStyle: t.instructions.AnswerStyle, Goal: task.Goal, Stage: task.Stage,
		Preferences: t.preferences, Memories: t.memories,
		Summary: sess.Summary, SummarySeq: sess.SummarySeq, Messages: msgs, Unloaded: unloaded, Tools: specs,
		NoImages: a.Vision == nil || !a.Vision(ctx, t.s.Model)}
	llmMsgs, report := contextwin.Assemble(in, t.budgets, a.Tokens)
	t.unsummarised, t.summary, t.summarySeq = report.Unsummarised, sess.Summary, sess.SummarySeq
	// Turns that do not fit are in neither the request nor the summary: fold them now,
	// before the model call (a few batches at most), so history is never silently
	// dropped. What a failed fold leaves stays marked dropped in the report (trace and
	// context meter).
	for range 3 {
		if len(report.Dropped) == 0 || t.fold(ctx) != nil {
			break
		}
		sess, err := a.Store.SessionForOwner(ctx, t.s.ID, t.s.OwnerID)
		if err != nil {
			break
		}
		msgs, unloaded, err := t.loadContext(ctx, sess.SummarySeq)
		if err != nil {
			break
		}
		in.Summary, in.SummarySeq, in.Messages, in.Unloaded = sess.Summary, sess.SummarySeq, msgs, unloaded
		llmMsgs, report = contextwin.Assemble(in, t.budgets, a.Tokens)
		t.unsummarised, t.summary, t.summarySeq = report.Unsummarised, sess.Summary, sess.SummarySeq
	}

	took := a.Now().Sub(started)
	t.memoryUsed = t.memoryUsed || report.Memories > 0
	t.emit(Event{Kind: EventContext, Report: &report, Duration: took})
	t.emit(Event{Kind: EventToolsSelected, Selection: &sel, Duration: took})
	return llm.Request{Model: t.model, Messages: llmMsgs, Tools: specs}, nil
}

// loadContext reads the branch on screen after the summary's watermark: at most
// contextwin.DefaultLoadMax of the newest messages, and whether older ones were left out.
func (t *turn) loadContext(ctx context.Context, summarySeq int64) ([]store.Message, bool, error) {
	msgs, err := t.a.Store.LoadContextMessages(ctx, t.s.ID, summarySeq, contextwin.DefaultLoadMax+1)
	if err != nil || len(msgs) <= contextwin.DefaultLoadMax {
		return msgs, false, err
	}
	return msgs[1:], true, nil
}

// recentTools lists the tools called in the loaded history, newest first.
func recentTools(msgs []store.Message) []string {
	var out []string
	seen := map[string]bool{}
	for i := len(msgs) - 1; i >= 0 && len(out) < 5; i-- {
		calls, _ := contextwin.ParseToolCalls(msgs[i].ToolCalls)
		for _, c := range calls {
			if !seen[c.Name] {
				seen[c.Name] = true
				out = append(out, c.Name)
			}
		}
	}
	return out
}

// callModel streams one model call as events, the request exactly as sent included.
func (t *turn) callModel(ctx context.Context, req llm.Request) (llm.Response, error) {
	a := t.a
	started := a.Now()
	t.emit(Event{Kind: EventModelRequest, Model: t.model, Request: &req})
	var sent *llm.HTTPRequest
	cctx := llm.WithCapture(ctx, func(h *llm.HTTPRequest) { sent = h })
	d := t.startDraft()
	var firstToken time.Duration
	resp, err := t.provider.Stream(cctx, req, func(ev llm.Event) {
		d.add(ev)
		if firstToken == 0 && (ev.Kind == llm.EventText || ev.Kind == llm.EventReasoning) {
			firstToken = max(a.Now().Sub(started), 1)
		}
		switch ev.Kind {
		case llm.EventText:
			t.emit(Event{Kind: EventText, Text: ev.Text})
		case llm.EventReasoning:
			t.emit(Event{Kind: EventReasoning, Text: ev.Text})
		}
	})
	d.stop()
	t.inTok += resp.Usage.InputTokens
	t.outTok += resp.Usage.OutputTokens
	t.emit(Event{Kind: EventModelResponse, Model: t.model, Request: &req, Response: &resp, Wire: sent, Err: err,
		Duration: a.Now().Sub(started), FirstToken: firstToken})
	a.Log.Info("agent: model call", "session", t.s.ID, "model", t.model, "step", t.steps,
		"tool_calls", len(resp.ToolCalls), "tokens", resp.Usage.OutputTokens, "duration", a.Now().Sub(started), "ok", err == nil)
	return resp, err
}

// commitStep saves an assistant message that called tools and tells the UI. It reports
// false when saving failed (the turn then ends with an error).
func (t *turn) commitStep(resp llm.Response) bool {
	calls, err := json.Marshal(resp.ToolCalls)
	if err != nil {
		t.fail("The model's tool calls could not be saved.", err)
		return false
	}
	m := t.final
	m.ToolCalls = calls
	m.Tokens = t.a.countTokens(m)
	if err := t.save(m); err != nil {
		t.fail(saveFailed(err), err)
		t.final = &store.Message{SessionID: t.s.ID, Role: store.RoleAssistant, Status: store.StatusError, Error: saveFailed(err), Model: t.model, RunID: t.r.id}
		return false
	}
	t.emit(Event{Kind: EventAssistantStep, Message: m})
	return true
}

// runTool executes one call and commits its result (errors included) as a tool message
// keyed to the call by key (the provider's call id may be shared by other calls).
func (t *turn) runTool(ctx context.Context, call llm.ToolCall, key string) {
	a := t.a
	t.emit(Event{Kind: EventToolStarted, ToolCall: &call})
	started := a.Now()
	hooks := &toolHooks{t: t, call: call, key: key}
	res := a.Tools.Dispatch(tools.WithHooks(ctx, hooks.hooks()), t.s.ID, t.s.OwnerID, call)
	hooks.finish()
	status := store.StatusComplete
	if res.IsError {
		status = store.StatusError
	}
	m := &store.Message{SessionID: t.s.ID, Role: store.RoleTool, ToolCallID: call.ID, CallKey: key, Content: res.Content,
		Status: status, Error: res.Code, Duration: res.Duration}
	m.Tokens = a.countTokens(m)
	if err := t.save(m); err != nil {
		a.Log.Error("agent: save tool result", "session", t.s.ID, "tool", call.Name, "err", err)
	}
	t.emit(Event{Kind: EventToolResult, ToolCall: &call, Result: &res, Message: m, Duration: a.Now().Sub(started)})
	if call.Name == "task_update" && !res.IsError {
		if sess, err := a.Store.SessionForOwner(context.Background(), t.s.ID, t.s.OwnerID); err == nil {
			a.publish(Event{Kind: EventTaskState, SessionID: t.s.ID, OwnerID: t.s.OwnerID, State: sess.State})
		}
	}
}

// save commits m with a fresh context: the run's own may be cancelled (Stop, shutdown).
// A message stored already (a reply's draft) is rewritten in place. The store queues
// every write of the process on one connection and retries a lock held by another
// process, so under load a save waits its turn: 30 s before giving up on it.
func (t *turn) save(m *store.Message) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if m.ID != 0 {
		return t.a.Store.UpdateMessage(ctx, m)
	}
	return t.a.Store.AppendMessage(ctx, m)
}

// commitFinal saves the final assistant message and publishes EventFinal.
func (t *turn) commitFinal() {
	m := t.final
	m.Tokens = max(m.Tokens, t.a.countTokens(m))
	m.Memories = t.recalled // the reply shows which memories it was given
	m.Saved = t.saved       // ... and offers to undo what the message saved
	if err := t.save(m); err != nil {
		t.a.Log.Error("agent: save reply", "session", t.s.ID, "err", err)
		m.Status, m.Error = store.StatusError, saveFailed(err)
	}
	t.a.mu.Lock()
	t.r.ending = true
	t.a.mu.Unlock()
	t.emit(Event{Kind: EventFinal, Message: m})
}

// saveFailed is what the user is told when a reply could not be saved, with the
// store's reason when it has one for them (a full disk, a read-only database).
func saveFailed(err error) string {
	if errs.Is(err, errs.Storage) {
		return errs.Message(err) // "The server's disk is full, so this could not be saved. …"
	}
	return "The reply could not be saved."
}

// countTokens is the context cost of a message (content, tool calls, chat overhead),
// stored with it so that assembling the context never re-tokenizes history.
func (a *Agent) countTokens(m *store.Message) int {
	n := contextwin.MessageOverhead + a.Tokens.Count(m.Content)
	if len(m.ToolCalls) > 0 {
		n += a.Tokens.Count(string(m.ToolCalls))
	}
	return n
}
