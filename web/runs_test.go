package web_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"atrium/internal/agent"
	"atrium/internal/app"
	"atrium/internal/contextwin"
	"atrium/internal/llm"
	"atrium/internal/llm/llmtest"
	"atrium/internal/store"
)

// Strings a model or a tool could return, meant to break out of the page's HTML.
const (
	hostileReasoning = `thinking </pre><script>alert("r")</script>`
	hostileArgs      = `{"expression":"</pre><script>alert(\"a\")</script>"}`
	hostileReply     = `It is 42 <img src=x onerror=alert("t")>`
)

var runLinkRE = regexp.MustCompile(`href="/s/([^/"]+)/runs/([^"]+)"[^>]*data-testid="run-link"`)

// runLinks returns the run ids linked from a chat page or frame, in order.
func runLinks(t *testing.T, body string) []string {
	t.Helper()
	var ids []string
	for _, m := range runLinkRE.FindAllStringSubmatch(body, -1) {
		ids = append(ids, m[2])
	}
	return ids
}

var spanSeqRE = regexp.MustCompile(`data-testid="span" data-kind="[a-z_]+" data-seq="(\d+)"`)

// openRun gets a run's page and every span's expanded data (what expanding each row
// loads), concatenated.
func openRun(t *testing.T, b *browser, sessionID, runID string) response {
	t.Helper()
	r := b.get("/s/" + sessionID + "/runs/" + runID)
	if r.StatusCode != http.StatusOK {
		return r
	}
	for _, m := range spanSeqRE.FindAllStringSubmatch(r.body, -1) {
		if !strings.Contains(r.body, `hx-get="/s/`+sessionID+`/runs/`+runID+`/spans/`+m[1]+`"`) {
			t.Errorf("span %s does not load its data", m[1])
		}
		d := b.get("/s/" + sessionID + "/runs/" + runID + "/spans/" + m[1])
		wantStatus(t, d, http.StatusOK)
		r.body += d.body
	}
	return r
}

// toolTurn sends a message that makes the fake model reason, call the calculator
// twice (once with hostile, invalid arguments: a tool error) and answer; it returns the
// run's id, read from the link the live reply gets once its run ended.
func toolTurn(t *testing.T, env *testEnv, admin *browser, id string) string {
	t.Helper()
	env.llm.Enqueue(
		llmtest.Reply{Reasoning: []string{hostileReasoning}, ToolCalls: []llmtest.ToolCall{
			{ID: "c1", Name: "calculator", Arguments: `{"expression":"6*7"}`},
			{ID: "c2", Name: "calculator", Arguments: hostileArgs},
		}, Usage: &llm.Usage{InputTokens: 120, OutputTokens: 8}},
		llmtest.Reply{Text: llmtest.Words(hostileReply), Usage: &llm.Usage{InputTokens: 150, OutputTokens: 5}},
	)
	ws := admin.dial(id)
	ws.send("What is 6*7?")
	frames := ws.until(`data-testid="run-link"`)
	all := strings.Join(frames, "\n")
	if !strings.Contains(all, `data-testid="run-link-pending"`) {
		t.Error("the live reply had no placeholder for its run link")
	}
	links := runLinks(t, frames[len(frames)-1])
	if len(links) != 1 {
		t.Fatalf("run-ended frame: %s", frames[len(frames)-1])
	}
	return links[0]
}

// The chat's owner opens a reply's run from its link: the header and a waterfall row
// for every span the run recorded, each with its data, and everything a model or a
// tool wrote escaped.
func TestRunViewerShowsTheRecordedRun(t *testing.T) {
	env, admin, id := chatEnv(t)
	runID := toolTurn(t, env, admin, id)

	chat := admin.get("/s/" + id)
	if got := runLinks(t, chat.body); len(got) != 1 || got[0] != runID {
		t.Fatalf("chat page links %v, want one link to %s (on the final reply only)", got, runID)
	}

	older := admin.get("/s/" + id + "/messages?before=1000")
	if got := runLinks(t, older.body); len(got) != 1 || got[0] != runID {
		t.Fatalf("older page links %v, want %s", got, runID)
	}

	r := openRun(t, admin, id, runID)
	wantStatus(t, r, http.StatusOK)
	for _, want := range []string{
		`data-testid="run-model">fake-model<`, `data-testid="run-status" class="run-status-complete">complete<`,
		`data-testid="run-tokens">270 / 13<`, `data-testid="run-steps">2<`,
	} {
		if !strings.Contains(r.body, want) {
			t.Errorf("run header lacks %s", want)
		}
	}
	kinds := map[string]int{}
	for _, m := range regexp.MustCompile(`data-testid="span" data-kind="([a-z_]+)"`).FindAllStringSubmatch(r.body, -1) {
		kinds[m[1]]++
	}
	for kind, n := range map[string]int{"context": 2, "tool_selection": 2, "model_request": 2, "model_response": 2,
		"tool_call": 2, "final": 1, "memory": 1} {
		if kinds[kind] != n {
			t.Errorf("%d %s spans, want %d (all: %v)", kinds[kind], kind, n, kinds)
		}
	}
	for _, want := range []string{
		`data-testid="span-zones"`, // context zones with tokens
		`data-testid="span-offered"`,
		`data-label="Body as sent (pretty-printed)"`, // the request exactly as sent
		`&#34;model&#34;: &#34;fake-model&#34;`,      // ... pretty-printed JSON
		`data-label="Reasoning"`, `thinking &lt;/pre&gt;&lt;script&gt;alert(&#34;r&#34;)&lt;/script&gt;`,
		`data-label="Arguments"`, `data-label="Result"`,
		`data-testid="span-error"`, // the failed tool call
		`It is 42 &lt;img src=x onerror=alert(&#34;t&#34;)&gt;`,
		`data-testid="span-bar" x="`,
	} {
		if !strings.Contains(r.body, want) {
			t.Errorf("run page lacks %s", want)
		}
	}
	for _, bad := range []string{`<script>alert`, `<img src=x`, `</pre><script>`} {
		if strings.Contains(r.body, bad) {
			t.Errorf("run page carries unescaped %q", bad)
		}
	}
	if csp := r.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "style-src 'self'") {
		t.Errorf("CSP %q", csp)
	}
	if strings.Contains(r.body, " style=") || strings.Contains(r.body, "<style") {
		t.Error("inline style on the run page (the CSP blocks it)")
	}
}

// A failed model call is a run with an error: the header shows it and an error span.
func TestRunViewerShowsAFailedRun(t *testing.T) {
	env, admin, id := chatEnv(t)
	env.llm.Enqueue(llmtest.Reply{Status: http.StatusInternalServerError, ErrorBody: `{"error":{"message":"<b>boom</b>"}}`})
	ws := admin.dial(id)
	ws.send("hello")
	frames := ws.until(`data-testid="run-link"`)
	runID := runLinks(t, frames[len(frames)-1])[0]
	r := openRun(t, admin, id, runID)
	wantStatus(t, r, http.StatusOK)
	for _, want := range []string{`class="run-status-error">error<`, `data-testid="run-error"`, `data-kind="error"`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("run page lacks %s", want)
		}
	}
	if strings.Contains(r.body, "<b>boom") {
		t.Error("the provider's error is not escaped")
	}
}

// Only the chat's owner opens its runs: another user, another chat of the owner and
// a made-up id all get the same 404, and the run's content never shows.
func TestRunViewerIsTheOwnersOnly(t *testing.T) {
	env, admin, id := chatEnv(t)
	runID := toolTurn(t, env, admin, id)
	bob := env.user(admin, "bob")
	bobChat := bob.newSession()
	other := admin.newSession()
	for name, c := range map[string]struct {
		b    *browser
		path string
	}{
		"another user":                 {bob, "/s/" + id + "/runs/" + runID},
		"another user's own chat":      {bob, "/s/" + bobChat + "/runs/" + runID},
		"another chat of the owner":    {admin, "/s/" + other + "/runs/" + runID},
		"a run that does not exist":    {admin, "/s/" + id + "/runs/no-such-run"},
		"a chat that does not exist":   {admin, "/s/no-such-chat/runs/" + runID},
		"the owner's run, wrong case":  {admin, "/s/" + id + "/runs/" + strings.ToUpper(runID)},
		"another user, a span":         {bob, "/s/" + id + "/runs/" + runID + "/spans/1"},
		"another user's chat, a span":  {bob, "/s/" + bobChat + "/runs/" + runID + "/spans/1"},
		"another chat's span":          {admin, "/s/" + other + "/runs/" + runID + "/spans/1"},
		"a span that does not exist":   {admin, "/s/" + id + "/runs/" + runID + "/spans/9999"},
		"a span seq that is no number": {admin, "/s/" + id + "/runs/" + runID + "/spans/1x"},
	} {
		r := c.b.get(c.path)
		if r.StatusCode != http.StatusNotFound || strings.Contains(r.body, "fake-model") || strings.Contains(r.body, "calculator") {
			t.Errorf("%s: status %d", name, r.StatusCode)
		}
	}
	wantStatus(t, admin.get("/s/"+id+"/runs/"+runID), http.StatusOK)
	wantStatus(t, admin.get("/s/"+id+"/runs/"+runID+"/spans/1"), http.StatusOK)
}

// A turn that folds older turns into the rolling summary shows the fold as a summary
// span with the new summary (escaped) and the turns it folded.
func TestRunViewerShowsASummaryFold(t *testing.T) {
	env := newTestEnvWith(t, app.Options{Agent: agent.Config{Budgets: contextwin.Budgets{RecentTurns: 1}}})
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "fake-model", "")
	id := admin.newSession()
	const summary = `Summary: the user said hello </pre><script>alert("s")</script>`
	env.llm.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		if strings.HasPrefix(req.LastUser(), "Current summary:") {
			return llmtest.Reply{Text: []string{summary}}
		}
		return llmtest.Reply{Text: []string{"ok"}}
	})
	ws := admin.dial(id)
	var runID string
	for i := 0; i < 3 && runID == ""; i++ {
		ws.send("hello " + strconv.Itoa(i))
		frames := ws.until(`data-testid="run-link"`)
		last := runLinks(t, frames[len(frames)-1])[0]
		if strings.Contains(openRun(t, admin, id, last).body, `data-kind="summary"`) {
			runID = last
		}
	}
	if runID == "" {
		t.Fatal("no run folded the older turns")
	}
	r := openRun(t, admin, id, runID)
	for _, want := range []string{`data-label="New summary"`, `the user said hello &lt;/pre&gt;&lt;script&gt;`,
		`data-label="Fold"`, `&#34;from_seq&#34;`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("run page lacks %s", want)
		}
	}
	if strings.Contains(r.body, `<script>alert`) {
		t.Error("the summary is not escaped")
	}
}

// A reply whose run retention pruned has no link (it would open a 404).
func TestRunLinkGoesWithPrunedRun(t *testing.T) {
	env, admin, id := chatEnv(t)
	env.llm.Enqueue(llmtest.Reply{Text: []string{"hi"}})
	ws := admin.dial(id)
	ws.send("hello")
	frames := ws.until(`data-testid="run-link"`)
	runID := runLinks(t, frames[len(frames)-1])[0]
	if got := runLinks(t, admin.get("/s/"+id).body); len(got) != 1 || got[0] != runID {
		t.Fatalf("before pruning the chat links %v", got)
	}
	if n, err := env.db.PruneRuns(context.Background(), store.Retention{Before: time.Now().Add(time.Hour)}); err != nil || n != 1 {
		t.Fatalf("pruned %d runs: %v", n, err)
	}
	if got := runLinks(t, admin.get("/s/"+id).body); len(got) != 0 {
		t.Errorf("after pruning the chat links %v", got)
	}
	wantStatus(t, admin.get("/s/"+id+"/runs/"+runID), http.StatusNotFound)
}

// The run page's pin button pins the run (retention keeps it) and shows the new state.
func TestRunPagePinsTheRun(t *testing.T) {
	env, admin, id := chatEnv(t)
	runID := toolTurn(t, env, admin, id)
	if r := admin.get("/s/" + id + "/runs/" + runID); !strings.Contains(r.body, `data-testid="run-pin" data-pinned="false"`) {
		t.Fatal("no pin button on the run page")
	}
	r := admin.postRaw("/runs/"+runID+"/pin", url.Values{"pinned": {"true"}, "_csrf": {admin.token()}}, http.Header{"HX-Request": {"true"}})
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(r.body, `data-pinned="true"`) {
		t.Errorf("the button after pinning: %s", r.body)
	}
	if r := admin.get("/s/" + id + "/runs/" + runID); !strings.Contains(r.body, `data-pinned="true"`) {
		t.Error("the run page does not show the run pinned")
	}
}

// The viewer shows what the context left out and why, the tools offered out of all
// the ranked ones, and the memory hits with their scores, each escaped.
func TestRunViewerShowsCutsOfferedAndMemoryHits(t *testing.T) {
	env, admin, id := chatEnv(t)
	ctx := context.Background()
	run, err := env.app.Recorder.StartRun(ctx, "run-cuts", id, env.userID("admin"), "fake-model")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	steps := []struct {
		kind, name string
		data       any
	}{
		{"memory", "recall", map[string]any{"hits": []map[string]any{{"id": "mem-<b>1</b>", "kind": "fact", "score": 0.913}}}},
		{"context", "step 1", map[string]any{
			"zones":    []contextwin.Zone{{Name: "pinned", Tokens: 790, Budget: 800}, {Name: "history", Tokens: 1200, Budget: 1500}},
			"cut":      []contextwin.Cut{{Seq: 3, Reason: "tool result over 2000 tokens: <head> and tail kept"}},
			"included": []int64{1, 2, 3}, "memories": 1}},
		{"tool_selection", "ranked", map[string]any{"Offered": []string{"calculator"}, "Reason": "ranked",
			"Scores": map[string]float64{"calculator": 0.81, "datetime": 0.12}}},
	}
	for _, s := range steps {
		if err := run.Record(ctx, s.kind, s.name, s.data, at, "", nil, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := run.End(ctx, "", nil, 10, 2, 1); err != nil {
		t.Fatal(err)
	}
	r := openRun(t, admin, id, "run-cuts")
	wantStatus(t, r, http.StatusOK)
	for _, want := range []string{
		`data-testid="span-zones"`, `<td>history</td><td>1200</td><td>1500</td>`,
		`data-testid="span-cuts"`, `<td>3</td><td>tool result over 2000 tokens: &lt;head&gt; and tail kept</td>`,
		`data-testid="span-offered">Offered (ranked): calculator`,
		`data-testid="span-ranked"`, `<td>datetime</td><td>0.120</td><td>no</td>`,
		`mem-&lt;b&gt;1&lt;/b&gt;`, `0.913`,
	} {
		if !strings.Contains(r.body, want) {
			t.Errorf("run page lacks %s", want)
		}
	}
}
