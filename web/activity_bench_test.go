package web_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"atrium/internal/store"
	"atrium/internal/trace"
)

// BenchmarkActivityPage measures Settings → Activity at 100,000 runs of five
// users over the last 7 days (each run with a model call, every third with a
// tool call, every tenth failed), rolled up by the start-up backfill, end to
// end through the handler (login, admin check, the two rollup sums, the
// charts, the template) for each range. The goal is ≤ 100 ms p50.
//
//	go test ./web -run '^$' -bench ActivityPage -benchtime 100x
func BenchmarkActivityPage(b *testing.B) {
	env := newTestEnv(b)
	admin := env.setup()
	ctx := context.Background()
	const users, perUser = 5, 20_000
	// A run every 30 s per user: 20,000 runs are the last ~7 days.
	start := env.clock.now().Add(-perUser * 30 * time.Second)
	t0 := time.Now()
	for k := range users {
		u := &store.User{Username: fmt.Sprintf("user%d", k), PasswordHash: "h", Role: store.RoleUser}
		if err := env.db.CreateUser(ctx, u); err != nil {
			b.Fatal(err)
		}
		for lo := 0; lo < perUser; lo += 1000 {
			var runs []store.ImportedRun
			for i := lo; i < lo+1000; i++ {
				at := start.Add(time.Duration(i)*30*time.Second + time.Duration(k)*200*time.Millisecond)
				model := []string{"m-small", "m-big", "m-local"}[i%3]
				r := store.ImportedRun{RunInfo: store.RunInfo{ID: fmt.Sprintf("u%d-%d", k, i), OwnerID: u.ID, Model: model,
					Status: trace.StatusComplete, StartedAt: at, EndedAt: at.Add(3 * time.Second),
					InputTokens: 100 + i%500, OutputTokens: 10 + i%50, Steps: 1}}
				if i%10 == 0 {
					r.Status, r.Error = trace.StatusError, "model failed"
				}
				d := time.Duration(50+(i*37)%4000) * time.Millisecond
				r.Spans = []store.ImportedSpan{
					{SpanRow: store.SpanRow{RunID: r.ID, Seq: 1, Kind: trace.KindModelResponse, Name: model, Status: trace.SpanOK, StartedAt: at, EndedAt: at.Add(d)}}}
				if i%3 == 0 {
					status := trace.SpanOK
					if i%9 == 0 {
						status = trace.SpanError
					}
					r.Spans = append(r.Spans, store.ImportedSpan{SpanRow: store.SpanRow{RunID: r.ID, Seq: 2, Kind: trace.KindToolCall,
						Name: []string{"search", "calculator", "fetch"}[i%4%3], Status: status, StartedAt: at, EndedAt: at}})
				}
				if i%10 == 0 {
					r.Spans = append(r.Spans, store.ImportedSpan{SpanRow: store.SpanRow{RunID: r.ID, Seq: 3, Kind: trace.KindError,
						Name: "The model call failed.", Status: trace.SpanError, StartedAt: at, EndedAt: at}})
				}
				runs = append(runs, r)
			}
			if err := env.db.InsertRuns(ctx, runs); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Logf("seeded %d runs in %v", users*perUser, time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()
	if err := env.db.SetMeta(ctx, "activity_backfill", nil); err != nil {
		b.Fatal(err)
	}
	if ok, err := env.db.BackfillActivity(ctx, 30*24*time.Hour); err != nil || !ok {
		b.Fatal(ok, err)
	}
	b.Logf("backfilled in %v", time.Since(t0).Round(time.Millisecond))

	get := admin.serveGET()
	for _, rng := range []string{"24h", "7d", "30d"} {
		b.Run(rng, func(b *testing.B) {
			path := "/settings/activity?range=" + rng
			if rec := get(path); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "<td>m-big</td>") {
				b.Fatalf("GET %s: %d, %d bytes", path, rec.Code, rec.Body.Len())
			}
			var lat []time.Duration
			cpu := processCPU()
			for b.Loop() {
				t := time.Now()
				if rec := get(path); rec.Code != http.StatusOK {
					b.Fatalf("status %d", rec.Code)
				}
				lat = append(lat, time.Since(t))
			}
			b.ReportMetric(float64(processCPU()-cpu)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, "p95-ms")
		})
	}
}
