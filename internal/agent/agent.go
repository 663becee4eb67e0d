// Package agent runs turns: it commits the user's message, asks the model, streams the
// reply to a sink and commits the final assistant message, whatever happens (a finished
// reply, a Stop, a provider failure or shutdown). One run per session at a time.
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

	"atrium/internal/errs"
	"atrium/internal/llm"
	"atrium/internal/store"
)

// Store is what a turn needs of the database.
type Store interface {
	AppendMessage(ctx context.Context, m *store.Message) error
	LatestMessages(ctx context.Context, sessionID string, limit int) ([]store.Message, bool, error)
}

// Resolver turns a session's model choice ("providerID:model", or "" for the default) into
// a provider and the model name to send. Errors are *errs.Error with a message that says
// what to fix (e.g. "No model is configured...").
type Resolver func(ctx context.Context, model string) (llm.Provider, string, error)

// Sink receives every event of every run, in order per session. Publish must not block
// for long: it is called from the run's goroutine. It must not call Send, which may wait
// for the EventFinal being published to be delivered.
type Sink interface {
	Publish(Event)
}

// EventKind says what happened.
type EventKind int

const (
	EventUserMessage EventKind = iota // Message: the committed user message
	EventRunStarted                   // a reply is being generated (Model set)
	EventText                         // Text: a delta of the reply
	EventReasoning                    // Text: a delta of reasoning/thinking
	EventFinal                        // Message: the committed assistant message (complete, stopped or error)
)

// Event is one step of a run. The same stream feeds the UI and, later, the recorder.
type Event struct {
	Kind      EventKind
	SessionID string
	Message   *store.Message
	Text      string
	Model     string
	At        time.Time
}

// Config bounds a turn.
type Config struct {
	MaxMessageBytes int // user message limit in bytes
	HistoryMessages int // how many recent messages go to the model (the context engine replaces this)
	SystemPrompt    string
}

// Agent owns the in-flight runs. It is safe for concurrent use.
type Agent struct {
	store   Store
	resolve Resolver
	sink    Sink
	cfg     Config
	now     func() time.Time
	log     *slog.Logger

	mu     sync.Mutex
	runs   map[string]*run
	closed bool
	wg     sync.WaitGroup
}

type run struct {
	cancel context.CancelCauseFunc
	done   chan struct{} // closed once the run has left a.runs
	ending bool          // the reply is committed; only its EventFinal is still being published
}

// ErrStopped is the cancellation cause when a user presses Stop.
var ErrStopped = errors.New("stopped by the user")

// ErrShutdown is the cancellation cause when the server shuts down.
var ErrShutdown = errors.New("server shutting down")

// New returns an Agent. now may be nil (time.Now).
func New(st Store, resolve Resolver, sink Sink, cfg Config, now func() time.Time, log *slog.Logger) *Agent {
	if now == nil {
		now = time.Now
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = 100 * 1024
	}
	if cfg.HistoryMessages <= 0 {
		cfg.HistoryMessages = 40
	}
	if log == nil {
		log = slog.Default()
	}
	return &Agent{store: st, resolve: resolve, sink: sink, cfg: cfg, now: now, log: log, runs: map[string]*run{}}
}

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
// The caller has already checked that the user owns the session. It returns errs.Busy
// when the session is already answering (nothing is stored then), and errs.Unavailable
// when the server is shutting down.
func (a *Agent) Send(ctx context.Context, s store.Session, text string) error {
	if err := a.ValidateText(text); err != nil {
		return err
	}
	a.mu.Lock()
	for {
		if a.closed {
			a.mu.Unlock()
			return errs.E(errs.Unavailable, "The server is shutting down.")
		}
		prev, busy := a.runs[s.ID]
		if !busy {
			break
		}
		if !prev.ending {
			a.mu.Unlock()
			return errs.E(errs.Busy, "This chat is still answering. Wait for the reply or press Stop.")
		}
		// The previous reply is saved and its EventFinal is going out: a client that
		// sends as soon as it sees that event must not be told the chat is busy.
		a.mu.Unlock()
		select {
		case <-prev.done:
		case <-ctx.Done():
			return fmt.Errorf("agent: send: %w", ctx.Err())
		}
		a.mu.Lock()
	}
	runCtx, cancel := context.WithCancelCause(context.Background())
	r := &run{cancel: cancel, done: make(chan struct{})}
	a.runs[s.ID] = r
	a.wg.Add(1)
	a.mu.Unlock()

	user := &store.Message{SessionID: s.ID, Role: "user", Content: text, Status: store.StatusComplete}
	if err := a.store.AppendMessage(ctx, user); err != nil {
		a.finish(s.ID, r)
		return fmt.Errorf("agent: save user message: %w", err)
	}
	a.sink.Publish(Event{Kind: EventUserMessage, SessionID: s.ID, Message: user, At: a.now()})
	go func() {
		defer a.finish(s.ID, r)
		a.reply(runCtx, s, r)
	}()
	return nil
}

func (a *Agent) finish(sessionID string, r *run) {
	r.cancel(nil)
	a.mu.Lock()
	delete(a.runs, sessionID)
	a.mu.Unlock()
	close(r.done)
	a.wg.Done()
}

// reply streams the model's answer and always ends with exactly one committed assistant
// message and an EventFinal.
func (a *Agent) reply(ctx context.Context, s store.Session, r *run) {
	msg := &store.Message{SessionID: s.ID, Role: "assistant", Status: store.StatusComplete}
	defer func() {
		// Commit with a fresh context: the run's own may be cancelled (Stop, shutdown).
		saveCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := a.store.AppendMessage(saveCtx, msg); err != nil {
			a.log.Error("agent: save reply", "session", s.ID, "err", err)
			msg.Status, msg.Error = store.StatusError, "The reply could not be saved."
		}
		a.mu.Lock()
		r.ending = true
		a.mu.Unlock()
		a.sink.Publish(Event{Kind: EventFinal, SessionID: s.ID, Message: msg, At: a.now()})
	}()

	// A Stop or shutdown that lands before the model answers cancels ctx, which fails
	// the lookups below too; that is a stop, not an error.
	stopped := func() bool {
		if ctx.Err() == nil {
			return false
		}
		msg.Status = store.StatusStopped
		if errors.Is(context.Cause(ctx), ErrShutdown) {
			msg.Error = "Stopped because the server shut down."
		}
		return true
	}

	provider, model, err := a.resolve(ctx, s.Model)
	if err != nil {
		if !stopped() {
			msg.Status, msg.Error = store.StatusError, errs.Message(err)
		}
		return
	}
	msg.Model = model
	a.sink.Publish(Event{Kind: EventRunStarted, SessionID: s.ID, Model: model, At: a.now()})

	history, _, err := a.store.LatestMessages(ctx, s.ID, a.cfg.HistoryMessages)
	if err != nil {
		if !stopped() {
			msg.Status, msg.Error = store.StatusError, "Could not read the conversation history."
			a.log.Error("agent: read history", "session", s.ID, "err", err)
		}
		return
	}
	req := llm.Request{Model: model, Messages: toLLM(a.cfg.SystemPrompt, history)}
	start := a.now()
	resp, err := provider.Stream(ctx, req, func(ev llm.Event) {
		switch ev.Kind {
		case llm.EventText:
			a.sink.Publish(Event{Kind: EventText, SessionID: s.ID, Text: ev.Text, At: a.now()})
		case llm.EventReasoning:
			a.sink.Publish(Event{Kind: EventReasoning, SessionID: s.ID, Text: ev.Text, At: a.now()})
		}
	})
	msg.Content, msg.Reasoning, msg.Tokens = resp.Content, resp.Reasoning, resp.Usage.OutputTokens
	switch {
	case err == nil:
	case stopped():
	default:
		msg.Status, msg.Error = store.StatusError, err.Error()
		var pe *llm.Error
		if !errors.As(err, &pe) {
			msg.Error = "The model call failed."
		}
		a.log.Warn("agent: model call failed", "session", s.ID, "model", model, "err", err)
	}
	a.log.Info("agent: reply", "session", s.ID, "model", model, "status", msg.Status,
		"tokens", msg.Tokens, "duration", a.now().Sub(start))
}

// toLLM maps stored history to provider messages. Failed replies with no text are left
// out: they carry an error for the user, not content for the model.
func toLLM(system string, history []store.Message) []llm.Message {
	out := make([]llm.Message, 0, len(history)+1)
	if system != "" {
		out = append(out, llm.Message{Role: "system", Content: system})
	}
	for _, m := range history {
		if m.Role == "assistant" && m.Content == "" {
			continue
		}
		out = append(out, llm.Message{Role: m.Role, Content: m.Content})
	}
	return out
}

// Stop cancels the session's run; the partial reply is kept, marked stopped.
// It reports whether a run was in progress.
func (a *Agent) Stop(sessionID string) bool {
	a.mu.Lock()
	r, ok := a.runs[sessionID]
	ok = ok && !r.ending // an ending run's reply is already saved
	a.mu.Unlock()
	if ok {
		r.cancel(ErrStopped)
	}
	return ok
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
	done := make(chan struct{})
	go func() { a.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("agent: shutdown: %w", ctx.Err())
	}
}
