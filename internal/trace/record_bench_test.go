package trace_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"atrium/internal/agent"
	"atrium/internal/llm"
	"atrium/internal/tools"
	"atrium/internal/trace"
)

// BenchmarkRecordSpan is the cost of recording one finished span on the turn's
// path (Run.Record: redact, seal, one write to a real SQLite file), for a small
// tool span and an 11 KB model request, in the clear and sealed.
func BenchmarkRecordSpan(b *testing.B) {
	msg := strings.Repeat("some earlier turn of the conversation, kept verbatim in the context. ", 150)
	for _, size := range []struct {
		name string
		data any
	}{
		{"tool-300B", map[string]any{"id": "c1", "arguments": json.RawMessage(`{"expression":"6*7"}`), "result": "42"}},
		{"request-11KB", map[string]any{"request": map[string]string{"messages": msg}}},
	} {
		for _, sealed := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/sealed=%v", size.name, sealed), func(b *testing.B) {
				f := newFixture(b)
				if sealed {
					f, _ = sealedFixture(b)
				}
				ctx := context.Background()
				run, err := f.rec.StartRun(ctx, "run-b", f.sess.ID, f.ann.ID, "m")
				mustNil(b, err)
				for b.Loop() {
					if err := run.Record(ctx, trace.KindToolCall, "calculator", size.data, ms(1), "", nil, 0, 0); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkTurnPathPerSpan is what the run's goroutine spends per recorded event,
// sealed as in the app, for a small tool span and an 11 KB model request (its
// request event and its response event: two spans). inline is the recording as it
// was before the queue (redact, compress, seal and write on the run's goroutine,
// as Run.RecordEnded does); queued is Consumer.Publish, which leaves all that to
// the writer. Events are published in bursts of a turn's size (32) and the queue
// is drained between bursts, outside the timer: a turn's events come between model
// tokens and tool calls, not back to back. bg-µs/op is the writer's time per
// span (the drains, spread over the spans), off the turn's path.
func BenchmarkTurnPathPerSpan(b *testing.B) {
	msg := strings.Repeat("some earlier turn of the conversation, kept verbatim in the context. ", 150)
	req := llm.Request{Model: "m", Messages: []llm.Message{{Role: llm.RoleUser, Content: msg}}}
	body, _ := json.Marshal(map[string]any{"model": "m", "messages": []map[string]string{{"role": "user", "content": msg}}})
	wire := llm.NewHTTPRequest("POST", "https://api.example/v1/chat/completions", nil, body)
	call := llm.ToolCall{ID: "c1", Name: "calculator", Arguments: `{"expression":"6*7"}`}
	for _, size := range []string{"tool-300B", "request-11KB"} {
		for _, mode := range []string{"inline", "queued"} {
			b.Run(size+"/"+mode, func(b *testing.B) {
				f, _ := sealedFixture(b)
				ctx := context.Background()
				c := trace.NewConsumer(f.rec, nil)
				defer c.Close()
				run, err := f.rec.StartRun(ctx, "run-inline", f.sess.ID, f.ann.ID, "m")
				mustNil(b, err)
				seq := 0
				event := func(ev agent.Event) agent.Event {
					seq++
					ev.RunID, ev.Seq, ev.SessionID, ev.OwnerID, ev.At, ev.Model = "run-queued", seq, f.sess.ID, f.ann.ID, time.Now(), "m"
					return ev
				}
				c.Publish(event(agent.Event{Kind: agent.EventRunStarted}))
				c.Flush()
				var bg time.Duration
				n := 0
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					switch mode + "/" + size {
					case "inline/tool-300B":
						mustNil(b, run.RecordEnded(ctx, trace.KindToolCall, call.Name, map[string]any{"id": call.ID,
							"arguments": json.RawMessage(call.Arguments), "result": "42", "code": ""}, time.Now(), time.Now(), "", nil, 0, 0))
					case "inline/request-11KB":
						s, err := run.SpanAt(ctx, time.Now(), trace.KindModelRequest, "m", nil)
						mustNil(b, err)
						mustNil(b, s.EndAt(ctx, time.Now(), "", nil, 10, 0, trace.ModelRequest{Request: req, HTTP: wire}))
					case "queued/tool-300B":
						c.Publish(event(agent.Event{Kind: agent.EventToolResult, ToolCall: &call, Result: &tools.Result{Content: "42"}}))
					case "queued/request-11KB":
						c.Publish(event(agent.Event{Kind: agent.EventModelRequest, Request: &req}))
						c.Publish(event(agent.Event{Kind: agent.EventModelResponse, Request: &req, Wire: wire, Response: &llm.Response{}}))
					}
					if n++; n == 32 && mode == "queued" {
						b.StopTimer()
						t := time.Now()
						c.Flush()
						bg += time.Since(t)
						n = 0
						b.StartTimer()
					}
				}
				b.StopTimer()
				t := time.Now()
				c.Flush()
				bg += time.Since(t)
				if mode == "queued" {
					b.ReportMetric(float64(bg.Microseconds())/float64(b.N), "bg-µs/op")
				}
			})
		}
	}
}
