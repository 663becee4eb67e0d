// Package agent runs turns: it commits the user's message, assembles the context, asks
// the model, runs the tools it calls and loops until a final reply or the step limit,
// and commits every step, whatever happens (a finished reply, a Stop, a provider
// failure or shutdown). One run per session at a time, guarded in memory and by a
// lease row in the database; a second send waits in a one-message queue.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"atrium/internal/contextwin"
	"atrium/internal/errs"
	"atrium/internal/llm"
	"atrium/internal/store"
	"atrium/internal/tools"
)

// Resolver turns a session's model choice ("providerID:model", or "" for the default) into
// a provider and the model name to send. Errors are *errs.Error with a message that says
// what to fix (e.g. "No model is configured...").
type Resolver func(ctx context.Context, model string) (llm.Provider, string, error)

// Sink consumes the event stream: every event of every run, in order per run and per
// session. Publish is called from the run's goroutine, so it must not block for long
// (a slow consumer delays the reply), must treat the event's payloads as read-only,
// and must not call Send, which may wait for the EventFinal being published to be
// delivered.
type Sink interface {
	Publish(Event)
}

// Config bounds a turn. Zero values mean the defaults.
type Config struct {
	MaxMessageBytes int // user message limit in bytes (100 KB)
	MaxSteps        int // model calls per turn (8)
	MaxTools        int // tools offered per step (20)
	SystemPrompt    string
	Budgets         contextwin.Budgets
	LeaseTTL        time.Duration // 5s; renewed every TTL/3 while the run lives
	LeaseWait       time.Duration // how long a send waits for another process's lease (TTL + 1s)
	DraftInterval   time.Duration // how often a streaming reply's text is saved (1s): what a kill -9 can lose
	// ExtractMemories asks the chat's model after each reply what the user's message
	// holds that is worth remembering (needs Deps.Memory).
	ExtractMemories bool
	// GenerateTitles asks the chat's model for a title after the first reply; until
	// then, and when that fails, the first line of the first message is the title.
	GenerateTitles bool
}

// DefaultSystemPrompt is used when Config.SystemPrompt is empty.
const DefaultSystemPrompt = "You are Atrium, a helpful assistant. Answer clearly; use markdown when it helps. " +
	"Use the tools when they give a better answer than guessing (the date and time, arithmetic). " +
	"For multi-step work, record the goal and the current stage with task_update and read it back with task_get."

// Deps are what an Agent works with. Store and Resolve are required.
type Deps struct {
	Store   *store.DB
	Resolve Resolver
	// Window gives the context window of a session's model choice when its provider
	// knows one (typed by an admin, or reported by the endpoint); 0, or a nil Window,
	// means the configured Budgets.Window.
	Window func(ctx context.Context, choice string) int
	// Vision reports whether a session's model choice takes images; nil means none
	// does, so attached images go to the model as a line saying they were left out.
	Vision func(ctx context.Context, choice string) bool
	Tools  *tools.Registry // nil: no tools
	Memory Memory          // nil: no long-term memory
	Tokens contextwin.Tokenizer
	Config Config
	Now    func() time.Time
	NewID  func() string // run ids
	Log    *slog.Logger
	// Instance names this process in lease holders ("<instance>/<run>"); "": random.
	Instance string
	// Alive reports whether the process named by an instance still runs (another
	// process on the same data directory). A lease held by a dead one is taken at once
	// and its unfinished reply marked interrupted. nil: every other holder is presumed
	// alive until its lease expires.
	Alive func(instance string) bool
}

// Agent owns the in-flight runs. It is safe for concurrent use.
type Agent struct {
	Deps
	cfg      Config
	instance string // this process, in lease holder names

	sinks []Sink // see Subscribe

	base       context.Context // background work (summary folds); cancelled by Shutdown
	cancelBase context.CancelFunc

	mu         sync.Mutex
	runs       map[string]*run
	queued     map[string]queuedSend
	folding    map[string]bool // sessions with a summary fold in progress
	background map[string]int  // after-reply jobs (fold, memory extraction) running per session
	foldFails  map[string]int  // consecutive failed summary folds per session
	foldWait   map[string]int  // turns to skip folding after them (backoff)
	closed     bool
	wg         sync.WaitGroup
}

type run struct {
	id     string
	ctx    context.Context // the run's own; cancelled by Stop, Shutdown or a lost lease
	cancel context.CancelCauseFunc
	done   chan struct{} // closed once the run has left a.runs
	ending bool          // the reply is committed; only its EventFinal is still being published
}

type queuedSend struct {
	session store.Session
	text    string
	files   []string
}

// Cancellation causes.
var (
	ErrStopped   = errors.New("stopped by the user")
	ErrShutdown  = errors.New("server shutting down")
	ErrLeaseLost = errors.New("the session lease was lost")
)

// New returns an Agent.
func New(d Deps) *Agent {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.NewID == nil {
		d.NewID = uuid.NewString
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Tools == nil {
		d.Tools = tools.NewRegistry(nil, nil)
	}
	if d.Tokens == nil {
		d.Tokens = contextwin.NewTokenizer()
	}
	c := d.Config
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = 100 * 1024
	}
	if c.MaxSteps <= 0 {
		c.MaxSteps = 8
	}
	if c.MaxTools <= 0 {
		c.MaxTools = tools.DefaultSelectLimit
	}
	if c.SystemPrompt == "" {
		c.SystemPrompt = DefaultSystemPrompt
	}
	if c.Budgets == (contextwin.Budgets{}) {
		c.Budgets = contextwin.DefaultBudgets()
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 5 * time.Second
	}
	if c.LeaseWait <= 0 {
		c.LeaseWait = c.LeaseTTL + time.Second
	}
	if c.DraftInterval <= 0 {
		c.DraftInterval = time.Second
	}
	if d.Instance == "" {
		d.Instance = uuid.NewString()[:8]
	}
	base, cancel := context.WithCancel(context.Background())
	return &Agent{Deps: d, cfg: c, instance: d.Instance, base: base, cancelBase: cancel,
		runs: map[string]*run{}, queued: map[string]queuedSend{}, folding: map[string]bool{},
		background: map[string]int{}, foldFails: map[string]int{}, foldWait: map[string]int{}}
}

// Subscribe adds a consumer of the event stream: every event of every run reaches each
// consumer, in the order they subscribed (e.g. the websocket hub, then the recorder).
// Call it before the first Send; it is not safe to call concurrently with runs.
func (a *Agent) Subscribe(s Sink) { a.sinks = append(a.sinks, s) }

// ValidateText checks a user message before anything is stored.
func (a *Agent) ValidateText(text string) error {
	if len(text) > a.cfg.MaxMessageBytes {
		return errs.E(errs.TooLarge, "Message is too long: %d bytes, the limit is %d.", len(text), a.cfg.MaxMessageBytes)
	}
	if !utf8.ValidString(text) {
		return errs.E(errs.Invalid, "Message is not valid UTF-8 text.")
	}
	if strings.TrimSpace(text) == "" {
		return errs.E(errs.Invalid, "Message is empty.")
	}
	return nil
}

// Send commits the user's message to session s and starts the reply in the background.
// The caller has already checked that the user owns the session. While the session is
// answering, one message waits in a queue (EventQueued) and is sent when the reply ends;
// a further one gets errs.Busy and nothing is stored. errs.Unavailable means the server
// is shutting down.
func (a *Agent) Send(ctx context.Context, s store.Session, text string) error {
	return a.SendFiles(ctx, s, text, nil)
}

// SendFiles is Send with attached files: the ids of uploads of s (store.Attachment)
// that no message uses yet; the message and their binding to it are committed in one
// transaction, and an upload that is gone by then fails the send (errs.NotFound) with
// nothing stored. With files, the text may be empty. The caller has checked the files
// (their owner, chat, sizes, and the model's vision for images).
func (a *Agent) SendFiles(ctx context.Context, s store.Session, text string, files []string) error {
	if len(files) > 0 && strings.TrimSpace(text) == "" {
		text = ""
	} else if err := a.ValidateText(text); err != nil {
		return err
	}
	return a.start(ctx, s, turnStart{text: text, files: files})
}

// Edit stores text as a new version of user message id of session s (the old one and
// the turns after it stay, as another branch) and answers it, like Send. It is refused
// with errs.Busy while the chat answers or has a message queued (never queued itself);
// a message of another chat is errs.NotFound, one that is not the user's errs.Invalid,
// and nothing is stored.
func (a *Agent) Edit(ctx context.Context, s store.Session, id int64, text string) error {
	if err := a.ValidateText(text); err != nil {
		return err
	}
	return a.start(ctx, s, turnStart{text: text, edit: id})
}

// Regenerate answers again the turn of assistant message id of session s: the new reply
// is a new version of the old one, which stays as another branch. It is also Retry, after
// an error or a stop. Refused as Edit is; a message that is not a reply is errs.Invalid.
func (a *Agent) Regenerate(ctx context.Context, s store.Session, id int64) error {
	return a.start(ctx, s, turnStart{regen: id})
}

// SelectVersion puts version id of a message of session s on screen, with the turns
// last shown below it, and tells every tab (EventBranch). The next reply is built from
// that branch. Refused with errs.Busy while the chat answers; a message of another chat
// is errs.NotFound.
func (a *Agent) SelectVersion(ctx context.Context, s store.Session, id int64) error {
	r, err := a.reserve(ctx, s, turnStart{flip: true})
	if err != nil {
		return err
	}
	defer a.finish(s.ID, r)
	if err := a.lease(ctx, r, s); err != nil {
		return err
	}
	defer a.releaseLease(r, s)
	if err := a.Store.SelectVersion(ctx, s.ID, id); err != nil {
		return err
	}
	a.publish(Event{Kind: EventBranch, SessionID: s.ID, OwnerID: s.OwnerID})
	return nil
}

// turnStart is what starts a run: a new message (text), a new version of user message
// edit (text), a new version of the reply holding message regen; or, for flip, no run
// at all (the session is only reserved while the branch moves).
type turnStart struct {
	text  string
	files []string // upload ids bound to a new message (Send only)
	edit  int64
	regen int64
	flip  bool
}

// busyMessage is why an edit, a regenerate or a flip is refused while the chat answers.
const busyMessage = "This chat is still answering. Wait for the reply to end (or press Stop), then try again."

func (a *Agent) start(ctx context.Context, s store.Session, st turnStart) error {
	r, err := a.reserve(ctx, s, st)
	if err != nil || r == nil {
		return err // r == nil: queued
	}
	user, err := a.begin(ctx, r, s, st)
	if err != nil {
		a.finish(s.ID, r)
		return err
	}
	go func() {
		defer a.finish(s.ID, r)
		a.runTurn(r.ctx, r, s, user, st.regen != 0)
	}()
	return nil
}

// reserve registers a run for the session, so that nothing else starts there until
// finish. A plain send finds the session busy and queues (nil run, no error) or is
// refused; an edit, a regenerate or a flip is refused.
func (a *Agent) reserve(ctx context.Context, s store.Session, st turnStart) (*run, error) {
	plain := st.edit == 0 && st.regen == 0 && !st.flip
	a.mu.Lock()
	for {
		if a.closed {
			a.mu.Unlock()
			return nil, errs.E(errs.Unavailable, "The server is shutting down.")
		}
		prev, busy := a.runs[s.ID]
		_, full := a.queued[s.ID]
		if !plain && full {
			a.mu.Unlock()
			return nil, errs.E(errs.Busy, busyMessage)
		}
		if !busy {
			break
		}
		if !prev.ending {
			if !plain {
				a.mu.Unlock()
				return nil, errs.E(errs.Busy, busyMessage)
			}
			if full {
				a.mu.Unlock()
				return nil, errs.E(errs.Busy, "This chat is still answering and a message is already queued. Wait for the reply or press Stop.")
			}
			a.queued[s.ID] = queuedSend{session: s, text: st.text, files: st.files}
			a.mu.Unlock()
			a.publish(Event{Kind: EventQueued, SessionID: s.ID, Text: st.text})
			return nil, nil
		}
		// The previous reply is saved and its EventFinal is going out: a client that
		// sends as soon as it sees that event must not be told the chat is busy.
		a.mu.Unlock()
		select {
		case <-prev.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("agent: send: %w", ctx.Err())
		}
		a.mu.Lock()
	}
	runCtx, cancel := context.WithCancelCause(context.Background())
	r := &run{id: a.NewID(), ctx: runCtx, cancel: cancel, done: make(chan struct{})}
	a.runs[s.ID] = r
	a.wg.Add(1)
	a.mu.Unlock()
	return r, nil
}

// begin takes the session lease and commits what the turn answers: the user's new
// message (with its files bound to it), or a new version of one (edit), or room for a
// new version of a reply (regen, which answers the turn's stored user message).
func (a *Agent) begin(ctx context.Context, r *run, s store.Session, st turnStart) (*store.Message, error) {
	if err := a.lease(ctx, r, s); err != nil {
		return nil, err
	}
	user := &store.Message{SessionID: s.ID, Role: store.RoleUser, Content: st.text, Status: store.StatusComplete}
	user.Tokens = a.countTokens(user)
	for _, id := range st.files {
		user.Attachments = append(user.Attachments, store.Attachment{ID: id})
	}
	var err error
	var versions *store.Versions
	kind := EventUserMessage
	switch {
	case st.edit != 0:
		err, kind = a.Store.EditUserMessage(ctx, st.edit, user), EventBranch
	case st.regen != 0:
		var u store.Message
		var v store.Versions
		u, v, err = a.Store.BranchReply(ctx, s.ID, st.regen)
		user, versions, kind = &u, &v, EventBranch
	default:
		err = a.Store.AppendMessage(ctx, user)
	}
	if err != nil {
		a.releaseLease(r, s)
		return nil, fmt.Errorf("agent: save user message: %w", err)
	}
	if len(st.files) > 0 || st.edit != 0 {
		// What the chat shows of them (names, kinds, sizes; no data); an edit carries
		// the files of the version it replaces.
		atts, err := a.Store.MessageAttachments(ctx, s.ID, []int64{user.ID})
		if err != nil {
			a.Log.Warn("agent: read attachments", "session", s.ID, "err", err)
		}
		user.Attachments = atts[user.ID]
	}
	a.publish(Event{Kind: kind, RunID: r.id, SessionID: s.ID, OwnerID: s.OwnerID, Message: user, Versions: versions})
	return user, nil
}

// lease takes the session lease for r (taking it at once from a dead process, else
// waiting for another process's lease to end or expire).
func (a *Agent) lease(ctx context.Context, r *run, s store.Session) error {
	deadline := a.Now().Add(a.cfg.LeaseWait)
	told := false
	for {
		ok, err := a.Store.AcquireLease(ctx, s.ID, a.holder(r), a.cfg.LeaseTTL)
		if err == nil && !ok {
			ok, err = a.takeFromDead(ctx, s.ID, a.holder(r))
		}
		if err != nil {
			return fmt.Errorf("agent: take lease: %w", err)
		}
		if ok {
			return nil
		}
		if a.Now().After(deadline) {
			return errs.E(errs.Busy, "This chat is answering in another Atrium process. Try again in a moment.")
		}
		if !told {
			// A live process is still answering: say why nothing happens yet.
			told = true
			a.publish(Event{Kind: EventNotice, SessionID: s.ID, Text: WaitingNotice})
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("agent: take lease: %w", ctx.Err())
		}
	}
}

// WaitingNotice is shown while a send waits for another live process's reply in the chat.
const WaitingNotice = "Waiting for the previous reply to end…"

// takeFromDead takes the session's lease for holder when its current holder belongs to
// a process that is gone, and closes that process's unfinished reply. It reports false
// when the holder is alive (or unknown), or someone else took the lease first.
func (a *Agent) takeFromDead(ctx context.Context, sessionID, holder string) (bool, error) {
	if a.Alive == nil {
		return false, nil
	}
	from, err := a.Store.LeaseHolder(ctx, sessionID)
	if err != nil || from == "" {
		return false, err // "": released meanwhile; the next AcquireLease gets it
	}
	inst, _, _ := strings.Cut(from, "/")
	if inst == a.instance || a.Alive(inst) {
		return false, nil
	}
	ok, err := a.Store.TakeLease(ctx, sessionID, holder, from, a.cfg.LeaseTTL)
	if err != nil || !ok {
		return false, err
	}
	a.Log.Info("agent: took over the lease of a stopped process", "session", sessionID, "from", from)
	if err := a.closeDeadRun(ctx, sessionID); err != nil {
		if rerr := a.Store.ReleaseLease(context.WithoutCancel(ctx), sessionID, holder); rerr != nil {
			a.Log.Warn("agent: release lease", "session", sessionID, "err", rerr)
		}
		return false, err
	}
	return true, nil
}

// closeDeadRun marks the reply of a run whose process died. Its streamed text is
// already stored, marked interrupted (see store.ReplyInterrupted); what is left is a run
// that died with no reply row yet (before the first model call, or while a tool ran):
// an empty interrupted reply is added so that the chat says so. The caller holds the lease.
func (a *Agent) closeDeadRun(ctx context.Context, sessionID string) error {
	last, _, err := a.Store.LatestMessages(ctx, sessionID, 1)
	if err != nil || len(last) == 0 {
		return err
	}
	if m := last[0]; m.Role == store.RoleAssistant && len(m.ToolCalls) == 0 {
		return nil // a reply (finished, or the interrupted draft)
	}
	m := &store.Message{SessionID: sessionID, Role: store.RoleAssistant, Status: store.StatusStopped, Error: store.ReplyInterrupted}
	return a.Store.AppendMessage(ctx, m)
}

// RecoverDeadRuns closes the runs of processes that are gone (see Deps.Alive): their
// leases are dropped and their unfinished replies marked interrupted, so that a
// restarted Atrium answers at once. Call it at start-up; it returns how many it closed.
func (a *Agent) RecoverDeadRuns(ctx context.Context) (int, error) {
	if a.Alive == nil {
		return 0, nil
	}
	leases, err := a.Store.Leases(ctx)
	if err != nil {
		return 0, err
	}
	holder := a.instance + "/recover"
	n := 0
	for _, l := range leases {
		ok, err := a.takeFromDead(ctx, l.SessionID, holder)
		if err != nil {
			return n, fmt.Errorf("agent: recover session %s: %w", l.SessionID, err)
		}
		if !ok {
			continue
		}
		n++
		if err := a.Store.ReleaseLease(ctx, l.SessionID, holder); err != nil {
			return n, fmt.Errorf("agent: recover session %s: %w", l.SessionID, err)
		}
	}
	return n, nil
}

// Instance names this process in the lease holders it writes ("<instance>/<run>").
func (a *Agent) Instance() string { return a.instance }

func (a *Agent) holder(r *run) string { return a.instance + "/" + r.id }

func (a *Agent) releaseLease(r *run, s store.Session) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := a.Store.ReleaseLease(ctx, s.ID, a.holder(r)); err != nil {
		a.Log.Warn("agent: release lease", "session", s.ID, "err", err)
	}
}

// keepLease renews the run's lease until stop is called; losing it cancels the run.
func (a *Agent) keepLease(r *run, s store.Session) (stop func()) {
	quit := make(chan struct{})
	go func() {
		t := time.NewTicker(a.cfg.LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), a.cfg.LeaseTTL/3)
				ok, err := a.Store.RenewLease(ctx, s.ID, a.holder(r), a.cfg.LeaseTTL)
				cancel()
				if err != nil {
					a.Log.Warn("agent: renew lease", "session", s.ID, "err", err)
				} else if !ok {
					r.cancel(ErrLeaseLost)
					return
				}
			}
		}
	}()
	return func() { close(quit) }
}

// finish removes the run and starts the queued message, if any.
func (a *Agent) finish(sessionID string, r *run) {
	r.cancel(nil)
	a.mu.Lock()
	delete(a.runs, sessionID)
	q, hasQueued := a.queued[sessionID]
	delete(a.queued, sessionID)
	closed := a.closed
	a.mu.Unlock()
	close(r.done)
	a.wg.Done()
	if !hasQueued {
		return
	}
	if closed {
		a.publish(Event{Kind: EventNotice, SessionID: sessionID, Text: "Your queued message was not sent: the server is shutting down."})
		return
	}
	if err := a.SendFiles(context.Background(), q.session, q.text, q.files); err != nil {
		a.publish(Event{Kind: EventNotice, SessionID: sessionID, Text: "Your queued message was not sent: " + errs.Message(err)})
	}
}

func (a *Agent) publish(ev Event) {
	if ev.At.IsZero() {
		ev.At = a.Now()
	}
	for _, sink := range a.sinks {
		sink.Publish(ev)
	}
}

// Stop cancels the session's run; the partial reply is kept, marked stopped. A queued
// message is dropped too. It reports whether a run was in progress.
func (a *Agent) Stop(sessionID string) bool {
	a.mu.Lock()
	r, ok := a.runs[sessionID]
	ok = ok && !r.ending // an ending run's reply is already saved
	_, hadQueued := a.queued[sessionID]
	delete(a.queued, sessionID)
	a.mu.Unlock()
	if hadQueued {
		a.publish(Event{Kind: EventNotice, SessionID: sessionID, Text: "Stopped; the queued message was dropped."})
	}
	if ok {
		r.cancel(ErrStopped)
	}
	return ok
}

// Busy reports whether the session has a run or a summary fold in progress.
func (a *Agent) Busy(sessionID string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.runs[sessionID]
	return ok || a.background[sessionID] > 0
}

// Shutdown refuses new runs, cancels the running ones and waits until their partial
// replies are saved, or ctx ends.
func (a *Agent) Shutdown(ctx context.Context) error {
	a.mu.Lock()
	a.closed = true
	for _, r := range a.runs {
		r.cancel(ErrShutdown)
	}
	a.mu.Unlock()
	a.cancelBase()
	done := make(chan struct{})
	go func() { a.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("agent: shutdown: %w", ctx.Err())
	}
}
