package trace_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"atrium/internal/errs"
	"atrium/internal/store"
	"atrium/internal/store/storetest"
	"atrium/internal/trace"
)

// recordToolRun records a finished run of ann with a context span, a tool call
// and its nested result, and a final reply.
func recordToolRun(t *testing.T, f *fixture, id string) {
	t.Helper()
	ctx := context.Background()
	run, err := f.rec.StartRun(ctx, id, f.sess.ID, f.ann.ID, "m-export")
	mustNil(t, err)
	mustNil(t, run.Record(ctx, trace.KindContext, "step 1", map[string]any{"zones": []string{"export-marker-zone"}}, ms(1), "", nil, 12, 0))
	tc, err := run.Span(ctx, trace.KindToolCall, "clock", json.RawMessage(`{"arguments":{"tz":"export-marker-arg"}}`))
	mustNil(t, err)
	res, err := tc.Child(ctx, trace.KindToolResult, "clock", map[string]string{"result": "export-marker-result"})
	mustNil(t, err)
	mustNil(t, res.End(ctx, "", nil, 0, 0, nil))
	mustNil(t, tc.End(ctx, "", nil, 0, 0, nil))
	mustNil(t, run.Record(ctx, trace.KindFinal, "", map[string]string{"content": "export-marker-reply <b>&"}, ms(5), "", nil, 0, 7))
	mustNil(t, run.End(ctx, "", nil, 12, 7, 1))
}

// spanShape is a span without its ids and absolute times, to compare runs.
type spanShape struct {
	Seq, ParentSeq            int
	Kind, Name, Status, Error string
	Offset, Duration          time.Duration
	TokensIn, TokensOut       int
	Data                      string
}

func shapes(t *testing.T, x trace.RunExport) []spanShape {
	t.Helper()
	var out []spanShape
	for _, s := range x.Spans {
		sh := spanShape{Seq: s.Seq, ParentSeq: s.ParentSeq, Kind: s.Kind, Name: s.Name, Status: s.Status, Error: s.Error,
			Offset: s.StartedAt.Sub(x.Run.StartedAt), TokensIn: s.TokensIn, TokensOut: s.TokensOut}
		if s.EndedAt != nil {
			sh.Duration = s.EndedAt.Sub(s.StartedAt)
		}
		var v any
		mustNil(t, json.Unmarshal(s.Data, &v))
		norm, _ := json.Marshal(v)
		sh.Data = string(norm)
		out = append(out, sh)
	}
	return out
}

func parseExport(t *testing.T, data []byte) trace.RunExport {
	t.Helper()
	x, err := trace.ParseRunExport(data)
	mustNil(t, err)
	return x
}

// An exported run imports as a run of the importer: same spans, nesting,
// offsets and (opened) data, sealed with the importer's key, marked imported,
// without a session, starting now; exporting it again gives the same spans.
func TestRunExportImportRoundTrip(t *testing.T) {
	f, _ := sealedFixture(t)
	ctx := context.Background()
	recordToolRun(t, f, "run-x")
	file, err := f.rec.ExportRun(ctx, f.ann.ID, "run-x")
	mustNil(t, err)
	for _, want := range []string{`"format": "atrium-run"`, `"version": 1`, "export-marker-arg", "export-marker-result", "export-marker-reply <b>&"} {
		if !strings.Contains(string(file), want) {
			t.Errorf("the export lacks %s:\n%s", want, file)
		}
	}
	if _, err := f.rec.ExportRun(ctx, f.bob.ID, "run-x"); !errs.Is(err, errs.NotFound) {
		t.Errorf("bob exported ann's run: %v", err)
	}
	orig := parseExport(t, file)
	if len(orig.Spans) != 4 || orig.Spans[2].Kind != trace.KindToolResult || orig.Spans[2].ParentSeq != 2 || orig.Run.ID != "run-x" {
		t.Fatalf("exported spans: %+v", orig.Spans)
	}

	before := f.clock.Now()
	ri, err := f.rec.ImportRun(ctx, f.bob.ID, "imp-1", file)
	mustNil(t, err)
	if ri.ID != "imp-1" || ri.OwnerID != f.bob.ID || ri.SessionID != "" || ri.Status != trace.StatusComplete ||
		ri.InputTokens != 12 || ri.OutputTokens != 7 || ri.StartedAt.Before(before) {
		t.Errorf("imported run: %+v (import started %v)", ri, before)
	}
	if got, want := ri.EndedAt.Sub(ri.StartedAt), orig.Run.EndedAt.Sub(orig.Run.StartedAt); got != want {
		t.Errorf("imported run lasts %v, the original %v", got, want)
	}
	if imp, err := f.db.RunImported(ctx, "imp-1"); err != nil || !imp {
		t.Errorf("not marked imported: %v, %v", imp, err)
	}
	for _, d := range storetest.Strings(t, f.db, `SELECT data FROM spans WHERE run_id = 'imp-1' AND data IS NOT NULL`) {
		if strings.Contains(d, "marker") || !strings.HasPrefix(d, `{"sealed":`) {
			t.Errorf("imported span stored in the clear: %s", d)
		}
	}
	if _, _, err := f.rec.Run(ctx, f.ann.ID, "imp-1"); !errs.Is(err, errs.NotFound) {
		t.Errorf("ann reads bob's import: %v", err)
	}
	again, err := f.rec.ExportRun(ctx, f.bob.ID, "imp-1")
	mustNil(t, err)
	back := parseExport(t, again)
	a, b := shapes(t, orig), shapes(t, back)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("round trip changed the spans:\n%v\n%v", a, b)
	}
	// Importing the same file twice gives two runs, not a conflict.
	_, err = f.rec.ImportRun(ctx, f.bob.ID, "imp-2", file)
	mustNil(t, err)
}

// The importing install redacts again, with its own secrets; a running run
// comes in stopped.
func TestRunImportRedactsAndStops(t *testing.T) {
	f, _ := sealedFixture(t)
	ctx := context.Background()
	f.red.AddSecret("hunter2-local-secret")
	doc := validExport()
	doc["run"].(map[string]any)["status"] = "running"
	delete(doc["run"].(map[string]any), "ended_at")
	doc["spans"].([]any)[0].(map[string]any)["data"] = map[string]any{"api_key": "abc", "text": "my hunter2-local-secret here"}
	ri, err := f.rec.ImportRun(ctx, f.bob.ID, "imp-r", marshal(t, doc))
	mustNil(t, err)
	if ri.Status != trace.StatusStopped || ri.EndedAt.IsZero() || ri.Error == "" {
		t.Errorf("a running import: %+v", ri)
	}
	_, spans, err := f.rec.Run(ctx, f.bob.ID, "imp-r")
	mustNil(t, err)
	if d := string(spans[0].Data); strings.Contains(d, "hunter2") || strings.Contains(d, "abc") || !strings.Contains(d, trace.Redacted) {
		t.Errorf("imported data not redacted: %s", d)
	}
}

func validExport() map[string]any {
	return map[string]any{
		"format": "atrium-run", "version": 1, "exported_at": "2026-01-02T03:04:05Z",
		"run": map[string]any{"id": "src-run", "model": "m", "status": "complete", "started_at": "2026-01-02T03:00:00Z",
			"ended_at": "2026-01-02T03:00:02Z", "input_tokens": 5, "output_tokens": 6, "steps": 1},
		"spans": []any{
			map[string]any{"seq": 1, "kind": "tool_call", "name": "clock", "status": "ok", "started_at": "2026-01-02T03:00:00.5Z",
				"ended_at": "2026-01-02T03:00:01Z", "tokens_in": 0, "tokens_out": 0, "data": map[string]any{"arguments": map[string]any{}}},
			map[string]any{"seq": 2, "parent_seq": 1, "kind": "tool_result", "name": "clock", "status": "ok",
				"started_at": "2026-01-02T03:00:01Z", "tokens_in": 0, "tokens_out": 0},
		},
	}
}

func marshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	mustNil(t, err)
	return b
}

// Hostile or broken files are refused with a message that says what is wrong,
// and store nothing.
func TestRunImportRefusesHostileFiles(t *testing.T) {
	f, _ := sealedFixture(t)
	ctx := context.Background()
	span := func(doc map[string]any, i int) map[string]any { return doc["spans"].([]any)[i].(map[string]any) }
	run := func(doc map[string]any) map[string]any { return doc["run"].(map[string]any) }
	edit := func(change func(doc map[string]any)) []byte {
		doc := validExport()
		change(doc)
		return marshal(t, doc)
	}
	many := make([]any, 10001)
	for i := range many {
		many[i] = map[string]any{"seq": i + 1, "kind": "final", "name": "", "status": "ok", "started_at": "2026-01-02T03:00:00Z",
			"tokens_in": 0, "tokens_out": 0}
	}
	huge := `{"format": "atrium-run", "version": 1, "pad": "` + strings.Repeat("x", trace.MaxRunImportBytes) + `"}`
	for _, tc := range []struct {
		name, want string
		code       string
		file       []byte
	}{
		{"empty", "empty", errs.Invalid, []byte("  \n")},
		{"bad JSON", "line 2, column 14: unexpected end", errs.Invalid, []byte("{\"format\": \"atrium-run\",\n\"version\": 1,\n")},
		{"not an object", "line 1, column 1", errs.Invalid, []byte(`[1, 2]`)},
		{"huge", "larger than 16 MB", errs.TooLarge, []byte(huge)},
		{"other format", "not a run export", errs.Invalid, edit(func(d map[string]any) { d["format"] = "atrium-memories" })},
		{"newer version", "format version 2", errs.Invalid, edit(func(d map[string]any) { d["version"] = 2 })},
		{"unknown key", `unknown field "extra"`, errs.Invalid, edit(func(d map[string]any) { span(d, 0)["extra"] = true })},
		{"wrong type", `"spans.seq" must be a number, not string`, errs.Invalid, edit(func(d map[string]any) { span(d, 1)["seq"] = "2" })},
		{"two documents", "after top-level value", errs.Invalid, append(edit(func(map[string]any) {}), []byte(` {}`)...)},
		{"wrong kind", `kind "shell" is not a span kind`, errs.Invalid, edit(func(d map[string]any) { span(d, 1)["kind"] = "shell" })},
		{"duplicate seq", "seq 1 appears twice", errs.Invalid, edit(func(d map[string]any) { span(d, 1)["seq"] = 1; delete(span(d, 1), "parent_seq") })},
		{"seq order", "seq order", errs.Invalid, edit(func(d map[string]any) { span(d, 0)["seq"] = 3 })},
		{"zero seq", "positive", errs.Invalid, edit(func(d map[string]any) { span(d, 0)["seq"] = 0 })},
		{"unknown parent", "parent_seq 7", errs.Invalid, edit(func(d map[string]any) { span(d, 1)["parent_seq"] = 7 })},
		{"later parent", "parent_seq 2", errs.Invalid, edit(func(d map[string]any) { span(d, 0)["parent_seq"] = 2 })},
		{"sealed data", "still sealed", errs.Invalid, edit(func(d map[string]any) { span(d, 0)["data"] = map[string]any{"sealed": "AAAA"} })},
		{"run status", `status "done"`, errs.Invalid, edit(func(d map[string]any) { run(d)["status"] = "done" })},
		{"no start", "started_at", errs.Invalid, edit(func(d map[string]any) { delete(run(d), "started_at") })},
		{"ends before it starts", "ended_at", errs.Invalid, edit(func(d map[string]any) { span(d, 0)["ended_at"] = "2025-01-01T00:00:00Z" })},
		{"negative tokens", "negative", errs.Invalid, edit(func(d map[string]any) { run(d)["input_tokens"] = -1 })},
		{"no run id", `"id"`, errs.Invalid, edit(func(d map[string]any) { run(d)["id"] = "" })},
		{"long error", "error text", errs.Invalid, edit(func(d map[string]any) { span(d, 0)["error"] = strings.Repeat("e", 5000) })},
		{"too many spans", "10001 spans", errs.TooLarge, edit(func(d map[string]any) { d["spans"] = many })},
		{"span years away", "within 7 days of the run's start", errs.Invalid, edit(func(d map[string]any) {
			span(d, 1)["started_at"] = "2031-01-02T03:00:01Z"
		})},
		{"run ends years later", "within 7 days of the run's start", errs.Invalid, edit(func(d map[string]any) { run(d)["ended_at"] = "2099-01-01T00:00:00Z" })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.rec.ImportRun(ctx, f.bob.ID, "hostile", tc.file)
			if errs.Code(err) != tc.code || !strings.Contains(errs.Message(err), tc.want) {
				t.Errorf("got %v (%s), want %s with %q", err, errs.Code(err), tc.code, tc.want)
			}
		})
	}
	if n := storetest.Int(t, f.db, `SELECT COUNT(*) FROM runs`); n != 0 {
		t.Errorf("%d runs stored by refused imports", n)
	}
	// The base file itself is fine: the refusals above are the edits'.
	_, err := f.rec.ImportRun(ctx, f.bob.ID, "fine", marshal(t, validExport()))
	mustNil(t, err)
	list, _, err := f.db.AllRuns(ctx, store.RunFilter{Tool: "clock"}, nil, 5)
	mustNil(t, err)
	if len(list) != 1 || list[0].ID != "fine" || !list[0].Imported {
		t.Errorf("the imported run in the admin list: %+v", list)
	}
}

// An import starts now wherever its times were: a run from the year 9998 (past what a
// time.Duration spans) is moved like any other, its spans keeping their offsets.
func TestRunImportMovesFarFutureToNow(t *testing.T) {
	f, _ := sealedFixture(t)
	doc := validExport()
	doc["run"].(map[string]any)["started_at"] = "9998-01-02T03:00:00Z"
	doc["run"].(map[string]any)["ended_at"] = "9998-01-02T03:00:02Z"
	for _, sp := range doc["spans"].([]any) {
		m := sp.(map[string]any)
		for _, k := range []string{"started_at", "ended_at"} {
			if v, ok := m[k].(string); ok {
				m[k] = "9998" + strings.TrimPrefix(v, "2026")
			}
		}
	}
	near, err := f.rec.ImportRun(context.Background(), f.bob.ID, "near", marshal(t, validExport()))
	mustNil(t, err)
	ri, err := f.rec.ImportRun(context.Background(), f.bob.ID, "far", marshal(t, doc))
	mustNil(t, err)
	if d := ri.StartedAt.Sub(near.StartedAt); d < 0 || d > time.Minute || ri.EndedAt.Sub(ri.StartedAt) != 2*time.Second {
		t.Errorf("imported run from %v to %v, want it to start now (%v) and last 2 s", ri.StartedAt, ri.EndedAt, near.StartedAt)
	}
	_, spans, err := f.rec.Run(context.Background(), f.bob.ID, "far")
	mustNil(t, err)
	if len(spans) != 2 || spans[0].StartedAt.Sub(ri.StartedAt) != 500*time.Millisecond {
		t.Errorf("spans %+v, want the first 0.5 s after the run's start", spans)
	}
}
