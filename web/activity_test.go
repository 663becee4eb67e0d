package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"atrium/internal/llm"
	"atrium/internal/llm/llmtest"
	"atrium/internal/memory"
	"atrium/internal/providers"
	"atrium/internal/store"
	"atrium/internal/testkit"
	"atrium/internal/trace"
)

type rollupKey struct{ model, metric, label string }

// spanRollups is the direct computation of an owner's rollups from their
// stored runs and spans (opened), by model, metric and label.
func spanRollups(t *testing.T, env *testEnv, owner int64) map[rollupKey]store.ActivityRow {
	t.Helper()
	ctx := context.Background()
	runs, err := env.app.Recorder.Runs(ctx, owner, "", trace.MaxRunsLimit)
	if err != nil {
		t.Fatal(err)
	}
	out := map[rollupKey]store.ActivityRow{}
	add := func(k rollupKey, f func(*store.ActivityRow)) {
		r := out[k]
		f(&r)
		out[k] = r
	}
	for _, ri := range runs {
		_, spans, err := env.app.Recorder.Run(ctx, owner, ri.ID)
		if err != nil {
			t.Fatal(err)
		}
		add(rollupKey{ri.Model, store.MetricTurn, ""}, func(r *store.ActivityRow) {
			r.N++
			if ri.Status == trace.StatusComplete {
				r.OK++
			}
			r.TokensIn += int64(ri.InputTokens)
			r.TokensOut += int64(ri.OutputTokens)
		})
		for _, s := range spans {
			switch {
			case s.Kind == trace.KindToolCall:
				add(rollupKey{ri.Model, store.MetricTool, s.Name}, func(r *store.ActivityRow) {
					r.N++
					if s.Status == trace.SpanOK {
						r.OK++
					}
				})
			case s.Kind == trace.KindModelResponse:
				add(rollupKey{s.Name, store.MetricLatency, ""}, func(r *store.ActivityRow) {
					ms := s.EndedAt.Sub(s.StartedAt).Milliseconds()
					r.N++
					if s.Status == trace.SpanOK {
						r.OK++
					}
					r.Sum += ms
					r.Buckets[store.ActivityBucket(ms)]++
				})
			case s.Kind == trace.KindMemory && s.Name == "recall" && s.Error == "":
				// A hit: a memory found was in the context sent (the context spans say how many).
				used := false
				for _, c := range spans {
					var d struct{ Memories int }
					if c.Kind == trace.KindContext && json.Unmarshal(c.Data, &d) == nil && d.Memories > 0 {
						used = true
					}
				}
				add(rollupKey{ri.Model, store.MetricMemory, ""}, func(r *store.ActivityRow) {
					r.N++
					if used {
						r.OK++
					}
				})
			case s.Kind == trace.KindError:
				add(rollupKey{ri.Model, store.MetricError, "model_server"}, func(r *store.ActivityRow) { r.N++ })
			}
		}
	}
	return out
}

// storedRollups sums an owner's rollups over hours, by model, metric and label.
func storedRollups(t *testing.T, env *testEnv, owner int64) map[rollupKey]store.ActivityRow {
	t.Helper()
	rows, err := env.db.ActivityRollups(context.Background(), owner)
	if err != nil {
		t.Fatal(err)
	}
	out := map[rollupKey]store.ActivityRow{}
	for _, r := range rows {
		k := rollupKey{r.Model, r.Metric, r.Label}
		sum := out[k]
		sum.Add(r)
		out[k] = sum
	}
	return out
}

// sameRollups compares rollups. A duration sum may differ by 1 ms per call:
// a span stores its start and end in whole ms, the sink the duration.
func sameRollups(t *testing.T, what string, got, want map[rollupKey]store.ActivityRow, metrics ...string) {
	t.Helper()
	keep := func(m map[rollupKey]store.ActivityRow) map[rollupKey]store.ActivityRow {
		out := map[rollupKey]store.ActivityRow{}
		for k, v := range m {
			for _, metric := range metrics {
				if k.metric == metric {
					out[k] = v
				}
			}
		}
		return out
	}
	got, want = keep(got), keep(want)
	if len(got) != len(want) {
		t.Errorf("%s: %d rollups %v, want %d %v", what, len(got), got, len(want), want)
	}
	for k, w := range want {
		g, ok := got[k]
		d := g.Sum - w.Sum
		g.Sum, w.Sum = 0, 0
		if !ok || g != w || d < -w.N || d > w.N {
			t.Errorf("%s %v: got %+v (sum off by %d), want %+v", what, k, g, d, w)
		}
	}
}

func (e *testEnv) waitRollups(owner int64, turns int64) {
	e.t.Helper()
	testkit.Eventually(e.t, 5*time.Second, "the runs rolled up", func() bool {
		rows, err := e.db.ActivityRollups(context.Background(), owner)
		var n int64
		for _, r := range rows {
			if r.Metric == store.MetricTurn {
				n += r.N
			}
		}
		return err == nil && n == turns
	})
}

// A scripted set of runs (a tool that works and one that fails, two models,
// two users, a memory hit and a miss, a model error) rolls up to exactly what
// their stored spans say; the backfill of the same runs agrees on what spans
// can tell; the page shows every figure, escaped, to admins only; a deleted
// user's rollups go with them.
func TestActivityRollupsMatchSpans(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "fake-model\n<b>other</b>-model", "")
	ann := env.user(admin, "ann")
	ann.addMemory(memory.KindFact, "The spare gnome key hides under the blue flowerpot")
	ctx := context.Background()

	turn := func(b *browser, user, model, text string, replies ...llmtest.Reply) {
		t.Helper()
		id := b.newSession()
		if model != "" {
			ps, err := env.db.ListProviders(ctx)
			if err != nil || len(ps) != 1 {
				t.Fatal(ps, err)
			}
			choice := providers.Value(ps[0].ID, model)
			if r := b.post("/s/"+id+"/model", url.Values{"model": {choice}}); r.StatusCode != http.StatusNoContent {
				t.Fatalf("set model %q: %d %s", choice, r.StatusCode, r.body)
			}
		}
		env.llm.Enqueue(replies...)
		ws := b.dial(id)
		ws.send(text)
		ws.until(finalMarker)
		// The run is over (its reply committed after any tool step) before the
		// next turn's replies are queued.
		testkit.Eventually(t, 5*time.Second, "the run recorded", func() bool {
			runs, err := env.db.ListRuns(ctx, env.userID(user), id, 1)
			return err == nil && len(runs) == 1 && !runs[0].EndedAt.IsZero()
		})
		ws.conn.Close()
	}
	calc := func(expr string) llmtest.Reply {
		return llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"` + expr + `"}`}},
			Usage: &llm.Usage{InputTokens: 100, OutputTokens: 7}}
	}
	text := func(s string) llmtest.Reply {
		return llmtest.Reply{Text: llmtest.Words(s), Usage: &llm.Usage{InputTokens: 130, OutputTokens: 4}}
	}
	turn(admin, "admin", "", "What is 6*7?", calc("6*7"), text("It is 42."))
	turn(admin, "admin", "<b>other</b>-model", "What is 6 divided by?", calc("6/"), text("That failed."))
	turn(ann, "ann", "", "where does the gnome key hide", text("Under the pot."))
	turn(ann, "ann", "<b>other</b>-model", "say something", llmtest.Reply{Status: http.StatusInternalServerError})
	adminID, annID := env.userID("admin"), env.userID("ann")
	env.waitRollups(adminID, 2)
	env.waitRollups(annID, 2)

	for _, u := range []struct {
		name string
		id   int64
	}{{"admin", adminID}, {"ann", annID}} {
		want := spanRollups(t, env, u.id)
		sameRollups(t, u.name, storedRollups(t, env, u.id), want,
			store.MetricTurn, store.MetricTool, store.MetricLatency, store.MetricMemory, store.MetricError)
	}
	// The script did what it says: a failing tool, a memory hit and miss, an error.
	annWant, adminWant := spanRollups(t, env, annID), spanRollups(t, env, adminID)
	if r := adminWant[rollupKey{"<b>other</b>-model", store.MetricTool, "calculator"}]; r.N != 1 || r.OK != 0 {
		t.Errorf("the failing calculator call: %+v in %v", r, adminWant)
	}
	if r := annWant[rollupKey{"fake-model", store.MetricMemory, ""}]; r.N != 1 || r.OK != 1 {
		t.Errorf("ann's memory hit: %+v", r)
	}
	if r := annWant[rollupKey{"<b>other</b>-model", store.MetricError, "model_server"}]; r.N != 1 {
		t.Errorf("ann's model error: %+v (%v)", r, annWant)
	}
	firstTokens := storedRollups(t, env, adminID)[rollupKey{"fake-model", store.MetricFirstToken, ""}]
	if firstTokens.N != 1 { // the tool call streamed no text: one first token
		t.Errorf("admin's first-token rollup: %+v, want 1 call", firstTokens)
	}

	// An upgraded instance: the backfill from the same spans gives the same
	// turns, tools and latencies.
	if err := env.db.SetMeta(ctx, "activity_backfill", nil); err != nil {
		t.Fatal(err)
	}
	if ok, err := env.db.BackfillActivity(ctx, 30*24*time.Hour); err != nil || !ok {
		t.Fatalf("backfill: %v %v", ok, err)
	}
	for _, id := range []int64{adminID, annID} {
		sameRollups(t, "backfill", storedRollups(t, env, id), spanRollups(t, env, id), store.MetricTurn, store.MetricTool, store.MetricLatency)
	}
	if ok, err := env.db.BackfillActivity(ctx, 30*24*time.Hour); err != nil || ok {
		t.Errorf("a second backfill ran: %v %v", ok, err)
	}
	// Turns are the users' own: an imported run (an admin's bug report) is not
	// one, so the backfill leaves it out as the live sink never sees it.
	wantTurns := storedRollups(t, env, adminID)[rollupKey{"fake-model", store.MetricTurn, ""}]
	at := env.clock.now()
	if err := env.db.InsertRuns(ctx, []store.ImportedRun{{Imported: true, RunInfo: store.RunInfo{ID: "imported-run", OwnerID: adminID,
		Model: "fake-model", Status: trace.StatusComplete, StartedAt: at, EndedAt: at, InputTokens: 999, Steps: 1},
		Spans: []store.ImportedSpan{{SpanRow: store.SpanRow{RunID: "imported-run", Seq: 1, Kind: trace.KindToolCall, Name: "imported_tool",
			Status: trace.SpanOK, StartedAt: at, EndedAt: at}}}}}); err != nil {
		t.Fatal(err)
	}
	if err := env.db.SetMeta(ctx, "activity_backfill", nil); err != nil {
		t.Fatal(err)
	}
	if ok, err := env.db.BackfillActivity(ctx, 30*24*time.Hour); err != nil || !ok {
		t.Fatalf("backfill: %v %v", ok, err)
	}
	backfilled := storedRollups(t, env, adminID)
	if got := backfilled[rollupKey{"fake-model", store.MetricTurn, ""}]; got != wantTurns {
		t.Errorf("backfilled turns %+v, want %+v (an imported run is not a turn)", got, wantTurns)
	}
	if got, ok := backfilled[rollupKey{"fake-model", store.MetricTool, "imported_tool"}]; ok {
		t.Errorf("an imported run's tool call is rolled up: %+v", got)
	}

	page := admin.get("/settings/activity?range=24h")
	wantStatus(t, page, http.StatusOK)
	for _, want := range []string{`data-range="24h"`, `data-testid="chart-tools"`, `data-testid="table-tools"`,
		"<td>calculator</td><td>2</td><td>1</td><td>50.0 %</td>", "&lt;b&gt;other&lt;/b&gt;-model", "<td>ann</td>",
		"<td>unknown</td>", `href="/settings/activity" data-testid="nav-activity"`} {
		if !strings.Contains(page.body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(page.body, "<b>other</b>") {
		t.Error("a model name is not escaped")
	}
	if r := admin.get("/settings/activity?range=1y"); r.StatusCode != http.StatusBadRequest {
		t.Errorf("range=1y: %d", r.StatusCode)
	}
	for _, path := range []string{"/settings/activity", "/settings/activity?range=30d"} {
		if r := ann.get(path); r.StatusCode != http.StatusNotFound || strings.Contains(r.body, "calculator") {
			t.Errorf("ann GET %s: %d", path, r.StatusCode)
		}
	}

	wantStatus(t, admin.post(fmt.Sprintf("/settings/users/%d/delete", annID), url.Values{"confirm": {"ann"}}), http.StatusSeeOther)
	if rows, err := env.db.ActivityRollups(ctx, annID); err != nil || len(rows) != 0 {
		t.Errorf("a deleted user keeps %d rollups (%v)", len(rows), err)
	}
}

// Tool and model names reach the page as text, in the SVG and in the tables:
// a hostile name is escaped in both, never markup.
func TestActivityEscapesNames(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	ctx := context.Background()
	const tool, model = `evil__<script>alert(1)</script>`, `m"><svg onload=alert(2)>`
	row := store.ActivityRow{Hour: env.clock.now(), OwnerID: env.userID("admin"), Model: model, Metric: store.MetricLatency, N: 3, OK: 3, Sum: 600}
	row.Buckets[3] = 3
	err := env.db.AddActivity(ctx, []store.ActivityRow{row,
		{Hour: row.Hour, OwnerID: row.OwnerID, Model: model, Metric: store.MetricTool, Label: tool, N: 4, OK: 1},
		{Hour: row.Hour, OwnerID: row.OwnerID, Model: model, Metric: store.MetricError, Label: tool, N: 2},
		{Hour: row.Hour, OwnerID: row.OwnerID, Model: model, Metric: store.MetricTurn, N: 1, OK: 1, TokensIn: 5, TokensOut: 6}})
	if err != nil {
		t.Fatal(err)
	}
	page := admin.get("/settings/activity?range=24h")
	wantStatus(t, page, http.StatusOK)
	for _, raw := range []string{"<script>alert(1)", "<svg onload"} {
		if strings.Contains(page.body, raw) {
			t.Errorf("the page carries %q unescaped", raw)
		}
	}
	svg := regexp.MustCompile(`(?s)<svg class="chart".*?</svg>`).FindAllString(page.body, -1)
	if len(svg) < 4 {
		t.Fatalf("%d charts drawn, want tools, latency, tokens, errors: %.3000s", len(svg), page.body)
	}
	all := strings.Join(svg, "\n")
	if !strings.Contains(all, "<text class=\"chart-label\" x=\"0\" y=\"16\">evil__&lt;script&gt;") {
		t.Errorf("the tool chart's SVG lacks the escaped name: %s", all)
	}
	for _, want := range []string{"evil__&lt;script&gt;alert(1)&lt;/script&gt;", "m&#34;&gt;&lt;svg onload=alert(2)&gt; p50", "25.0 %"} {
		if !strings.Contains(all, want) && !strings.Contains(page.body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	// p50 of three calls in the 250–500 ms bucket, interpolated: 250 + 250×1.5/3.
	if !strings.Contains(page.body, "<td>375 ms</td>") {
		t.Errorf("p50 is not read from the buckets: %.4000s", page.body)
	}
}
