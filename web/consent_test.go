package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"atrium/internal/mcp"
	"atrium/internal/testkit"
)

// askForm puts a form question from server "files" to the chat id and returns a
// channel with the answer.
func askForm(t *testing.T, env *testEnv, id string, owner int64, schema any, message string) <-chan mcp.Answer {
	t.Helper()
	form, err := mcp.ParseForm(schema)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan mcp.Answer, 1)
	go func() {
		ans, _ := env.srv.Asker().Ask(context.Background(), mcp.Question{Kind: mcp.AskForm, Server: "files",
			SessionID: id, OwnerID: owner, Message: message, Form: form})
		out <- ans
	}()
	return out
}

var ageSchema = map[string]any{"type": "object", "required": []any{"age"}, "properties": map[string]any{
	"age":  map[string]any{"type": "integer", "title": "<img src=x onerror=alert(1)>Age", "minimum": 0, "maximum": 150},
	"note": map[string]any{"type": "string", "default": "hi"},
}}

func TestConsentDeclinedWhenNobodyWatches(t *testing.T) {
	env, _, id := chatEnv(t)
	env.srv.SetConsentTimes(300*time.Millisecond, time.Minute)
	start := time.Now()
	select {
	case ans := <-askForm(t, env, id, env.userID("admin"), ageSchema, "How old?"):
		if ans.Action != mcp.ActionDecline {
			t.Fatalf("answer %+v, want decline", ans)
		}
		if took := time.Since(start); took < 300*time.Millisecond {
			t.Fatalf("declined after %s, before the grace for a reload", took)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a question nobody watches was never declined")
	}
}

func TestConsentAnsweredInTheChat(t *testing.T) {
	env, admin, id := chatEnv(t)
	env.srv.SetConsentTimes(300*time.Millisecond, time.Minute)
	ws := admin.dial(id)
	answer := askForm(t, env, id, env.userID("admin"), ageSchema, "<b>How old</b> are you?")
	frames := ws.until(`data-testid="consent"`)
	frame := frames[len(frames)-1]
	if strings.Contains(frame, "<img") || strings.Contains(frame, "<b>") || !strings.Contains(frame, "&lt;img src=x") ||
		!strings.Contains(frame, "&lt;b&gt;How old&lt;/b&gt;") || !strings.Contains(frame, `value="hi"`) {
		t.Fatalf("the question frame is not escaped or lacks its default: %s", frame)
	}
	qid := regexp.MustCompile(`id="consent-([0-9a-z]+)"`).FindStringSubmatch(frame)[1]

	// Watched: it stays open well past the unwatched limit.
	select {
	case ans := <-answer:
		t.Fatalf("answered %+v while someone watches and nobody answered", ans)
	case <-time.After(time.Second):
	}

	// Another user's post is a 404, and changes nothing.
	bob := env.user(admin, "bob")
	wantStatus(t, bob.post("/s/"+id+"/consent/"+qid, url.Values{"action": {"accept"}, "age": {"30"}}), http.StatusNotFound)

	// An invalid answer is shown again with the problem and not sent.
	r := admin.post("/s/"+id+"/consent/"+qid, url.Values{"action": {"accept"}, "age": {"200"}})
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(r.body, `data-testid="consent-field-error"`) || !strings.Contains(r.body, "At most 150.") || !strings.Contains(r.body, `value="200"`) {
		t.Fatalf("invalid answer: %s", r.body)
	}
	select {
	case ans := <-answer:
		t.Fatalf("an invalid answer was sent: %+v", ans)
	default:
	}

	r = admin.post("/s/"+id+"/consent/"+qid, url.Values{"action": {"accept"}, "age": {"30"}, "note": {""}})
	wantStatus(t, r, http.StatusOK)
	select {
	case ans := <-answer:
		if ans.Action != mcp.ActionAccept || ans.Content["age"] != int64(30) || len(ans.Content) != 1 {
			t.Fatalf("answer %+v", ans)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the answer did not reach the asker")
	}
	ws.until(`data-outcome="accepted"`)

	// Answering again is answered with "closed", not an error.
	r = admin.post("/s/"+id+"/consent/"+qid, url.Values{"action": {"decline"}})
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(r.body, `data-outcome="closed"`) {
		t.Fatalf("second answer: %s", r.body)
	}
}

// A question open when the chat's last tab closes is declined after the grace; one
// open when a tab (re)connects is in its first frame.
func TestConsentFollowsWatchers(t *testing.T) {
	env, admin, id := chatEnv(t)
	env.srv.SetConsentTimes(time.Second, time.Minute)
	ws := admin.dial(id)
	answer := askForm(t, env, id, env.userID("admin"), ageSchema, "How old?")
	ws.until(`data-testid="consent"`)
	conn2, _, err := admin.dialOrigin(id, env.ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	ws2 := &wsConn{t: t, conn: conn2}
	if first := ws2.next(); !strings.Contains(first, `data-testid="consent"`) {
		t.Fatalf("a tab opened later does not show the open question: %.500s", first)
	}
	ws.conn.Close()
	conn2.Close()
	select {
	case ans := <-answer:
		if ans.Action != mcp.ActionDecline {
			t.Fatalf("answer %+v, want decline", ans)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a question was not declined after its chat's tabs closed")
	}
}

// The server form keeps roots, the longest run with progress and sampling consent;
// "Always" on a sampling request (admins only) ticks that consent, and the form
// unticks it again.
func TestSamplingConsentSettings(t *testing.T) {
	env, admin := mcpTestEnv(t)
	admin.addProvider("Fake", env.llm.URL(), "fake-model", "")
	remote := closedURL(t)
	form := url.Values{"name": {"remote"}, "transport": {"http"}, "url": {remote}, "timeout": {"15"},
		"progress_max": {"90"}, "roots": {"file:///srv/a\nfile:///srv/b"}}
	wantStatus(t, admin.post("/settings/mcp", form), http.StatusSeeOther)
	row := env.mcpRow("remote")
	cfg, err := env.srv.ServerConfig(context.Background(), row)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ProgressMax != 90*time.Second || len(cfg.Roots) != 2 || cfg.Roots[1] != "file:///srv/b" || cfg.SamplingAlways {
		t.Fatalf("saved %+v", cfg)
	}
	page := admin.get("/settings/mcp").body
	if !strings.Contains(page, "file:///srv/b") || !strings.Contains(page, "up to 90 s") || !strings.Contains(page, "asks in the chat each time") {
		t.Fatalf("the card does not show the settings")
	}
	bad := url.Values{"name": {"bad"}, "transport": {"http"}, "url": {remote}, "roots": {"/srv/a"}}
	if r := admin.post("/settings/mcp", bad); !strings.Contains(r.body, "is not a file:// URI") {
		t.Fatalf("a bad root: %d %s", r.StatusCode, r.body)
	}

	ask := func(owner int64, id string) (string, <-chan mcp.Answer) {
		t.Helper()
		out := make(chan mcp.Answer, 1)
		env.srv.SetConsentTimes(time.Minute, time.Minute)
		go func() {
			ans, _ := env.srv.Asker().Ask(context.Background(), mcp.Question{Kind: mcp.AskSampling, Server: "remote", SessionID: id,
				OwnerID: owner, Sampling: &mcp.SamplingAsk{Messages: nil, MaxTokens: 10}})
			out <- ans
		}()
		var qid string
		testkit.Eventually(t, 10*time.Second, "the question to be open", func() bool {
			qid = env.srv.OpenQuestion(id)
			return qid != ""
		})
		return qid, out
	}

	// A plain user has no "Always", and cannot post it.
	bob := env.user(admin, "bob")
	bobChat := bob.newSession()
	qid, answer := ask(env.userID("bob"), bobChat)
	bob.dial(bobChat)
	if r := bob.post("/s/"+bobChat+"/consent/"+qid, url.Values{"action": {"always"}}); r.StatusCode != http.StatusBadRequest {
		t.Fatalf("a user's Always: %d", r.StatusCode)
	}
	wantStatus(t, bob.post("/s/"+bobChat+"/consent/"+qid, url.Values{"action": {"decline"}}), http.StatusOK)
	if ans := <-answer; ans.Action != mcp.ActionDecline {
		t.Fatalf("answer %+v", ans)
	}

	chat := admin.newSession()
	qid, answer = ask(env.userID("admin"), chat)
	r := admin.post("/s/"+chat+"/consent/"+qid, url.Values{"action": {"always"}})
	wantStatus(t, r, http.StatusOK)
	if ans := <-answer; ans.Action != mcp.ActionAccept || !ans.Always {
		t.Fatalf("answer %+v", ans)
	}
	cfg, _ = env.srv.ServerConfig(context.Background(), env.mcpRow("remote"))
	if !cfg.SamplingAlways || cfg.ProgressMax != 90*time.Second || len(cfg.Roots) != 2 {
		t.Fatalf("after Always: %+v", cfg)
	}
	form.Set("sampling_always", "")
	wantStatus(t, admin.post(fmt.Sprintf("/settings/mcp/%d", row.ID), form), http.StatusSeeOther)
	cfg, _ = env.srv.ServerConfig(context.Background(), env.mcpRow("remote"))
	if cfg.SamplingAlways {
		t.Fatal("unticking the box on the form did not revoke it")
	}
}

// "Always" is saved only by the answer that takes the question: posted while another
// answer is landing, it is told "closed" and the server's setting stays off. A question
// ending (expired) while an answer is landing gets that answer, not its own.
func TestSamplingAlwaysOnlyForAnOpenQuestion(t *testing.T) {
	env, admin := mcpTestEnv(t)
	form := url.Values{"name": {"remote"}, "transport": {"http"}, "url": {closedURL(t)}, "timeout": {"15"}}
	wantStatus(t, admin.post("/settings/mcp", form), http.StatusSeeOther)
	chat := admin.newSession()
	env.srv.SetConsentTimes(time.Minute, 500*time.Millisecond)
	answer := make(chan mcp.Answer, 1)
	go func() {
		ans, _ := env.srv.Asker().Ask(context.Background(), mcp.Question{Kind: mcp.AskSampling, Server: "remote", SessionID: chat,
			OwnerID: env.userID("admin"), Sampling: &mcp.SamplingAsk{MaxTokens: 10}})
		answer <- ans
	}()
	var qid string
	testkit.Eventually(t, 10*time.Second, "the question to be open", func() bool {
		qid = env.srv.OpenQuestion(chat)
		return qid != ""
	})

	send, ok := env.srv.ClaimQuestion(qid, mcp.Answer{Action: mcp.ActionAccept})
	if !ok {
		t.Fatal("the question could not be claimed")
	}
	r := admin.post("/s/"+chat+"/consent/"+qid, url.Values{"action": {"always"}})
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(r.body, `data-outcome="closed"`) {
		t.Fatalf("Always on a question being answered: %s", r.body)
	}
	if cfg, _ := env.srv.ServerConfig(context.Background(), env.mcpRow("remote")); cfg.SamplingAlways {
		t.Fatal("Always on a question being answered turned sampling on for good")
	}

	time.Sleep(time.Second) // past the question's limit, with the first answer still landing
	send()
	select {
	case ans := <-answer:
		if ans.Action != mcp.ActionAccept || ans.Always {
			t.Fatalf("answer %+v, want the first answer's accept", ans)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the question never ended")
	}
}

// A link from a server opens in a new tab without a window.opener, naming its host.
func TestConsentLink(t *testing.T) {
	env, admin, id := chatEnv(t)
	ws := admin.dial(id)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	defer func() { cancel(); <-done }()
	go func() {
		defer close(done)
		env.srv.Asker().Ask(ctx, mcp.Question{Kind: mcp.AskURL, Server: "auth", SessionID: id,
			OwnerID: env.userID("admin"), Message: "Sign in", URL: "https://login.example.com/a?b=<c>"})
	}()
	frames := ws.until(`data-kind="url"`)
	f := frames[len(frames)-1]
	for _, want := range []string{`target="_blank"`, `rel="noopener noreferrer"`, `>Open login.example.com</a>`,
		`href="https://login.example.com/a?b=&lt;c&gt;"`} {
		if !strings.Contains(f, want) {
			t.Errorf("the link frame lacks %s: %s", want, f)
		}
	}
	if strings.Contains(f, "<c>") {
		t.Errorf("unescaped: %s", f)
	}
}
