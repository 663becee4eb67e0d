package trace_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"atrium/internal/errs"
	"atrium/internal/store"
	"atrium/internal/store/storetest"
	"atrium/internal/trace"
)

// clock is a fake time source that advances by step on every call.
type clock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.step)
	return c.t
}

var t0 = time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)

type fixture struct {
	db    *store.DB
	clock *clock
	rec   *trace.Recorder
	red   *trace.Redactor
	ann   store.User
	bob   store.User
	sess  store.Session // ann's
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	ctx := context.Background()
	db := storetest.Open(t)
	c := &clock{t: t0, step: 10 * time.Millisecond}
	db.Now = c.Now
	f := &fixture{db: db, clock: c, red: trace.NewRedactor()}
	f.rec = trace.NewRecorder(db, f.red, nil)
	f.ann = store.User{Username: "ann", PasswordHash: "h", Role: store.RoleUser}
	f.bob = store.User{Username: "bob", PasswordHash: "h", Role: store.RoleUser}
	mustNil(t, db.CreateUser(ctx, &f.ann))
	mustNil(t, db.CreateUser(ctx, &f.bob))
	f.sess = f.newSession(t, f.ann.ID, "s-ann")
	c.t = t0 // the recorder's first timestamp is t0+10ms
	return f
}

func (f *fixture) newSession(t testing.TB, owner int64, id string) store.Session {
	t.Helper()
	s := store.Session{ID: id, OwnerID: owner, Title: "t"}
	mustNil(t, f.db.CreateSession(context.Background(), &s))
	return s
}

func mustNil(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if got := errs.Code(err); err == nil || got != code {
		t.Fatalf("error %v (code %s), want code %s", err, got, code)
	}
}

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

func TestRunRoundTrip(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()

	run, err := f.rec.StartRun(ctx, "run-1", f.sess.ID, f.ann.ID, "fake-model") // t=10
	mustNil(t, err)
	if run.ID() != "run-1" {
		t.Fatalf("ID() = %q", run.ID())
	}
	cs, err := run.Span(ctx, trace.KindContext, "assemble", map[string]any{"included": []string{"m1", "m2"}}) // 20
	mustNil(t, err)
	mustNil(t, cs.End(ctx, "", nil, 120, 0, map[string]any{"cut": []string{"m0"}, "why": "budget"})) // 30
	mr, err := run.Span(ctx, trace.KindModelRequest, "fake-model", map[string]any{"step": 1})        // 40
	mustNil(t, err)
	mustNil(t, mr.End(ctx, "", nil, 150, 12, nil))                                                  // 50
	tc, err := run.Span(ctx, trace.KindToolCall, "clock", json.RawMessage(`{"args":{"tz":"UTC"}}`)) // 60
	mustNil(t, err)
	mustNil(t, tc.Record(ctx, trace.KindToolResult, "clock", map[string]string{"result": "12:00"}, ms(65), "", nil, 0, 0)) // ends 70
	mustNil(t, tc.End(ctx, "", errors.New("took long"), 0, 0, "replaced"))                                                 // 80
	mustNil(t, run.Record(ctx, trace.KindFinal, "", map[string]string{"text": "done"}, ms(85), "ok", nil, 0, 5))           // 90
	mustNil(t, run.End(ctx, "", nil, 270, 17, 2))                                                                          // 100

	info, spans, err := f.rec.Run(ctx, f.ann.ID, "run-1")
	mustNil(t, err)
	wantRun := trace.RunInfo{ID: "run-1", SessionID: f.sess.ID, Model: "fake-model", Status: "complete", OwnerID: f.ann.ID,
		StartedAt: ms(10), EndedAt: ms(100), InputTokens: 270, OutputTokens: 17, Steps: 2}
	if !info.StartedAt.Equal(wantRun.StartedAt) || !info.EndedAt.Equal(wantRun.EndedAt) {
		t.Errorf("run times %v..%v, want %v..%v", info.StartedAt, info.EndedAt, wantRun.StartedAt, wantRun.EndedAt)
	}
	info.StartedAt, info.EndedAt, wantRun.StartedAt, wantRun.EndedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if info != wantRun {
		t.Errorf("run = %+v\nwant %+v", info, wantRun)
	}

	type want struct {
		seq           int
		parent        int64 // index+1 into spans, 0 for none
		kind, name    string
		status, err   string
		start, end    int
		tokIn, tokOut int
		data          string
	}
	wants := []want{
		{1, 0, "context", "assemble", "ok", "", 20, 30, 120, 0, `{"cut":["m0"],"included":["m1","m2"],"why":"budget"}`},
		{2, 0, "model_request", "fake-model", "ok", "", 40, 50, 150, 12, `{"step":1}`},
		{3, 0, "tool_call", "clock", "error", "took long", 60, 80, 0, 0, `"replaced"`},
		{4, 3, "tool_result", "clock", "ok", "", 65, 70, 0, 0, `{"result":"12:00"}`},
		{5, 0, "final", "", "ok", "", 85, 90, 0, 5, `{"text":"done"}`},
	}
	if len(spans) != len(wants) {
		t.Fatalf("%d spans, want %d: %+v", len(spans), len(wants), spans)
	}
	for i, w := range wants {
		s := spans[i]
		var parent int64
		if w.parent > 0 {
			parent = spans[w.parent-1].ID
		}
		if s.Seq != w.seq || s.ParentID != parent || s.Kind != w.kind || s.Name != w.name || s.Status != w.status ||
			s.Error != w.err || !s.StartedAt.Equal(ms(w.start)) || !s.EndedAt.Equal(ms(w.end)) ||
			s.TokensIn != w.tokIn || s.TokensOut != w.tokOut || string(s.Data) != w.data {
			t.Errorf("span %d = %+v (data %s)\nwant %+v", i, s, s.Data, w)
		}
	}

	// Listing: newest first, filtered by session, scoped by owner.
	other := f.newSession(t, f.ann.ID, "s-ann-2")
	_, err = f.rec.StartRun(ctx, "run-2", other.ID, f.ann.ID, "m")
	mustNil(t, err)
	_, err = f.rec.StartRun(ctx, "run-3", "", f.ann.ID, "m") // outside a session
	mustNil(t, err)
	for _, tc := range []struct {
		session string
		limit   int
		want    []string
	}{
		{"", 0, []string{"run-3", "run-2", "run-1"}},
		{"", 2, []string{"run-3", "run-2"}},
		{f.sess.ID, 0, []string{"run-1"}},
		{other.ID, 0, []string{"run-2"}},
	} {
		list, err := f.rec.Runs(ctx, f.ann.ID, tc.session, tc.limit)
		mustNil(t, err)
		var got []string
		for _, r := range list {
			got = append(got, r.ID)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("Runs(%q, %d) = %v, want %v", tc.session, tc.limit, got, tc.want)
		}
	}
	list, err := f.rec.Runs(ctx, f.ann.ID, "", 0)
	mustNil(t, err)
	if list[0].Status != "running" || !list[0].EndedAt.IsZero() || list[0].SessionID != "" {
		t.Errorf("unfinished run listed as %+v", list[0])
	}
}

func TestOwnerScoping(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	run, err := f.rec.StartRun(ctx, "run-a", f.sess.ID, f.ann.ID, "m")
	mustNil(t, err)
	mustNil(t, run.Record(ctx, trace.KindFinal, "", "hi", time.Time{}, "", nil, 0, 0))

	_, _, foreign := f.rec.Run(ctx, f.bob.ID, "run-a")
	wantCode(t, foreign, errs.NotFound)
	_, _, missing := f.rec.Run(ctx, f.ann.ID, "no-such-run")
	wantCode(t, missing, errs.NotFound)
	if foreign.Error() != missing.Error() {
		t.Errorf("foreign %q and missing %q differ", foreign, missing)
	}
	list, err := f.rec.Runs(ctx, f.bob.ID, f.sess.ID, 0)
	mustNil(t, err)
	if len(list) != 0 {
		t.Errorf("bob lists ann's runs: %+v", list)
	}
	list, err = f.rec.Runs(ctx, f.bob.ID, "", 0)
	mustNil(t, err)
	if len(list) != 0 {
		t.Errorf("bob lists ann's runs: %+v", list)
	}

	// A run cannot be filed under someone else's session, nor twice under one id.
	bad, err := f.rec.StartRun(ctx, "run-b", f.sess.ID, f.bob.ID, "m")
	wantCode(t, err, errs.NotFound)
	if bad != nil {
		t.Fatal("StartRun returned a run for a foreign session")
	}
	_, err = f.rec.StartRun(ctx, "run-a", f.sess.ID, f.ann.ID, "m")
	wantCode(t, err, errs.Conflict)
	_, err = f.rec.StartRun(ctx, "", f.sess.ID, f.ann.ID, "m")
	wantCode(t, err, errs.Invalid)
	_, err = f.rec.StartRun(ctx, "run-c", "", 9999, "m")
	wantCode(t, err, errs.NotFound)

	// The nil run a failed StartRun gives records nothing and does not panic.
	s, err := bad.Span(ctx, trace.KindContext, "x", nil)
	if s != nil || err != nil {
		t.Errorf("nil run Span = %v, %v", s, err)
	}
	mustNil(t, s.End(ctx, "", nil, 0, 0, nil))
	mustNil(t, s.Record(ctx, trace.KindToolResult, "x", nil, time.Time{}, "", nil, 0, 0))
	mustNil(t, bad.Record(ctx, trace.KindFinal, "x", nil, time.Time{}, "", nil, 0, 0))
	mustNil(t, bad.End(ctx, "", nil, 0, 0, 0))
}

func TestInvalidInput(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	run, err := f.rec.StartRun(ctx, "r", f.sess.ID, f.ann.ID, "m")
	mustNil(t, err)
	_, err = run.Span(ctx, "bogus", "x", nil)
	wantCode(t, err, errs.Invalid)
	wantCode(t, run.Record(ctx, "bogus", "x", nil, time.Time{}, "", nil, 0, 0), errs.Invalid)
	wantCode(t, run.End(ctx, "finished", nil, 0, 0, 0), errs.Invalid)
	s, err := run.Span(ctx, trace.KindMemory, "lookup", nil)
	mustNil(t, err)
	mustNil(t, s.End(ctx, "", nil, 0, 0, nil))
	wantCode(t, s.End(ctx, "", nil, 0, 0, nil), errs.Conflict)
	// The run is still usable and numbering has no gaps from refused spans.
	mustNil(t, run.End(ctx, trace.StatusStopped, context.Canceled, 0, 0, 1))
	info, spans, err := f.rec.Run(ctx, f.ann.ID, "r")
	mustNil(t, err)
	if info.Status != "stopped" || info.Error != "context canceled" || len(spans) != 1 || spans[0].Seq != 1 || spans[0].Data != nil {
		t.Errorf("run %+v spans %+v", info, spans)
	}
}

// A turn's context is cancelled when the user presses Stop; its record must still be written.
func TestCancelledContextStillRecords(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	run, err := f.rec.StartRun(ctx, "r", f.sess.ID, f.ann.ID, "m")
	mustNil(t, err)
	s, err := run.Span(ctx, trace.KindModelResponse, "m", map[string]string{"partial": "Hel"})
	mustNil(t, err)
	cancel()
	mustNil(t, s.End(ctx, trace.StatusStopped, ctx.Err(), 3, 1, nil))
	mustNil(t, run.End(ctx, trace.StatusStopped, nil, 3, 1, 1))
	info, spans, err := f.rec.Run(context.Background(), f.ann.ID, "r")
	mustNil(t, err)
	if info.Status != "stopped" || spans[0].Status != "stopped" || spans[0].Error != "context canceled" {
		t.Errorf("run %+v spans %+v", info, spans)
	}
}

// A failed write returns an error but leaves the run usable: the next writes
// create what is missing.
func TestFailedWritesKeepRunUsable(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	storetest.Exec(t, f.db, `
		CREATE TABLE fail (tbl TEXT PRIMARY KEY);
		CREATE TRIGGER fail_runs BEFORE INSERT ON runs WHEN EXISTS (SELECT 1 FROM fail WHERE tbl = 'runs')
			BEGIN SELECT RAISE(ABORT, 'disk on fire'); END;
		CREATE TRIGGER fail_spans BEFORE INSERT ON spans WHEN EXISTS (SELECT 1 FROM fail WHERE tbl = 'spans')
			BEGIN SELECT RAISE(ABORT, 'disk on fire'); END;
		INSERT INTO fail VALUES ('runs'), ('spans');`)

	run, err := f.rec.StartRun(ctx, "r", f.sess.ID, f.ann.ID, "m")
	if err == nil || run == nil {
		t.Fatalf("StartRun with a failing table = %v, %v; want a usable run and an error", run, err)
	}
	s, err := run.Span(ctx, trace.KindToolCall, "calc", map[string]string{"expr": "1+1"})
	if err == nil || s == nil {
		t.Fatalf("Span = %v, %v; want a usable span and an error", s, err)
	}
	storetest.Exec(t, f.db, `DELETE FROM fail`)
	mustNil(t, s.End(ctx, "", nil, 0, 0, map[string]string{"result": "2"}))
	mustNil(t, run.End(ctx, "", nil, 1, 2, 1))

	info, spans, err := f.rec.Run(ctx, f.ann.ID, "r")
	mustNil(t, err)
	if info.Status != "complete" || !info.StartedAt.Equal(ms(10)) || len(spans) != 1 ||
		string(spans[0].Data) != `{"expr":"1+1","result":"2"}` || spans[0].Status != "ok" || !spans[0].StartedAt.Equal(ms(20)) {
		t.Errorf("run %+v spans %+v", info, spans)
	}
}

func TestConcurrentSpans(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	run, err := f.rec.StartRun(ctx, "r", f.sess.ID, f.ann.ID, "m")
	mustNil(t, err)
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			s, err := run.Span(ctx, trace.KindToolCall, fmt.Sprint("tool", i), nil)
			if err != nil {
				t.Error(err)
				return
			}
			if err := s.End(ctx, "", nil, 0, 0, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	_, spans, err := f.rec.Run(ctx, f.ann.ID, "r")
	mustNil(t, err)
	if len(spans) != n {
		t.Fatalf("%d spans, want %d", len(spans), n)
	}
	for i, s := range spans {
		if s.Seq != i+1 || s.Status != "ok" {
			t.Errorf("span %d: seq %d status %s", i, s.Seq, s.Status)
		}
	}
}

func TestDeleteSessionCascades(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	keep := f.newSession(t, f.ann.ID, "s-keep")
	for _, sid := range []string{f.sess.ID, keep.ID} {
		run, err := f.rec.StartRun(ctx, "run-"+sid, sid, f.ann.ID, "m")
		mustNil(t, err)
		s, err := run.Span(ctx, trace.KindToolCall, "x", nil)
		mustNil(t, err)
		mustNil(t, s.Record(ctx, trace.KindToolResult, "x", "r", time.Time{}, "", nil, 0, 0))
		mustNil(t, run.End(ctx, "", nil, 0, 0, 1))
	}
	mustNil(t, f.db.DeleteSession(ctx, f.sess.ID, f.ann.ID))
	count := func(q string) int { return int(storetest.Int(t, f.db, q)) }
	if n := count(`SELECT COUNT(*) FROM runs`); n != 1 {
		t.Errorf("%d runs left, want 1", n)
	}
	if n := count(`SELECT COUNT(*) FROM spans`); n != 2 {
		t.Errorf("%d spans left, want 2 (the other session's)", n)
	}
	if n := count(`SELECT COUNT(*) FROM spans WHERE run_id = 'run-s-ann'`); n != 0 {
		t.Errorf("%d spans of the deleted session left", n)
	}
	_, _, err := f.rec.Run(ctx, f.ann.ID, "run-"+f.sess.ID)
	wantCode(t, err, errs.NotFound)
}

func TestStopUnfinished(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	_, err := f.rec.StartRun(ctx, "crashed", f.sess.ID, f.ann.ID, "m")
	mustNil(t, err)
	done, err := f.rec.StartRun(ctx, "done", f.sess.ID, f.ann.ID, "m")
	mustNil(t, err)
	mustNil(t, done.End(ctx, "", nil, 0, 0, 0))
	n, err := f.rec.StopUnfinished(ctx)
	mustNil(t, err)
	if n != 1 {
		t.Errorf("stopped %d runs, want 1", n)
	}
	info, _, err := f.rec.Run(ctx, f.ann.ID, "crashed")
	mustNil(t, err)
	if info.Status != "stopped" || info.EndedAt.IsZero() || !strings.Contains(info.Error, "server stopped") {
		t.Errorf("crashed run = %+v", info)
	}
}
