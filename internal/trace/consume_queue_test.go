package trace_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"atrium/internal/agent"
	"atrium/internal/llm"
	"atrium/internal/store"
	"atrium/internal/testkit"
	"atrium/internal/tools"
	"atrium/internal/trace"
)

// gatedStore is the real store whose batch writes can be held or failed.
type gatedStore struct {
	*store.DB
	mu      sync.Mutex
	gate    chan struct{} // closed: writes go on
	entered chan int      // the size of each batch that reaches the gate
	fail    func(ws []store.RunWrite) error
}

func (g *gatedStore) WriteRuns(ctx context.Context, ws []store.RunWrite) ([]error, error) {
	g.mu.Lock()
	gate, fail, entered := g.gate, g.fail, g.entered
	g.mu.Unlock()
	if entered != nil {
		entered <- len(ws)
	}
	if gate != nil {
		<-gate
	}
	if fail != nil {
		if err := fail(ws); err != nil {
			return nil, err
		}
	}
	return g.DB.WriteRuns(ctx, ws)
}

// toolEvents is a run of n tool results (one span each) and its end.
func toolEvents(runID string, s store.Session, n int) []agent.Event {
	call := llm.ToolCall{ID: "c", Name: "calculator", Arguments: `{"expression":"6*7"}`}
	evs := make([]agent.Event, 0, n+1)
	for range n {
		evs = append(evs, agent.Event{Kind: agent.EventToolResult, ToolCall: &call, Result: &tools.Result{Content: "42"}})
	}
	evs = append(evs, agent.Event{Kind: agent.EventRunEnded, Totals: &agent.RunTotals{Status: store.StatusComplete}})
	for i := range evs {
		evs[i].RunID, evs[i].Seq, evs[i].SessionID, evs[i].OwnerID, evs[i].At = runID, i+1, s.ID, s.OwnerID, time.Now()
	}
	return evs
}

// TestConsumerFullQueueWaits: while the writer is held, Publish returns for as
// many events as the queue holds and then waits; nothing is dropped, and once
// the writer goes on every span is stored, in order.
func TestConsumerFullQueueWaits(t *testing.T) {
	f := newFixture(t)
	g := &gatedStore{DB: f.db, gate: make(chan struct{}), entered: make(chan int, 64)}
	c := trace.NewConsumer(trace.NewRecorder(g, f.red, nil), nil)
	evs := toolEvents("run-full", f.sess, trace.QueueLen+300)
	var published atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, ev := range evs {
			c.Publish(ev)
			published.Add(1)
		}
	}()
	first := <-g.entered // the writer took a batch and waits at the gate
	testkit.Eventually(t, 10*time.Second, "the queue to fill", func() bool {
		return published.Load() >= int64(first+trace.QueueLen)
	})
	select {
	case <-done:
		t.Fatalf("all %d events were taken while the writer was held (queue %d): some were dropped", len(evs), trace.QueueLen)
	default:
	}
	if n := published.Load(); n != int64(first+trace.QueueLen) {
		t.Errorf("Publish returned for %d events with %d in the held batch and a queue of %d", n, first, trace.QueueLen)
	}
	g.mu.Lock()
	close(g.gate)
	g.gate, g.entered = nil, nil
	g.mu.Unlock()
	<-done
	c.Close()
	ri, spans, err := f.rec.Run(context.Background(), f.ann.ID, "run-full")
	mustNil(t, err)
	if ri.Status != trace.StatusComplete || len(spans) != len(evs)-1 {
		t.Fatalf("run %s with %d spans, want complete with %d", ri.Status, len(spans), len(evs)-1)
	}
	for i, s := range spans {
		if s.Seq != i+1 || s.Kind != trace.KindToolCall {
			t.Fatalf("span %d: seq %d kind %s", i, s.Seq, s.Kind)
		}
	}
}

// runChecker is a sink after the recording: at each run's end it reads the run.
type runChecker struct {
	rec   *trace.Recorder
	owner int64
	mu    sync.Mutex
	seen  map[string]string // run id -> "status/spans"
	ended chan string
}

func (r *runChecker) Publish(ev agent.Event) {
	if ev.Kind != agent.EventRunEnded {
		return
	}
	ri, spans, err := r.rec.Run(context.Background(), r.owner, ev.RunID)
	r.mu.Lock()
	if err != nil {
		r.seen[ev.RunID] = err.Error()
	} else {
		r.seen[ev.RunID] = fmt.Sprintf("%s/%d", ri.Status, len(spans))
	}
	r.mu.Unlock()
	r.ended <- ev.RunID
}

// TestConsumerPassesOnWhatIsWritten: a sink after the recording gets a run's
// end once the run is stored whole (what a reply's "How was this answered?" link
// relies on), and the events of concurrent runs in the order each run published them.
func TestConsumerPassesOnWhatIsWritten(t *testing.T) {
	f := newFixture(t)
	check := &runChecker{rec: f.rec, owner: f.ann.ID, seen: map[string]string{}, ended: make(chan string, 8)}
	var mu sync.Mutex
	order := map[string][]int{}
	// The order sink comes first: when the checker tells a run ended, it has the end too.
	c := trace.NewConsumer(f.rec, nil, sinkFunc(func(ev agent.Event) {
		mu.Lock()
		order[ev.RunID] = append(order[ev.RunID], ev.Seq)
		mu.Unlock()
	}), check)
	defer c.Close()
	var wg sync.WaitGroup
	for _, id := range []string{"run-a", "run-b", "run-c"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, ev := range toolEvents(id, f.sess, 5) {
				c.Publish(ev)
			}
		}()
	}
	wg.Wait()
	for range 3 {
		<-check.ended
	}
	for _, id := range []string{"run-a", "run-b", "run-c"} {
		check.mu.Lock()
		got := check.seen[id]
		check.mu.Unlock()
		if got != "complete/5" {
			t.Errorf("%s at its end as the sink saw it: %s, want complete/5", id, got)
		}
		mu.Lock()
		if got := order[id]; len(got) != 6 || !slicesSorted(got) {
			t.Errorf("%s: the sink got seqs %v", id, got)
		}
		mu.Unlock()
	}
}

type sinkFunc func(agent.Event)

func (f sinkFunc) Publish(ev agent.Event) { f(ev) }

func slicesSorted(s []int) bool {
	for i := 1; i < len(s); i++ {
		if s[i] != s[i-1]+1 {
			return false
		}
	}
	return true
}

// TestConsumerWritesAloneWhenABatchFails: a batch whose transaction fails is
// written a write at a time, so one bad write loses nothing else; a write that
// keeps failing is logged with its run and event.
func TestConsumerWritesAloneWhenABatchFails(t *testing.T) {
	f := newFixture(t)
	g := &gatedStore{DB: f.db, fail: func(ws []store.RunWrite) error {
		if len(ws) > 1 {
			return errors.New("the disk is full")
		}
		if ws[0].Span != nil && ws[0].Span.Seq == 3 {
			return errors.New("this span does not fit")
		}
		return nil
	}}
	var logs bytes.Buffer
	c := trace.NewConsumer(trace.NewRecorder(g, f.red, nil), slog.New(slog.NewTextHandler(&logs, nil)))
	for _, ev := range toolEvents("run-retry", f.sess, 5) {
		c.Publish(ev)
	}
	c.Close()
	ri, spans, err := f.rec.Run(context.Background(), f.ann.ID, "run-retry")
	mustNil(t, err)
	var seqs []int
	for _, s := range spans {
		seqs = append(seqs, s.Seq)
	}
	if ri.Status != trace.StatusComplete || len(seqs) != 4 || seqs[2] != 4 {
		t.Errorf("run %s with spans %v, want complete with 1, 2, 4, 5", ri.Status, seqs)
	}
	if n := strings.Count(logs.String(), `msg="trace: record" run=run-retry event=tool_result err="this span does not fit"`); n != 1 {
		t.Errorf("logged the failed span %d times, want once:\n%s", n, logs.String())
	}
}

// TestConsumerIgnoresEventsAfterTheEnd: an event of a run that already ended
// would start the run again from seq 1; it is refused (and logged) instead of
// being written over the run's first span.
func TestConsumerIgnoresEventsAfterTheEnd(t *testing.T) {
	f := newFixture(t)
	var logs bytes.Buffer
	c := trace.NewConsumer(f.rec, slog.New(slog.NewTextHandler(&logs, nil)))
	evs := toolEvents("run-over", f.sess, 2)
	for _, ev := range evs {
		c.Publish(ev)
	}
	c.Flush()
	late := evs[0]
	late.Seq = 9
	late.Result = &tools.Result{Content: "late"}
	c.Publish(late)
	c.Close()
	_, spans, err := f.rec.Run(context.Background(), f.ann.ID, "run-over")
	mustNil(t, err)
	if len(spans) != 2 || bytes.Contains(spans[0].Data, []byte("late")) {
		t.Errorf("after a late event the run holds %d spans, the first %s", len(spans), spans[0].Data)
	}
	if !strings.Contains(logs.String(), `msg="trace: start run" run=run-over`) {
		t.Errorf("the late event was not logged:\n%s", logs.String())
	}
}

// endsOnly is a sink after the recording that needs only run ends, as the run-link sink.
type endsOnly struct{ ended atomic.Int64 }

func (e *endsOnly) Publish(ev agent.Event) {
	if ev.Kind == agent.EventRunEnded {
		e.ended.Add(1)
	}
}
func (e *endsOnly) Wants(k agent.EventKind) bool { return k == agent.EventRunEnded }

// TestConsumerDeltasNeverWait: token deltas are not recorded, and when no sink after
// the recording wants them they take no room in the queue: a long reply streams on
// while the disk is held, instead of stopping after QueueLen deltas.
func TestConsumerDeltasNeverWait(t *testing.T) {
	f := newFixture(t)
	g := &gatedStore{DB: f.db, gate: make(chan struct{})}
	ends := &endsOnly{}
	c := trace.NewConsumer(trace.NewRecorder(g, f.red, nil), nil, ends)
	evs := toolEvents("run-long", f.sess, 1)
	c.Publish(evs[0])
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 3 * trace.QueueLen {
			c.Publish(agent.Event{Kind: agent.EventText, Text: "word ", RunID: "run-long", SessionID: f.sess.ID,
				OwnerID: f.sess.OwnerID, Seq: 2 + i})
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Error("Publish of deltas waited for the held disk")
	}
	close(g.gate)
	<-done
	end := evs[1]
	end.Seq = 2 + 3*trace.QueueLen
	c.Publish(end)
	c.Close()
	if n := ends.ended.Load(); n != 1 {
		t.Errorf("the sink saw %d run ends, want 1", n)
	}
	if ri, spans, err := f.rec.Run(context.Background(), f.ann.ID, "run-long"); err != nil || ri.Status != trace.StatusComplete || len(spans) != 1 {
		t.Errorf("run %+v with %d spans (%v), want complete with 1", ri, len(spans), err)
	}
}

// TestConsumerWaitsOutABusyDatabase: a batch that runs out of time because the
// database stays locked (another process, a long checkpoint) is written again, whole,
// instead of being written a write at a time into the same lock and lost.
func TestConsumerWaitsOutABusyDatabase(t *testing.T) {
	f := newFixture(t)
	var tries atomic.Int64
	g := &gatedStore{DB: f.db, fail: func(ws []store.RunWrite) error {
		if tries.Add(1) <= 4 {
			return errors.Join(errors.New("store: database is locked (5) (SQLITE_BUSY)"), context.DeadlineExceeded)
		}
		return nil
	}}
	c := trace.NewConsumer(trace.NewRecorder(g, f.red, nil), nil)
	for _, ev := range toolEvents("run-busy", f.sess, 5) {
		c.Publish(ev)
	}
	c.Close()
	ri, spans, err := f.rec.Run(context.Background(), f.ann.ID, "run-busy")
	mustNil(t, err)
	if ri.Status != trace.StatusComplete || len(spans) != 5 {
		t.Errorf("run %s with %d spans, want complete with 5", ri.Status, len(spans))
	}
}

// TestConsumerPairsOverlappingModelCalls: two model requests of one run in flight at
// once (sampling for two parallel tool calls) each end with their own response.
func TestConsumerPairsOverlappingModelCalls(t *testing.T) {
	f := newFixture(t)
	c := trace.NewConsumer(f.rec, nil)
	reqA := &llm.Request{Model: "m", Messages: []llm.Message{{Role: llm.RoleUser, Content: "question A"}}}
	reqB := &llm.Request{Model: "m", Messages: []llm.Message{{Role: llm.RoleUser, Content: "question B"}}}
	respA := &llm.Response{Content: "answer A"}
	respB := &llm.Response{Content: "answer B"}
	evs := []agent.Event{
		{Kind: agent.EventModelRequest, Model: "m", Request: reqA, Purpose: "sampling:a"},
		{Kind: agent.EventModelRequest, Model: "m", Request: reqB, Purpose: "sampling:b"},
		{Kind: agent.EventModelResponse, Model: "m", Request: reqA, Response: respA, Purpose: "sampling:a"},
		{Kind: agent.EventModelResponse, Model: "m", Request: reqB, Response: respB, Purpose: "sampling:b"},
		{Kind: agent.EventRunEnded, Totals: &agent.RunTotals{Status: store.StatusComplete}},
	}
	for i := range evs {
		evs[i].RunID, evs[i].Seq, evs[i].SessionID, evs[i].OwnerID, evs[i].At = "run-overlap", i+1, f.sess.ID, f.sess.OwnerID, time.Now()
		c.Publish(evs[i])
	}
	c.Close()
	_, spans, err := f.rec.Run(context.Background(), f.ann.ID, "run-overlap")
	mustNil(t, err)
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	for i, want := range []string{"A", "B"} {
		s := spans[i]
		if s.Status == trace.SpanRunning || !bytes.Contains(s.Data, []byte("question "+want)) || !bytes.Contains(s.Data, []byte("answer "+want)) {
			t.Errorf("span %d: %s %s, want question and answer %s", s.Seq, s.Status, s.Data, want)
		}
	}
}
