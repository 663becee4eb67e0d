package contextwin_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"atrium/internal/contextwin"
	"atrium/internal/llm"
	"atrium/internal/store"
)

// text returns about tokens tokens of varied prose (about 4 bytes a token).
func benchText(seed, tokens int) string {
	var sb strings.Builder
	for i := 0; sb.Len() < tokens*4; i++ {
		fmt.Fprintf(&sb, "item %d of %d: the value was %d units. ", i, seed, (seed*31+i*7)%1000)
	}
	return sb.String()
}

// BenchmarkAssembleContext times one context assembly (load + Assemble, no
// model call) for sessions of growing length, with about 20 turns not yet
// covered by the summary. The cost must not grow with the session.
func BenchmarkAssembleContext(b *testing.B) {
	for _, n := range []int{100, 10000, 100000} {
		b.Run(fmt.Sprintf("messages=%d", n), func(b *testing.B) {
			ctx := context.Background()
			db, sid := openSession(b)
			var turnStarts []int64
			var batch []*store.Message
			seq := int64(0)
			add := func(m *store.Message) {
				seq++
				m.SessionID = sid
				batch = append(batch, m)
				if len(batch) == 1000 {
					if err := db.AppendMessages(ctx, batch); err != nil {
						b.Fatal(err)
					}
					batch = batch[:0]
				}
			}
			for turn := 0; int(seq) < n; turn++ {
				turnStarts = append(turnStarts, seq+1)
				add(&store.Message{Role: store.RoleUser, Content: benchText(turn, 60), Tokens: 60})
				if turn%5 == 4 && int(seq)+3 <= n {
					id := fmt.Sprint("call", turn)
					add(&store.Message{Role: store.RoleAssistant, ToolCalls: fmt.Appendf(nil, `[{"id":%q,"name":"search","arguments":"{\"q\":\"x\"}"}]`, id), Tokens: 20})
					step := seq // the only session of a fresh database: message ids are its seqs
					add(&store.Message{Role: store.RoleTool, ToolCallID: id, CallKey: store.ToolCallKey(step, 0), Content: benchText(turn, 3000), Tokens: 3000})
				}
				if int(seq) < n {
					add(&store.Message{Role: store.RoleAssistant, Content: benchText(turn, 200), Tokens: 200})
				}
			}
			if len(batch) > 0 {
				if err := db.AppendMessages(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			watermark := turnStarts[max(0, len(turnStarts)-20)] - 1
			in := contextwin.Input{
				System:      benchText(1, 300),
				Preferences: []string{"answer in English", "metric units", "short answers"},
				Goal:        "migrate the billing service",
				Stage:       "testing",
				Memories:    []string{"the user works at Acme", "prefers PostgreSQL", "time zone Europe/Paris"},
				Summary:     benchText(2, 400),
				SummarySeq:  watermark,
			}
			for i := range 10 {
				in.Tools = append(in.Tools, llm.ToolSpec{Name: fmt.Sprint("tool", i), Description: benchText(i, 60),
					Parameters: []byte(`{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`)})
			}
			tok := contextwin.NewTokenizer()
			budgets := contextwin.DefaultBudgets()
			var rep contextwin.Report
			// Settle the seeding (WAL, garbage) and warm what every turn after
			// the first finds warm: the tokenizer's tables and its memo of
			// counts and cuts of the repeated texts.
			if err := db.Checkpoint(ctx); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if msgs, err := db.LoadContextMessages(ctx, sid, watermark, contextwin.DefaultLoadMax); err == nil {
				in.Messages = msgs
				contextwin.Assemble(in, budgets, tok)
			}
			b.Logf("first (cold) assembly: %v", time.Since(start))
			runtime.GC()
			cpu0 := cpuTime()
			b.ResetTimer()
			for b.Loop() {
				msgs, err := db.LoadContextMessages(ctx, sid, watermark, contextwin.DefaultLoadMax)
				if err != nil {
					b.Fatal(err)
				}
				in.Messages = msgs
				_, rep = contextwin.Assemble(in, budgets, tok)
			}
			b.StopTimer()
			// CPU time of the process per op: on a loaded machine it is a steadier
			// figure than wall time.
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			if len(rep.Included) == 0 || len(rep.Unsummarised) == 0 {
				b.Fatalf("nothing assembled: %+v", rep.Zones)
			}
			b.ReportMetric(float64(len(in.Messages)), "msgs/op")
			b.ReportMetric(float64(rep.Zones[len(rep.Zones)-1].Tokens), "tokens/op")
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
