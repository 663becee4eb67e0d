package web_test

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"atrium/internal/llm/llmtest"
	"atrium/internal/providers"
	"atrium/internal/store"
	"atrium/internal/testkit"
	"atrium/internal/trace"
)

// replayEnv is a chat whose provider "Fake" offers two models, and one finished turn
// in it: the user's message, a calculator call (6*7) and the final reply.
type replayEnv struct {
	env    *testEnv
	admin  *browser
	sid    string
	owner  int64
	run    string
	spans  []store.SpanInfo
	sentAt int // how many requests the fake had received when the turn ended
}

func newReplayEnv(t *testing.T) *replayEnv {
	env := newTestEnv(t)
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "fake-model, other-model", "")
	r := &replayEnv{env: env, admin: admin, sid: admin.newSession()}
	env.llm.Enqueue(
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"6*7"}`}}},
		llmtest.Reply{Text: llmtest.Words("The answer is 42.")},
	)
	r.turn(t, "What is six times seven?")
	return r
}

// turn sends text and waits until its run is recorded as finished; it leaves that run
// in r.run and r.spans.
func (r *replayEnv) turn(t *testing.T, text string) {
	t.Helper()
	ws := r.admin.dial(r.sid)
	ws.send(text)
	// The reply's run link comes once its run is stored (the recording writes in
	// the background): only then is the newest run of the chat this turn's. The
	// link swapped in live, not one of the earlier replies' in the snapshot.
	ws.until(`data-testid="run-link" hx-swap-oob="outerHTML"`)
	ctx := context.Background()
	u, err := r.env.db.UserByUsername(ctx, "admin")
	if err != nil {
		t.Fatal(err)
	}
	r.owner = u.ID
	testkit.Eventually(t, 5*time.Second, "the run recorded", func() bool {
		runs, err := r.env.db.ListRuns(ctx, u.ID, r.sid, 1)
		if err != nil || len(runs) == 0 || runs[0].Status == trace.StatusRunning {
			return false
		}
		r.run = runs[0].ID
		return true
	})
	_, spans, err := r.env.app.Recorder.Run(ctx, u.ID, r.run)
	if err != nil {
		t.Fatal(err)
	}
	r.spans = spans
	r.sentAt = len(r.env.llm.Requests())
}

// modelStep is the seq of the run's n-th model_request span (from 1).
func (r *replayEnv) modelStep(t *testing.T, n int) int {
	t.Helper()
	for _, s := range r.spans {
		if s.Kind == trace.KindModelRequest {
			if n--; n == 0 {
				return s.Seq
			}
		}
	}
	t.Fatalf("the run has fewer model steps than %d", n)
	return 0
}

func (r *replayEnv) path(seq int, rest string) string {
	return "/s/" + r.sid + "/runs/" + r.run + "/spans/" + strconv.Itoa(seq) + rest
}

// choice is the form value of model on the provider named name.
func (r *replayEnv) choice(t *testing.T, name, model string) string {
	t.Helper()
	ps, err := r.env.db.ListProviders(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.Name == name {
			return providers.Value(p.ID, model)
		}
	}
	t.Fatalf("no provider %q", name)
	return ""
}

// replay posts the replay form and follows its redirect to the result page.
func (r *replayEnv) replay(t *testing.T, b *browser, seq int, target, tools string) (string, response) {
	t.Helper()
	res := b.post(r.path(seq, "/replay"), url.Values{"target": {target}, "tools": {tools}})
	wantStatus(t, res, http.StatusSeeOther)
	loc := res.Header.Get("Location")
	u, err := url.Parse(loc)
	if err != nil || u.Query().Get("replay") == "" {
		t.Fatalf("replay redirected to %q", loc)
	}
	page := b.get(loc)
	wantStatus(t, page, http.StatusOK)
	return u.Query().Get("replay"), page
}

// Replaying a step to the model it went to sends the very bytes the fake model got
// the first time; the replay is a run marked as a replay of that span, with spans.
func TestReplaySameModelSendsRecordedBytes(t *testing.T) {
	r := newReplayEnv(t)
	seq := r.modelStep(t, 1)
	page := r.admin.get(r.path(seq, "/replay"))
	wantStatus(t, page, http.StatusOK)
	same := r.choice(t, "Fake", "fake-model")
	if !strings.Contains(page.body, `value="`+same+`" selected`) {
		t.Errorf("the recorded model is not preselected:\n%s", page.body)
	}
	original := r.env.llm.Requests()[0].Body

	r.env.llm.Enqueue(llmtest.Reply{Text: llmtest.Words("Forty-two.")})
	id, res := r.replay(t, r.admin, seq, same, trace.ResultRecorded)
	got := r.env.llm.Requests()
	if len(got) != r.sentAt+1 {
		t.Fatalf("the replay made %d requests, want 1", len(got)-r.sentAt)
	}
	if !bytes.Equal(got[r.sentAt].Body, original) {
		t.Errorf("replayed body differs from the original:\n got %s\nwant %s", got[r.sentAt].Body, original)
	}
	if !strings.Contains(res.body, "byte for byte ("+strconv.Itoa(len(original))+" bytes)") {
		t.Errorf("the page does not say the bytes were identical:\n%s", res.body)
	}
	ri, err := r.env.db.RunForOwner(context.Background(), r.owner, id)
	if err != nil {
		t.Fatal(err)
	}
	if ri.ReplayOf != r.run || ri.ReplaySpan != seq || ri.SessionID != r.sid || ri.Status != trace.StatusComplete {
		t.Errorf("replay run %+v, want a complete replay of %s span %d", ri, r.run, seq)
	}
	_, spans, err := r.env.app.Recorder.Run(context.Background(), r.owner, id)
	if err != nil {
		t.Fatal(err)
	}
	bodies, err := trace.RebuildRequests(spans)
	if err != nil || len(bodies) != 1 || !bytes.Equal(bodies[0], original) {
		t.Errorf("the replay run's recorded request: %d bodies, err %v", len(bodies), err)
	}
	if !strings.Contains(res.body, "Forty-two.") || !strings.Contains(res.body, "The answer is 42.") {
		t.Errorf("side by side misses a reply:\n%s", res.body)
	}
}

// Replaying to another model, on the same provider or on a second one, sends the
// recorded body with only the model value changed.
func TestReplayOtherModelChangesOnlyTheModel(t *testing.T) {
	r := newReplayEnv(t)
	seq := r.modelStep(t, 1)
	original := r.env.llm.Requests()[0].Body
	if !bytes.Contains(original, []byte(`"model":"fake-model"`)) {
		t.Fatalf("the recorded body does not name its model as expected: %s", original)
	}
	want := bytes.Replace(original, []byte(`"model":"fake-model"`), []byte(`"model":"other-model"`), 1)

	r.env.llm.Enqueue(llmtest.Reply{Text: []string{"other"}})
	_, res := r.replay(t, r.admin, seq, r.choice(t, "Fake", "other-model"), trace.ResultRecorded)
	if got := r.env.llm.Requests()[r.sentAt].Body; !bytes.Equal(got, want) {
		t.Errorf("body to other-model:\n got %s\nwant %s", got, want)
	}
	if !strings.Contains(res.body, "only the model changed to other-model") {
		t.Errorf("the page does not say only the model changed:\n%s", res.body)
	}

	second := llmtest.NewServer(t)
	second.Enqueue(llmtest.Reply{Text: []string{"second"}})
	r.admin.addProvider("Second", second.URL(), "second-model", "sk-second-provider-key-0123456789")
	want2 := bytes.Replace(original, []byte(`"model":"fake-model"`), []byte(`"model":"second-model"`), 1)
	r.replay(t, r.admin, seq, r.choice(t, "Second", "second-model"), trace.ResultRecorded)
	got := second.Requests()
	if len(got) != 1 || !bytes.Equal(got[0].Body, want2) {
		t.Fatalf("second provider got %d requests; want the body with only the model changed", len(got))
	}
	// Credentials come from the provider's settings, not from the recording.
	if a := got[0].Header.Get("Authorization"); a != "Bearer sk-second-provider-key-0123456789" {
		t.Errorf("Authorization %q", a)
	}
}

// With recorded results, a replayed reply's tool call gets the result recorded at the
// same position (6*7's), whatever its arguments; live, the tool runs (1+1 = 2).
func TestReplayToolResults(t *testing.T) {
	r := newReplayEnv(t)
	seq := r.modelStep(t, 1)
	same := r.choice(t, "Fake", "fake-model")
	toolMessage := func() string {
		t.Helper()
		last := r.env.llm.LastRequest().Chat.Messages
		for i := len(last) - 1; i >= 0; i-- {
			if last[i].Role == "tool" && last[i].ToolCallID == "r1" {
				return last[i].Content
			}
		}
		t.Fatalf("the follow-up request has no result for the replayed call: %+v", last)
		return ""
	}
	script := func() {
		r.env.llm.Enqueue(
			llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "r1", Name: "calculator", Arguments: `{"expression":"1+1"}`}}},
			llmtest.Reply{Text: []string{"done"}},
		)
	}

	var recorded string
	for _, m := range r.env.messages(r.sid) {
		if m.Role == store.RoleTool {
			recorded = m.Content
		}
	}
	if !strings.Contains(recorded, `"result":42`) {
		t.Fatalf("the turn's tool result is %q", recorded)
	}
	script()
	_, res := r.replay(t, r.admin, seq, same, trace.ResultRecorded)
	if got := toolMessage(); got != recorded {
		t.Errorf("recorded mode served %q, want the recorded %q", got, recorded)
	}
	if !strings.Contains(res.body, "(recorded)") {
		t.Errorf("the page does not mark the result recorded:\n%s", res.body)
	}

	script()
	_, res = r.replay(t, r.admin, seq, same, trace.ResultLive)
	if got := toolMessage(); !strings.Contains(got, `"result":2}`) {
		t.Errorf("live mode gave %q, want the calculator's 2", got)
	}
	if !strings.Contains(res.body, "(live)") {
		t.Errorf("the page does not mark the result live:\n%s", res.body)
	}
}

// A live replay refuses an MCP tool whose server is not ready instead of calling it.
func TestReplayLiveRefusesMCPToolNotReady(t *testing.T) {
	r := newReplayEnv(t)
	r.env.llm.Enqueue(
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "r1", Name: "files__read", Arguments: `{}`}}},
		llmtest.Reply{Text: []string{"done"}},
	)
	r.replay(t, r.admin, r.modelStep(t, 1), r.choice(t, "Fake", "fake-model"), trace.ResultLive)
	var result string
	for _, m := range r.env.llm.LastRequest().Chat.Messages {
		if m.Role == "tool" && m.ToolCallID == "r1" {
			result = m.Content
		}
	}
	if !strings.Contains(result, `The MCP server "files" is not configured`) {
		t.Errorf("tool result %q", result)
	}
}

// Replays never write into the chat: its messages stay as the turn left them.
func TestReplayAddsNoChatMessages(t *testing.T) {
	r := newReplayEnv(t)
	before := r.env.messages(r.sid)
	r.env.llm.Enqueue(
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "r1", Name: "calculator", Arguments: `{"expression":"1+1"}`}}},
		llmtest.Reply{Text: []string{"a different answer"}},
	)
	r.replay(t, r.admin, r.modelStep(t, 1), r.choice(t, "Fake", "other-model"), trace.ResultLive)
	r.env.llm.Enqueue(llmtest.Reply{Text: []string{"again"}})
	r.replay(t, r.admin, r.modelStep(t, 2), r.choice(t, "Fake", "fake-model"), trace.ResultRecorded)
	after := r.env.messages(r.sid)
	if len(after) != len(before) {
		t.Fatalf("the chat has %d messages after two replays, had %d", len(after), len(before))
	}
	for i := range after {
		if after[i].Content != before[i].Content || after[i].Seq != before[i].Seq {
			t.Errorf("message %d changed: %q → %q", i, before[i].Content, after[i].Content)
		}
	}
}

// Another user, another chat's path, a made-up span and a non-model span are all 404
// (or a refusal), and nothing is replayed or forked for them.
func TestReplayIsolation(t *testing.T) {
	r := newReplayEnv(t)
	seq := r.modelStep(t, 1)
	same := r.choice(t, "Fake", "fake-model")
	bob := r.env.user(r.admin, "bob")
	form := url.Values{"target": {same}, "tools": {trace.ResultRecorded}}
	wantStatus(t, bob.get(r.path(seq, "/replay")), http.StatusNotFound)
	wantStatus(t, bob.post(r.path(seq, "/replay"), form), http.StatusNotFound)
	wantStatus(t, bob.post(r.path(seq, "/fork"), nil), http.StatusNotFound)

	other := r.admin.newSession()
	wrong := "/s/" + other + "/runs/" + r.run + "/spans/" + strconv.Itoa(seq)
	wantStatus(t, r.admin.get(wrong+"/replay"), http.StatusNotFound)
	wantStatus(t, r.admin.post(wrong+"/fork", nil), http.StatusNotFound)
	wantStatus(t, r.admin.get(r.path(999, "/replay")), http.StatusNotFound)
	wantStatus(t, r.admin.get("/s/"+r.sid+"/runs/no-such-run/spans/1/replay"), http.StatusNotFound)
	var final int
	for _, s := range r.spans {
		if s.Kind == trace.KindFinal {
			final = s.Seq
		}
	}
	wantStatus(t, r.admin.get(r.path(final, "/replay")), http.StatusBadRequest)
	// A replay run id of the owner's that replays another step is not shown here.
	wantStatus(t, r.admin.get(r.path(seq, "/replay?replay="+r.run)), http.StatusNotFound)
	// An unconfigured model is refused.
	bad := url.Values{"target": {r.choice(t, "Fake", "not-offered")}, "tools": {trace.ResultRecorded}}
	wantStatus(t, r.admin.post(r.path(seq, "/replay"), bad), http.StatusBadRequest)

	if n := len(r.env.llm.Requests()); n != r.sentAt {
		t.Errorf("refused replays reached the model %d times", n-r.sentAt)
	}
	if runs, _ := r.env.db.ListRuns(context.Background(), r.owner, r.sid, 10); len(runs) != 1 {
		t.Errorf("%d runs in the chat, want only the turn", len(runs))
	}
	bu, _ := r.env.db.UserByUsername(context.Background(), "bob")
	if ss, _, _ := r.env.db.ListSessions(context.Background(), bu.ID, nil, 10); len(ss) != 0 {
		t.Errorf("bob has %d sessions after a refused fork", len(ss))
	}
}

// Forking at a step of the second turn copies the first turn and the second user
// message, exactly, and nothing after (not the step's tool call); the fork opens.
func TestForkCopiesHistoryUpToTheStep(t *testing.T) {
	r := newReplayEnv(t) // turn 1: question, tool call, tool result, answer
	r.env.llm.Enqueue(
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "c2", Name: "calculator", Arguments: `{"expression":"2*3"}`}}},
		llmtest.Reply{Text: llmtest.Words("Six.")},
	)
	r.turn(t, "And two times three?")
	src := r.env.messages(r.sid)
	if len(src) != 8 {
		t.Fatalf("the chat has %d messages, want 8", len(src))
	}
	res := r.admin.post(r.path(r.modelStep(t, 2), "/fork"), nil) // the step after the tool call
	wantStatus(t, res, http.StatusSeeOther)
	id, ok := strings.CutPrefix(res.Header.Get("Location"), "/s/")
	if !ok || id == r.sid {
		t.Fatalf("fork redirected to %q", res.Header.Get("Location"))
	}
	wantStatus(t, r.admin.get("/s/"+id), http.StatusOK)
	got := r.env.messages(id)
	want := src[:5] // turn 1 (4 messages) and the second question
	if len(got) != len(want) {
		t.Fatalf("the fork has %d messages, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Seq != w.Seq || g.Role != w.Role || g.Content != w.Content || string(g.ToolCalls) != string(w.ToolCalls) || g.ToolCallID != w.ToolCallID {
			t.Errorf("message %d: got %+v, want %+v", i, g, w)
		}
	}
	if got[4].Content != "And two times three?" {
		t.Errorf("the fork ends with %q", got[4].Content)
	}
	if after := r.env.messages(r.sid); len(after) != len(src) {
		t.Errorf("the source chat changed: %d messages", len(after))
	}
	sess, err := r.env.db.SessionForOwner(context.Background(), id, r.owner)
	if err != nil || !strings.HasPrefix(sess.Title, "Fork of") {
		t.Errorf("fork session %+v, %v", sess, err)
	}
}

// Model text is shown escaped on the side-by-side page, diff included.
func TestReplayPageEscapes(t *testing.T) {
	r := newReplayEnv(t)
	hostile := `<script>alert(1)</script><img/src=x/onerror=alert(2)>`
	r.env.llm.Enqueue(llmtest.Reply{Text: []string{hostile}})
	_, res := r.replay(t, r.admin, r.modelStep(t, 2), r.choice(t, "Fake", "fake-model"), trace.ResultRecorded)
	if strings.Contains(res.body, "<script>alert") || strings.Contains(res.body, "<img/src") {
		t.Fatalf("hostile text rendered as HTML:\n%s", res.body)
	}
	if !strings.Contains(res.body, `<ins class="diff-ins">&lt;script&gt;alert(1)&lt;/script&gt;&lt;img/src=x/onerror=alert(2)&gt;</ins>`) {
		t.Errorf("the diff does not show the inserted text escaped:\n%s", res.body)
	}
	if !strings.Contains(res.body, `<del class="diff-del">The answer is 42.</del>`) {
		t.Errorf("the diff does not show the recorded reply removed:\n%s", res.body)
	}
}

// An Anthropic step is replayed byte for byte to Anthropic, and an OpenAI-format step
// to an Anthropic model is rebuilt in the Messages format (the page says so), with
// the recorded conversation.
func TestReplayAcrossFormats(t *testing.T) {
	r := newReplayEnv(t) // turn 1 on the OpenAI-compatible "Fake"
	res := r.admin.post("/settings/providers", url.Values{"name": {"Claude"}, "kind": {"anthropic"}, "base_url": {r.env.llm.URL()},
		"models": {"claude-model"}, "api_key": {"sk-ant-replay-test-key-0123456789"}})
	wantStatus(t, res, http.StatusSeeOther)
	claude := r.choice(t, "Claude", "claude-model")

	r.env.llm.Enqueue(llmtest.Reply{Text: []string{"converted"}})
	_, page := r.replay(t, r.admin, r.modelStep(t, 1), claude, trace.ResultRecorded)
	got := r.env.llm.LastRequest()
	if got.Path != "/v1/messages" || got.Chat.Model != "claude-model" || got.Chat.LastUser() != "What is six times seven?" {
		t.Errorf("converted request: %s model %q last user %q", got.Path, got.Chat.Model, got.Chat.LastUser())
	}
	if !strings.Contains(page.body, "rebuilt from the recorded messages") {
		t.Errorf("the page does not say the request was rebuilt:\n%s", page.body)
	}

	wantStatus(t, r.admin.post("/s/"+r.sid+"/model", url.Values{"model": {claude}}), http.StatusNoContent)
	r.env.llm.Enqueue(llmtest.Reply{Text: llmtest.Words("Hello from Claude.")})
	r.turn(t, "Say hello")
	original := r.env.llm.LastRequest()
	if original.Path != "/v1/messages" {
		t.Fatalf("the turn went to %s", original.Path)
	}
	r.env.llm.Enqueue(llmtest.Reply{Text: []string{"again"}})
	_, page = r.replay(t, r.admin, r.modelStep(t, 1), claude, trace.ResultRecorded)
	replayed := r.env.llm.LastRequest()
	if !bytes.Equal(replayed.Body, original.Body) {
		t.Errorf("Anthropic replay body differs:\n got %s\nwant %s", replayed.Body, original.Body)
	}
	if replayed.Header.Get("Authorization") != "Bearer sk-ant-replay-test-key-0123456789" {
		t.Errorf("the replay did not carry the provider's key: %v (turn: %v)", replayed.Header, original.Header)
	}
	if !strings.Contains(page.body, "byte for byte") {
		t.Errorf("the page does not say byte for byte:\n%s", page.body)
	}
}

// A body that held a secret is stored with [REDACTED] in its place: the page says so
// and the replay sends the stored body, never the secret.
func TestReplayRedactedBody(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	const key = "sk-live-provider-secret-0123456789"
	admin.addProvider("Fake", env.llm.URL(), "fake-model", key)
	r := &replayEnv{env: env, admin: admin, sid: admin.newSession()}
	env.llm.Enqueue(llmtest.Reply{Text: []string{"noted"}})
	r.turn(t, "my key is "+key+" keep it")
	original := env.llm.LastRequest().Body
	seq := r.modelStep(t, 1)
	page := admin.get(r.path(seq, "/replay"))
	if !strings.Contains(page.body, `data-testid="replay-redacted"`) {
		t.Errorf("the page does not say the body was redacted:\n%s", page.body)
	}
	env.llm.Enqueue(llmtest.Reply{Text: []string{"again"}})
	r.replay(t, admin, seq, r.choice(t, "Fake", "fake-model"), trace.ResultRecorded)
	sent := env.llm.LastRequest().Body
	if bytes.Contains(sent, []byte(key)) {
		t.Fatal("the replay sent the secret, which the trace must not hold")
	}
	if want := bytes.ReplaceAll(original, []byte(key), []byte(trace.Redacted)); !bytes.Equal(sent, want) {
		t.Errorf("replayed body:\n got %s\nwant %s", sent, want)
	}
}

// A replay is the chat's newest run but not one of its turns: the context meter keeps
// showing the last turn's context.
func TestReplayLeavesContextMeter(t *testing.T) {
	r := newReplayEnv(t)
	ctx := context.Background()
	before, err := r.env.app.Recorder.LatestSpanData(ctx, r.owner, r.sid, trace.KindContext)
	if err != nil || before == nil {
		t.Fatalf("no context span before the replay: %v", err)
	}
	r.env.llm.Enqueue(llmtest.Reply{Text: []string{"again"}})
	r.replay(t, r.admin, r.modelStep(t, 1), r.choice(t, "Fake", "fake-model"), trace.ResultRecorded)
	after, err := r.env.app.Recorder.LatestSpanData(ctx, r.owner, r.sid, trace.KindContext)
	if err != nil || !bytes.Equal(after, before) {
		t.Errorf("after the replay the context meter reads %s, %v; want the turn's %s", after, err, before)
	}
}

// A model that fails during the replay ends the replay run with its error, shown on
// the page; hostile form values are refused before anything is sent.
func TestReplayFailuresShown(t *testing.T) {
	r := newReplayEnv(t)
	seq := r.modelStep(t, 1)
	same := r.choice(t, "Fake", "fake-model")
	for _, form := range []url.Values{
		{"target": {"garbage"}, "tools": {trace.ResultRecorded}},
		{"target": {"0:fake-model"}, "tools": {trace.ResultRecorded}},
		{"target": {"999:fake-model"}, "tools": {trace.ResultRecorded}},
		{"target": {same}, "tools": {"both"}},
		{"target": {same}},
	} {
		if res := r.admin.post(r.path(seq, "/replay"), form); res.StatusCode != http.StatusBadRequest {
			t.Errorf("form %v: status %d, want 400", form, res.StatusCode)
		}
	}
	if n := len(r.env.llm.Requests()); n != r.sentAt {
		t.Fatalf("refused forms reached the model %d times", n-r.sentAt)
	}
	r.env.llm.Enqueue(llmtest.Reply{Status: http.StatusInternalServerError})
	id, page := r.replay(t, r.admin, seq, same, trace.ResultRecorded)
	ri, err := r.env.db.RunForOwner(context.Background(), r.owner, id)
	if err != nil || ri.Status != trace.StatusError || ri.Error == "" {
		t.Fatalf("failed replay run %+v, %v", ri, err)
	}
	if !strings.Contains(page.body, `data-testid="replay-status">error<`) || !strings.Contains(page.body, `data-testid="replay-error"`) {
		t.Errorf("the page does not show the failure:\n%s", page.body)
	}
}

// A live replay runs only the tools its recorded request offered: a temporary chat's
// request offers no memory tools, so a replayed reply that calls memory_save is
// refused, and nothing is remembered (the temporary chat's promise holds in replays).
func TestReplayLiveRunsOnlyOfferedTools(t *testing.T) {
	env := newTestEnv(t)
	admin := env.setup()
	admin.addProvider("Fake", env.llm.URL(), "fake-model", "")
	res := admin.post("/sessions", url.Values{"temporary": {"1"}})
	wantStatus(t, res, http.StatusSeeOther)
	sid, _ := strings.CutPrefix(res.Header.Get("Location"), "/s/")
	r := &replayEnv{env: env, admin: admin, sid: sid}
	env.llm.Enqueue(llmtest.Reply{Text: []string{"hello"}})
	r.turn(t, "Hi there")
	for _, tool := range env.llm.LastRequest().Chat.Tools {
		if strings.HasPrefix(tool.Name, "memory_") {
			t.Fatalf("the temporary chat's request offered %s", tool.Name)
		}
	}
	env.llm.Enqueue(
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "r1", Name: "memory_save", Arguments: `{"text":"the user likes replays","kind":"fact"}`}}},
		llmtest.Reply{Text: []string{"done"}},
	)
	r.replay(t, admin, r.modelStep(t, 1), r.choice(t, "Fake", "fake-model"), trace.ResultLive)
	var result string
	for _, m := range env.llm.LastRequest().Chat.Messages {
		if m.Role == "tool" && m.ToolCallID == "r1" {
			result = m.Content
		}
	}
	if !strings.Contains(result, "not offered") {
		t.Errorf("tool result %q, want a refusal", result)
	}
	if ms := env.memories("admin"); len(ms) != 0 {
		t.Errorf("the replay remembered %+v", ms)
	}
}
