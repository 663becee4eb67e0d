package agent_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"atrium/internal/agent"
	"atrium/internal/app"
	"atrium/internal/errs"
	"atrium/internal/llm/llmtest"
	"atrium/internal/store"
	"atrium/internal/store/storetest"
)

// echoReplies makes the fake model answer "reply to <last user message>", slowly
// enough for sends to overlap.
func echoReplies(h *harness) {
	h.llm.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		return llmtest.Reply{Text: llmtest.Words("reply to " + req.LastUser()), ChunkDelay: 10 * time.Millisecond}
	})
}

// checkAlternating checks that the session holds exactly the user messages sent,
// each followed by its own complete reply, and nothing else.
func checkAlternating(t *testing.T, msgs []store.Message, sent ...string) {
	t.Helper()
	if len(msgs) != 2*len(sent) {
		t.Fatalf("stored %d messages, want %d: %v", len(msgs), 2*len(sent), shape(msgs))
	}
	var users []string
	for i := 0; i < len(msgs); i += 2 {
		u, a := msgs[i], msgs[i+1]
		if u.Role != store.RoleUser || a.Role != store.RoleAssistant {
			t.Fatalf("messages %d and %d are %s, %s; want user then assistant: %v", u.Seq, a.Seq, u.Role, a.Role, shape(msgs))
		}
		if a.Content != "reply to "+u.Content || a.Status != store.StatusComplete {
			t.Errorf("reply %q (%s) follows %q", a.Content, a.Status, u.Content)
		}
		users = append(users, u.Content)
	}
	slices.Sort(users)
	want := slices.Sorted(slices.Values(sent))
	if !slices.Equal(users, want) {
		t.Errorf("stored user messages %q, want %q", users, want)
	}
}

// sendAtOnce calls send for every text from its own goroutine, released together.
func sendAtOnce(t *testing.T, send func(i int, text string) error, texts ...string) {
	t.Helper()
	start := make(chan struct{})
	errc := make([]error, len(texts))
	var wg sync.WaitGroup
	for i, text := range texts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errc[i] = send(i, text)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errc {
		if err != nil {
			t.Errorf("send %q: %v", texts[i], err)
		}
	}
}

// TestConcurrentSendsDoNotInterleave: two tabs sending at once to one session get two
// replies, one after the other, each answering its own message.
func TestConcurrentSendsDoNotInterleave(t *testing.T) {
	t.Run("one process", func(t *testing.T) {
		for round := range 3 {
			h := newHarness(t, options{})
			echoReplies(h)
			texts := []string{fmt.Sprintf("tab A %d", round), fmt.Sprintf("tab B %d", round)}

			sendAtOnce(t, func(_ int, text string) error {
				return h.agent.Send(context.Background(), h.session, text)
			}, texts...)
			h.sink.waitFinal(t, 2)
			h.waitIdle(t)

			checkAlternating(t, h.messages(t), texts...)
			if n := h.sink.count(agent.EventFinal); n != 2 {
				t.Errorf("%d final events, want 2", n)
			}
			if n := len(h.llm.Requests()); n != 2 {
				t.Errorf("the model was called %d times, want 2", n)
			}
		}
	})

	// Two Atrium processes on one database: only the lease keeps them apart.
	t.Run("two processes", func(t *testing.T) {
		h := newHarness(t, options{})
		echoReplies(h)
		other := newRecorder()
		opts := h.opts
		opts.Sinks = []agent.Sink{other}
		b := startApp(t, h.cfg, opts).Agent
		agents := []*agent.Agent{h.agent, b}
		texts := []string{"from process A", "from process B"}

		sendAtOnce(t, func(i int, text string) error {
			return agents[i].Send(context.Background(), h.session, text)
		}, texts...)
		h.sink.waitFinal(t, 1)
		other.waitFinal(t, 1)
		h.waitIdle(t)
		waitIdle(t, b, h.session.ID)

		checkAlternating(t, h.messages(t), texts...)
	})
}

// TestLeaseOfCrashedProcessIsTakenOver: a lease left behind by a process that died is
// taken at once (its instance lock is gone), its unfinished reply is marked interrupted,
// and the new reply completes. Before, the send waited for the lease to expire.
func TestLeaseOfCrashedProcessIsTakenOver(t *testing.T) {
	h := newHarness(t, options{cfg: agent.Config{LeaseTTL: 2 * time.Second}})
	echoReplies(h)
	ctx := context.Background()
	// The dead process had committed a user message and nothing else yet.
	if err := h.db.AppendMessage(ctx, &store.Message{SessionID: h.session.ID, Role: store.RoleUser, Content: "lost?"}); err != nil {
		t.Fatal(err)
	}
	ok, err := h.db.AcquireLease(ctx, h.session.ID, "crashed/run", 2*time.Second)
	if err != nil || !ok {
		t.Fatalf("seed the stale lease: %v %v", ok, err)
	}

	start := time.Now()
	h.send(t, "hello again")
	waited := time.Since(start)
	final := h.sink.waitFinal(t, 1)

	if waited > 500*time.Millisecond {
		t.Errorf("Send took %s; a dead process's lease should be taken at once", waited)
	}
	if final.Status != store.StatusComplete || final.Content != "reply to hello again" {
		t.Errorf("final %q %q (error %q)", final.Status, final.Content, final.Error)
	}
	h.waitIdle(t)
	msgs := h.messages(t)
	if len(msgs) != 4 || msgs[1].Role != store.RoleAssistant || msgs[1].Status != store.StatusStopped ||
		msgs[1].Error != store.ReplyInterrupted {
		t.Fatalf("stored %v; want the dead run's message closed by an interrupted reply", shape(msgs))
	}
	checkAlternating(t, msgs[2:], "hello again")
	if n := storetest.Int(t, h.db, `SELECT count(*) FROM session_leases WHERE session_id = ?`, h.session.ID); n != 0 {
		t.Errorf("%d lease rows left after the run ended", n)
	}
}

// TestExpiredLeaseOfLiveProcessIsTakenOver: a lease whose process is alive but stopped
// renewing it is waited out, then taken.
func TestExpiredLeaseOfLiveProcessIsTakenOver(t *testing.T) {
	h := newHarness(t, options{cfg: agent.Config{LeaseTTL: time.Second}})
	echoReplies(h)
	other := startApp(t, h.cfg, app.Options{}).Agent // alive: its instance lock is held
	ctx := context.Background()
	ok, err := h.db.AcquireLease(ctx, h.session.ID, other.Instance()+"/run", time.Second)
	if err != nil || !ok {
		t.Fatalf("seed the lease: %v %v", ok, err)
	}

	start := time.Now()
	h.send(t, "hello again")
	waited := time.Since(start)
	final := h.sink.waitFinal(t, 1)

	if waited < 500*time.Millisecond {
		t.Errorf("Send returned after %s; it should have waited for the live process's lease to expire", waited)
	}
	if waited > 2500*time.Millisecond {
		t.Errorf("Send took %s to take over a lease that expired after 1s", waited)
	}
	if final.Status != store.StatusComplete || final.Content != "reply to hello again" {
		t.Errorf("final %q %q (error %q)", final.Status, final.Content, final.Error)
	}
	h.waitIdle(t)
	checkAlternating(t, h.messages(t), "hello again")
}

// TestLiveLeaseElsewhereRefusesSend: while another process holds and renews the
// session's lease, a send gives up after LeaseWait with errs.Busy and stores nothing.
func TestLiveLeaseElsewhereRefusesSend(t *testing.T) {
	const ttl, wait = time.Second, 600 * time.Millisecond
	h := newHarness(t, options{cfg: agent.Config{LeaseTTL: ttl, LeaseWait: wait}})
	echoReplies(h)
	ctx := context.Background()
	holder := startApp(t, h.cfg, app.Options{}).Agent.Instance() + "/run" // a live process
	if ok, err := h.db.AcquireLease(ctx, h.session.ID, holder, ttl); err != nil || !ok {
		t.Fatalf("take the lease: %v %v", ok, err)
	}
	stop := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if ok, err := h.db.RenewLease(ctx, h.session.ID, holder, ttl); err != nil || !ok {
					t.Errorf("renew: %v %v", ok, err)
					return
				}
			}
		}
	}()
	stopRenewing := func() {
		select {
		case <-stop:
		default:
			close(stop)
			<-renewed
		}
	}
	t.Cleanup(stopRenewing)

	start := time.Now()
	err := h.agent.Send(ctx, h.session, "anyone?")
	took := time.Since(start)

	if !errs.Is(err, errs.Busy) {
		t.Fatalf("Send: %v, want errs.Busy", err)
	}
	if took < wait-100*time.Millisecond || took > wait+time.Second {
		t.Errorf("Send gave up after %s, want about %s", took, wait)
	}
	if msgs := h.messages(t); len(msgs) != 0 {
		t.Errorf("stored %v", shape(msgs))
	}
	// The chat was told why nothing happened, once, and nothing else.
	if evs := h.sink.all(); len(evs) != 1 || evs[0].Kind != agent.EventNotice || evs[0].Text != agent.WaitingNotice {
		t.Errorf("published %+v; want one notice %q", evs, agent.WaitingNotice)
	}
	if n := len(h.llm.Requests()); n != 0 {
		t.Errorf("the model was called %d times", n)
	}
	if h.agent.Busy(h.session.ID) {
		t.Error("the session is still busy after the refused send")
	}

	// Once the other process lets go, the session answers again.
	stopRenewing()
	if err := h.db.ReleaseLease(ctx, h.session.ID, holder); err != nil {
		t.Fatal(err)
	}
	h.send(t, "now?")
	if final := h.sink.waitFinal(t, 1); final.Content != "reply to now?" {
		t.Errorf("final %+v", final)
	}
}
