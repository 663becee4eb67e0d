package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"atrium/internal/agent"
	"atrium/internal/llm"
	"atrium/internal/metrics"
	"atrium/internal/store"
	"atrium/internal/tools"
)

// BenchmarkActivitySink is the rollup sink's cost per run: a run of two model
// calls, a tool call and a memory lookup. publish-µs/run is what the run's
// goroutine spends (summing events in memory, handing them over); write-µs/run
// is the wall time per run until every run's transaction is committed on real
// SQLite (an upper bound of the writer's cost: it includes polling for it).
//
//	go test ./internal/metrics -run '^$' -bench ActivitySink -benchtime 2000x
func BenchmarkActivitySink(b *testing.B) {
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(b.TempDir(), "atrium.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	u := &store.User{Username: "ann", PasswordHash: "h", Role: store.RoleUser}
	if err := db.CreateUser(ctx, u); err != nil {
		b.Fatal(err)
	}
	a := metrics.NewActivity(db, nil)
	resp := &llm.Response{Usage: llm.Usage{InputTokens: 100, OutputTokens: 5}}
	call := &llm.ToolCall{ID: "c1", Name: "calculator", Arguments: `{"expression":"6*7"}`}
	now := time.Now()
	var publish time.Duration
	t0 := time.Now()
	i := 0
	for b.Loop() {
		i++
		id := fmt.Sprintf("run-%d", i)
		at := now.Add(time.Duration(i) * time.Second)
		events := []agent.Event{
			{Kind: agent.EventRunStarted, Model: "m"},
			{Kind: agent.EventMemory, Memory: &agent.MemoryRecall{Hits: []agent.MemoryHit{{ID: "x"}}}},
			{Kind: agent.EventModelResponse, Model: "m", Response: resp, Duration: 800 * time.Millisecond, FirstToken: 200 * time.Millisecond},
			{Kind: agent.EventToolResult, ToolCall: call, Result: &tools.Result{Content: "42"}},
			{Kind: agent.EventModelResponse, Model: "m", Response: resp, Duration: 1200 * time.Millisecond, Err: errors.New("x")},
			{Kind: agent.EventRunEnded, Totals: &agent.RunTotals{Status: store.StatusComplete, InputTokens: 200, OutputTokens: 10, StartedAt: at}},
		}
		t := time.Now()
		for seq, ev := range events {
			ev.RunID, ev.Seq, ev.OwnerID, ev.At = id, seq+1, u.ID, at
			a.Publish(ev)
		}
		publish += time.Since(t)
		if i%256 == 0 {
			// Real runs come seconds apart; here the writer is let catch up
			// before the queue (1,024 runs) fills, so no run is dropped.
			waitTurns(b, db, u.ID, int64(i))
		}
	}
	a.Close()
	total := time.Since(t0)
	b.ReportMetric(float64(publish.Nanoseconds())/1000/float64(b.N), "publish-µs/run")
	b.ReportMetric(float64(total.Nanoseconds())/1000/float64(b.N), "write-µs/run")
	if n := turns(b, db, u.ID); n != int64(b.N) {
		b.Fatalf("%d turns rolled up, want %d", n, b.N)
	}
}

func turns(b *testing.B, db *store.DB, owner int64) int64 {
	rows, err := db.ActivityRollups(context.Background(), owner)
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, r := range rows {
		if r.Metric == store.MetricTurn {
			n += r.N
		}
	}
	return n
}

func waitTurns(b *testing.B, db *store.DB, owner, want int64) {
	for deadline := time.Now().Add(10 * time.Second); turns(b, db, owner) < want; time.Sleep(200 * time.Microsecond) {
		if time.Now().After(deadline) {
			b.Fatalf("the writer did not catch up to %d runs", want)
		}
	}
}
