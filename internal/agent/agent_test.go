package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"atrium/internal/agent"
	"atrium/internal/app"
	"atrium/internal/config"
	"atrium/internal/contextwin"
	"atrium/internal/errs"
	"atrium/internal/llm"
	"atrium/internal/llm/llmtest"
	"atrium/internal/memory"
	"atrium/internal/providers"
	"atrium/internal/store"
	"atrium/internal/tools"
	"atrium/internal/trace"
)

// recorder is a Sink that keeps every event.
type recorder struct {
	mu      sync.Mutex
	events  []agent.Event
	changed chan struct{}
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{}, 1)} }

func (r *recorder) Publish(ev agent.Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *recorder) all() []agent.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

func (r *recorder) count(kind agent.EventKind) int {
	n := 0
	for _, ev := range r.all() {
		if ev.Kind == kind {
			n++
		}
	}
	return n
}

// waitFor waits until at least n events of kind arrived and returns the n-th.
func (r *recorder) waitFor(t *testing.T, kind agent.EventKind, n int) agent.Event {
	t.Helper()
	return r.waitForWithin(t, kind, n, 5*time.Second)
}

// waitForWithin is waitFor with a deadline of d.
func (r *recorder) waitForWithin(t *testing.T, kind agent.EventKind, n int, d time.Duration) agent.Event {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		seen := 0
		for _, ev := range r.all() {
			if ev.Kind == kind {
				seen++
				if seen == n {
					return ev
				}
			}
		}
		select {
		case <-r.changed:
		case <-deadline.C:
			t.Fatalf("timed out waiting for event #%d of kind %d; got %d events", n, kind, len(r.all()))
		}
	}
}

// waitFinal waits for the n-th committed reply.
func (r *recorder) waitFinal(t *testing.T, n int) *store.Message {
	t.Helper()
	return r.waitFor(t, agent.EventFinal, n).Message
}

type harness struct {
	db      *store.DB
	llm     *llmtest.Server
	sink    *recorder
	agent   *agent.Agent
	session store.Session
	tools   *tools.Registry
	trace   *trace.Recorder
	record  *trace.Consumer // writes the runs in the background: Flush before reading them
	memory  *memory.Service
	cfg     config.Config // what the app was built with, for a second "process" on the same data
	opts    app.Options
}

type options struct {
	noProvider bool
	apiKey     string
	cfg        agent.Config
	tools      []tools.Tool // more tools, registered after the built-ins
	log        *slog.Logger
	window     int // config.Config.ContextWindow, as ATRIUM_CONTEXT_WINDOW sets it
}

const apiKey = "sk-test-SECRET-abcdef123456"

// newHarness builds the app as main does, on a fresh data directory, with a fake model
// configured (unless noProvider) and a session owned by "ann".
// The model timeouts are 1 s: long enough that a loaded 2-core machine (load 30) never
// stalls a scripted reply past them, short enough for the stall tests.
func newHarness(t *testing.T, o options) *harness {
	t.Helper()
	ctx := context.Background()
	fake := llmtest.NewServer(t)
	sink := newRecorder()
	cfg := config.Config{DataDir: t.TempDir(), ModelStartTimeout: time.Second, ModelIdleTimeout: time.Second,
		ContextWindow: o.window}
	opts := app.Options{Agent: o.cfg, Tools: o.tools, Sinks: []agent.Sink{sink}, Log: o.log}
	a := startApp(t, cfg, opts)
	db := a.Store
	if !o.noProvider {
		p := &store.Provider{Name: "Fake", Kind: store.KindOpenAI, BaseURL: fake.URL(), Models: []string{"fake-model"}}
		if err := db.CreateProvider(ctx, p); err != nil {
			t.Fatal(err)
		}
		if o.apiKey != "" {
			sealed, err := a.Keys.Seal(ctx, 0, []byte(o.apiKey), providers.KeyAD(p.ID))
			if err != nil {
				t.Fatal(err)
			}
			p.APIKeySealed = sealed
			if err := db.UpdateProvider(ctx, *p); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.SetSetting(ctx, providers.DefaultModelSetting, providers.Value(p.ID, "fake-model")); err != nil {
			t.Fatal(err)
		}
	}
	u := &store.User{Username: "ann", PasswordHash: "x", Role: store.RoleUser}
	if err := db.CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	s := &store.Session{ID: "session-1", OwnerID: u.ID}
	if err := db.CreateSession(ctx, s); err != nil {
		t.Fatal(err)
	}
	return &harness{db: db, llm: fake, sink: sink, agent: a.Agent, session: *s, tools: a.Tools, trace: a.Recorder, memory: a.Memory,
		record: a.Recording, cfg: cfg, opts: opts}
}

// startApp builds Atrium with app.New and shuts it down when the test ends, so that no
// run is left writing into a closed database.
func startApp(t *testing.T, cfg config.Config, opts app.Options) *app.App {
	t.Helper()
	a, err := app.New(context.Background(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := a.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		a.Close()
	})
	return a
}

func (h *harness) messages(t *testing.T) []store.Message {
	t.Helper()
	msgs, _, err := h.db.LatestMessages(context.Background(), h.session.ID, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

func (h *harness) send(t *testing.T, text string) {
	t.Helper()
	if err := h.agent.Send(context.Background(), h.session, text); err != nil {
		t.Fatalf("send %q: %v", text, err)
	}
}

func TestReplyIsStreamedAndCommitted(t *testing.T) {
	h := newHarness(t, options{})
	full := "Hello there, this is a **streamed** reply.\n\nSecond paragraph."
	h.llm.Enqueue(llmtest.Reply{Text: llmtest.Words(full), Usage: &llm.Usage{InputTokens: 5, OutputTokens: 9}})

	h.send(t, "Hi!")
	final := h.sink.waitFinal(t, 1)

	if final.Status != store.StatusComplete || final.Content != full || final.Error != "" {
		t.Fatalf("final = status %q content %q error %q; want complete %q", final.Status, final.Content, final.Error, full)
	}
	if final.Model != "fake-model" || final.Tokens <= 0 {
		t.Errorf("final model %q tokens %d, want fake-model and a token count", final.Model, final.Tokens)
	}

	h.sink.waitFor(t, agent.EventRunEnded, 1) // the run's last event follows the final one
	evs := h.sink.all()
	var kinds []agent.EventKind
	var streamed strings.Builder
	runID := evs[0].RunID
	for i, ev := range evs {
		if ev.SessionID != h.session.ID {
			t.Errorf("event for session %q", ev.SessionID)
		}
		// One run: every event carries its id, and its run events are numbered 1, 2, …
		if ev.RunID != runID || runID == "" || (i > 0 && ev.Seq != i) {
			t.Errorf("event %d (%s): run %q seq %d, want run %q seq %d", i, ev.Kind, ev.RunID, ev.Seq, runID, i)
		}
		if len(kinds) == 0 || kinds[len(kinds)-1] != ev.Kind {
			kinds = append(kinds, ev.Kind)
		}
		if ev.Kind == agent.EventText {
			streamed.WriteString(ev.Text)
		}
	}
	want := []agent.EventKind{agent.EventUserMessage, agent.EventRunStarted, agent.EventMemory, agent.EventContext, agent.EventToolsSelected,
		agent.EventModelRequest, agent.EventText, agent.EventModelResponse, agent.EventFinal, agent.EventRunEnded}
	if !slices.Equal(kinds, want) {
		t.Errorf("event kinds (runs collapsed) = %v, want %v", kinds, want)
	}
	if streamed.String() != full {
		t.Errorf("streamed text %q, want %q", streamed.String(), full)
	}
	if evs[0].Message == nil || evs[0].Message.Content != "Hi!" || evs[0].Message.Seq != 1 {
		t.Errorf("user message event = %+v", evs[0].Message)
	}
	if evs[1].Model != "fake-model" {
		t.Errorf("run started with model %q", evs[1].Model)
	}

	msgs := h.messages(t)
	if len(msgs) != 2 {
		t.Fatalf("stored %d messages, want 2", len(msgs))
	}
	if msgs[0].Role != "user" || msgs[0].Content != "Hi!" || msgs[0].Status != store.StatusComplete {
		t.Errorf("stored user message %+v", msgs[0])
	}
	if msgs[1].Role != store.RoleAssistant || msgs[1].Content != full || msgs[1].Status != store.StatusComplete || msgs[1].Seq != final.Seq {
		t.Errorf("stored reply %+v", msgs[1])
	}
}

func TestStopKeepsPartialReply(t *testing.T) {
	h := newHarness(t, options{})
	full := strings.Repeat("word ", 60)
	h.llm.Enqueue(llmtest.Reply{Text: llmtest.Words(full), ChunkDelay: 20 * time.Millisecond})

	h.send(t, "Tell me a long story")
	h.sink.waitFor(t, agent.EventText, 1)
	if !h.agent.Stop(h.session.ID) {
		t.Fatal("Stop reported no run in progress")
	}
	final := h.sink.waitFinal(t, 1)

	if final.Status != store.StatusStopped {
		t.Fatalf("status %q (error %q), want stopped", final.Status, final.Error)
	}
	if final.Content == "" || !strings.HasPrefix(full, final.Content) || len(final.Content) >= len(full) {
		t.Errorf("partial content %q is not a non-empty strict prefix of the reply", final.Content)
	}
	msgs := h.messages(t)
	// Stopped by the user: no "interrupted" mark (that is for a process that died).
	if len(msgs) != 2 || msgs[1].Status != store.StatusStopped || msgs[1].Content != final.Content || msgs[1].Error != "" {
		t.Fatalf("stored %+v", msgs)
	}
	if h.agent.Stop(h.session.ID) {
		t.Error("Stop after the run ended reported a run in progress")
	}
}

// A Stop that lands before the model is even asked (a double click on Send, then
// Stop) is a stop, not a server error.
func TestStopBeforeReplyStarts(t *testing.T) {
	h := newHarness(t, options{})
	// On the run's goroutine, as the user message is published: the harness's sink
	// follows the recording and would see it only after the model was asked.
	h.agent.Subscribe(publishFunc(func(ev agent.Event) {
		if ev.Kind == agent.EventUserMessage {
			h.agent.Stop(ev.SessionID)
		}
	}))

	h.send(t, "Never mind")
	final := h.sink.waitFinal(t, 1)
	if final.Status != store.StatusStopped || final.Error != "" {
		t.Errorf("reply status %q error %q, want stopped without an error", final.Status, final.Error)
	}
	if n := len(h.llm.Requests()); n != 0 {
		t.Errorf("the model was called %d times after Stop", n)
	}
}

// A client that sends its next message the moment it sees the final reply (the
// browser re-enables the composer on that frame) is not told the chat is busy.
func TestSendRightAfterFinal(t *testing.T) {
	h := newHarness(t, options{})
	sent := make(chan error, 1)
	// As the browser sees the final frame: from the hub, on the run's goroutine.
	h.agent.Subscribe(publishFunc(func(ev agent.Event) {
		if ev.Kind == agent.EventFinal && ev.Message.Content == "first reply" {
			go func() { sent <- h.agent.Send(context.Background(), h.session, "next") }()
			time.Sleep(50 * time.Millisecond) // a slow browser connection
		}
	}))
	h.llm.Enqueue(llmtest.Reply{Text: []string{"first reply"}}, llmtest.Reply{Text: []string{"second reply"}})

	h.send(t, "first")
	if err := <-sent; err != nil {
		t.Fatalf("send right after the final event: %v", err)
	}
	if final := h.sink.waitFinal(t, 2); final.Content != "second reply" {
		t.Fatalf("second reply %+v", final)
	}
	h.sink.waitFor(t, agent.EventRunEnded, 2)
	var kinds []agent.EventKind
	for _, ev := range h.sink.all() {
		if ev.Kind != agent.EventText {
			kinds = append(kinds, ev.Kind)
		}
	}
	// The next turn's events come after the previous final, never interleaved.
	turn := []agent.EventKind{agent.EventUserMessage, agent.EventRunStarted, agent.EventMemory, agent.EventContext, agent.EventToolsSelected,
		agent.EventModelRequest, agent.EventModelResponse, agent.EventFinal, agent.EventRunEnded}
	want := append(slices.Clone(turn), turn...)
	if !slices.Equal(kinds, want) {
		t.Errorf("events %v, want %v", kinds, want)
	}
}

func TestProviderFailuresAreSavedAsErrors(t *testing.T) {
	tests := []struct {
		name  string
		reply llmtest.Reply
		want  []string // substrings of the saved error
	}{
		{"unauthorized", llmtest.Reply{Status: 401,
			ErrorBody: `{"error":{"message":"Incorrect API key provided: ` + apiKey + `","code":"invalid_api_key"}}`},
			[]string{"401", "API key"}},
		{"rate limited", llmtest.Reply{Status: 429}, []string{"429", "rate limit"}},
		{"server error", llmtest.Reply{Status: 500}, []string{"500", "server error"}},
		{"never starts", llmtest.Reply{StallBeforeHeaders: time.Minute}, []string{"did not start"}},
		{"stalls mid-reply", llmtest.Reply{Text: []string{"Partial ", "answer ", "never ", "ends"}, StallAfter: 2}, []string{"stopped sending"}},
		{"connection breaks", llmtest.Reply{Text: []string{"Partial ", "answer ", "never ", "ends"}, BreakAfter: 2}, []string{"broke"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, options{apiKey: apiKey})
			h.llm.Enqueue(tt.reply)

			h.send(t, "Hello?")
			final := h.sink.waitFinal(t, 1)

			msgs := h.messages(t)
			if len(msgs) != 2 {
				t.Fatalf("stored %d messages, want the user message and one reply: %+v", len(msgs), msgs)
			}
			if msgs[0].Role != "user" || msgs[0].Content != "Hello?" {
				t.Errorf("user message not kept: %+v", msgs[0])
			}
			got := msgs[1]
			if got.Role != store.RoleAssistant || got.Status != store.StatusError || got.Seq != final.Seq {
				t.Fatalf("reply %+v, want one assistant message with status error", got)
			}
			for _, w := range tt.want {
				if !strings.Contains(strings.ToLower(got.Error), strings.ToLower(w)) {
					t.Errorf("error %q does not mention %q", got.Error, w)
				}
			}
			if tt.reply.StallAfter+tt.reply.BreakAfter > 0 && got.Content != "Partial answer " {
				t.Errorf("a reply that failed mid-stream kept %q, want its partial text", got.Content)
			}
			if strings.Contains(got.Error, "SECRET") || strings.Contains(got.Content, "SECRET") {
				t.Errorf("the API key leaked into the saved reply: %q", got.Error)
			}
			if auth := h.llm.LastRequest().Header.Get("Authorization"); auth != "Bearer "+apiKey {
				t.Errorf("provider got Authorization %q, want the sealed key opened", auth)
			}
		})
	}
}

func TestNoModelConfigured(t *testing.T) {
	h := newHarness(t, options{noProvider: true})
	h.send(t, "Anyone there?")
	final := h.sink.waitFinal(t, 1)

	if final.Status != store.StatusError || !strings.Contains(final.Error, "No model is configured") || !strings.Contains(final.Error, "Settings") {
		t.Errorf("reply %q / %q, want an error telling the admin to configure a model in Settings", final.Status, final.Error)
	}
	if n := h.sink.count(agent.EventRunStarted); n != 0 {
		t.Errorf("%d run-started events without a model", n)
	}
	if n := len(h.llm.Requests()); n != 0 {
		t.Errorf("the fake provider got %d requests", n)
	}
	if msgs := h.messages(t); len(msgs) != 2 || msgs[0].Content != "Anyone there?" || msgs[1].Status != store.StatusError {
		t.Errorf("stored %+v", msgs)
	}
}

// TestSendsWhileBusyQueueThenRefuse: while a reply streams, one more message waits in
// the queue and is answered after it, in order; a further one is refused and not stored.
func TestSendsWhileBusyQueueThenRefuse(t *testing.T) {
	h := newHarness(t, options{})
	h.llm.Enqueue(llmtest.Reply{Text: llmtest.Words("first reply is slow"), ChunkDelay: 40 * time.Millisecond},
		llmtest.Reply{Text: []string{"second reply"}})

	h.send(t, "first")
	h.sink.waitFor(t, agent.EventText, 1)
	if err := h.agent.Send(context.Background(), h.session, "second"); err != nil {
		t.Fatalf("second send: %v, want it queued", err)
	}
	// The sink follows the recording: it gets the event once the events before it are written.
	h.sink.waitFor(t, agent.EventQueued, 1)
	err := h.agent.Send(context.Background(), h.session, "third")
	if !errs.Is(err, errs.Busy) {
		t.Fatalf("third send: %v, want errs.Busy", err)
	}
	if msgs := h.messages(t); len(msgs) != 1 || msgs[0].Content != "first" {
		t.Fatalf("while busy the store holds %+v, want only the first message", msgs)
	}
	h.sink.waitFinal(t, 2)
	var got []string
	for _, m := range h.messages(t) {
		got = append(got, m.Role+":"+m.Content)
	}
	want := "user:first assistant:first reply is slow user:second assistant:second reply"
	if strings.Join(got, " ") != want {
		t.Errorf("stored %q, want %q", strings.Join(got, " "), want)
	}
}

// TestStopDropsQueuedMessage: Stop ends the reply and drops the queued message.
func TestStopDropsQueuedMessage(t *testing.T) {
	h := newHarness(t, options{})
	h.llm.Enqueue(llmtest.Reply{Text: []string{"Thinking ", "hard"}, StallAfter: 1})

	h.send(t, "first")
	h.sink.waitFor(t, agent.EventText, 1)
	if err := h.agent.Send(context.Background(), h.session, "second"); err != nil {
		t.Fatal(err)
	}
	h.agent.Stop(h.session.ID)
	h.sink.waitFinal(t, 1)
	msgs := h.messages(t)
	if len(msgs) != 2 || msgs[1].Status != store.StatusStopped {
		t.Fatalf("after stop: %+v", msgs)
	}
	// The session takes messages again once the run ended.
	h.send(t, "third")
	if final := h.sink.waitFinal(t, 2); final.Status != store.StatusComplete {
		t.Errorf("next reply %+v", final)
	}
	if msgs := h.messages(t); len(msgs) != 4 || msgs[2].Content != "third" {
		t.Errorf("stored %+v, want the queued message dropped", msgs)
	}
}

func TestInvalidMessagesAreRefused(t *testing.T) {
	h := newHarness(t, options{cfg: agent.Config{MaxMessageBytes: 1024}})
	tests := []struct {
		name, text, code string
	}{
		{"over the limit", strings.Repeat("a", 1025), errs.TooLarge},
		{"invalid utf-8", "caf\xc3\x28 \xff", errs.Invalid},
		{"empty", "", errs.Invalid},
		{"only spaces", " \n\t ", errs.Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := h.agent.Send(context.Background(), h.session, tt.text)
			if !errs.Is(err, tt.code) {
				t.Fatalf("Send: %v, want %s", err, tt.code)
			}
			if errs.Message(err) == errs.Message(fmt.Errorf("internal")) {
				t.Errorf("message %q does not say what is wrong", errs.Message(err))
			}
		})
	}
	if msgs := h.messages(t); len(msgs) != 0 {
		t.Errorf("stored %+v", msgs)
	}
	if evs := h.sink.all(); len(evs) != 0 {
		t.Errorf("published %d events", len(evs))
	}
	if n := len(h.llm.Requests()); n != 0 {
		t.Errorf("the provider was called %d times", n)
	}
	// Exactly at the limit is fine.
	h.send(t, strings.Repeat("a", 1024))
	if final := h.sink.waitFinal(t, 1); final.Status != store.StatusComplete {
		t.Errorf("reply to a message at the limit: %+v", final)
	}
}

func TestShutdownSavesPartialReply(t *testing.T) {
	h := newHarness(t, options{})
	h.llm.Enqueue(llmtest.Reply{Text: []string{"The ", "answer ", "is ", "coming"}, StallAfter: 2})

	h.send(t, "Question")
	h.sink.waitFor(t, agent.EventText, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.agent.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	// Shutdown returned, so the reply must already be committed.
	msgs := h.messages(t)
	if len(msgs) != 2 {
		t.Fatalf("stored %+v", msgs)
	}
	if got := msgs[1]; got.Status != store.StatusStopped || got.Content != "The answer " {
		t.Errorf("reply after shutdown: status %q content %q, want stopped \"The answer \"", got.Status, got.Content)
	}
	h.sink.waitFor(t, agent.EventRunEnded, 1) // the sink follows the recording
	if n := h.sink.count(agent.EventFinal); n != 1 {
		t.Errorf("%d final events, want 1", n)
	}
	if err := h.agent.Send(context.Background(), h.session, "more"); !errs.Is(err, errs.Unavailable) {
		t.Errorf("send after shutdown: %v, want errs.Unavailable", err)
	}
}

func TestModelGetsHistoryInOrder(t *testing.T) {
	h := newHarness(t, options{cfg: agent.Config{SystemPrompt: "Be brief."}})
	h.llm.Enqueue(
		llmtest.Reply{Text: []string{"Paris."}},
		llmtest.Reply{Status: 500},
		llmtest.Reply{Text: []string{"About 2 million."}},
	)

	h.send(t, "Capital of France?")
	h.sink.waitFinal(t, 1)
	h.send(t, "And of Italy?")
	h.sink.waitFinal(t, 2)
	h.send(t, "Population of Paris?")
	h.sink.waitFinal(t, 3)

	got := h.llm.LastRequest().Chat
	if got.Model != "fake-model" || !got.Stream {
		t.Errorf("request model %q stream %v", got.Model, got.Stream)
	}
	var roles, contents []string
	for _, m := range got.Messages {
		roles = append(roles, m.Role)
		contents = append(contents, m.Content)
	}
	// The failed reply carries no text for the model: a placeholder stands in for it, so
	// that two user messages never follow each other.
	wantRoles := []string{"system", "user", "assistant", "user", "assistant", "user"}
	wantContents := []string{"Be brief.", "Capital of France?", "Paris.", "And of Italy?", contextwin.NoReply, "Population of Paris?"}
	if !slices.Equal(roles, wantRoles) || !slices.Equal(contents, wantContents) {
		t.Errorf("model got roles %q contents %q\nwant %q %q", roles, contents, wantRoles, wantContents)
	}
	if msgs := h.messages(t); len(msgs) != 6 || msgs[5].Content != "About 2 million." {
		t.Errorf("stored %d messages", len(msgs))
	}
}

// publishFunc is a sink subscribed to the agent itself: it sees each event on the
// run's goroutine as it is published, as the websocket hub does (the harness's sink
// follows the recording).
type publishFunc func(agent.Event)

func (f publishFunc) Publish(ev agent.Event) { f(ev) }
