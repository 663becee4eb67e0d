package main

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"atrium/internal/browsertest"
	"atrium/internal/llm/llmtest"
	"atrium/internal/store"
	"atrium/internal/testkit"
)

// toolThenAnswer calls the calculator for 40+2, then answers with answer once the
// result is in.
func toolThenAnswer(answer string) func(llmtest.ChatRequest) llmtest.Reply {
	return func(req llmtest.ChatRequest) llmtest.Reply {
		if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" {
			return llmtest.Reply{Text: llmtest.Words(answer)}
		}
		return llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "call_calc", Name: "calculator", Arguments: `{"expression":"40 + 2"}`}}}
	}
}

// TestEndToEndReplayAndFork: a tool-call turn, then its first model step replayed in
// Chromium against a second fake model with the recorded tool results; the page shows
// recorded and replayed side by side with a word diff; fork opens a new chat holding the
// history up to that step.
func TestEndToEndReplayAndFork(t *testing.T) {
	ctx, problems := browsertest.New(t, 1200, 900)
	fake := llmtest.NewServer(t)
	fake.SetModels("fake-model")
	fake.SetHandler(toolThenAnswer("The sum is 42."))
	second := llmtest.NewServer(t)
	second.SetModels("second-model")
	second.SetHandler(toolThenAnswer("Second says the sum is 42 exactly."))
	a := startApp(t, nil)
	run := stepRunner(t, ctx)
	setUpInBrowser(run, a, fake)
	add := `form[data-testid=provider-add-form] `
	run("add the second provider",
		chromedp.Navigate(a.URL+"/settings/providers"),
		chromedp.WaitVisible(chromedp.CSS(add+`[name=name]`)),
		chromedp.SendKeys(chromedp.CSS(add+`[name=name]`), "Second"),
		chromedp.SetValue(chromedp.CSS(add+`[name=base_url]`), second.URL()),
		chromedp.Click(chromedp.CSS(add+`[data-testid=provider-add]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=provider][data-provider-name=Second]`)),
	)

	var chatURL string
	run("tool turn",
		chromedp.Navigate(a.URL+"/"),
		chromedp.Click(chromedp.CSS(`[data-testid=new-chat-main]`)),
		sendSteps("add 40 and 2"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=tool-card][data-tool=calculator][data-status=ok]`)),
		chromedp.WaitVisible(chromedp.CSS(`article[data-role=assistant][data-status=complete]:last-of-type .md p`)),
		into(&chatURL, chromedp.Location()),
	)
	sessionID := chatURL[strings.LastIndex(chatURL, "/s/")+3:]

	// The run and its first model step, read from the database (the run page that
	// links here is another page's).
	db, err := store.Open(context.Background(), filepath.Join(a.DataDir, "atrium.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var runID string
	var seq int
	testkit.Eventually(t, 5*time.Second, "the run recorded", func() bool {
		u, err := db.UserByUsername(context.Background(), "alice")
		if err != nil {
			return false
		}
		runs, err := db.ListRuns(context.Background(), u.ID, sessionID, 1)
		if err != nil || len(runs) == 0 || runs[0].Status != "complete" {
			return false
		}
		runID = runs[0].ID
		spans, err := db.RunSpans(context.Background(), runID)
		for _, s := range spans {
			if s.Kind == "model_request" && seq == 0 {
				seq = s.Seq
			}
		}
		return err == nil && seq > 0
	})
	replayURL := a.URL + "/s/" + sessionID + "/runs/" + runID + "/spans/" + strconv.Itoa(seq) + "/replay"

	var sent, recorded, replayed, ins, del string
	run("replay against the second model",
		chromedp.Navigate(replayURL),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=replay-form]`)),
		chromedp.SetValue(chromedp.CSS(`[data-testid=replay-target]`), secondChoice(t, db)),
		chromedp.Click(chromedp.CSS(`[data-testid=replay-recorded]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=replay-run]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=replay-result]`)),
		into(&sent, chromedp.Text(chromedp.CSS(`[data-testid=replay-sent]`))),
		into(&recorded, chromedp.Text(chromedp.CSS(`[data-testid=replay-step]:nth-of-type(2) [data-testid=replay-recorded-step]`))),
		into(&replayed, chromedp.Text(chromedp.CSS(`[data-testid=replay-step]:nth-of-type(2) [data-testid=replay-replayed-step]`))),
		into(&ins, chromedp.Evaluate[string](diffText("ins"))),
		into(&del, chromedp.Evaluate[string](diffText("del"))),
	)
	if !strings.Contains(sent, "only the model changed to second-model") {
		t.Errorf("sent note %q", sent)
	}
	if !strings.Contains(recorded, "The sum is 42.") || !strings.Contains(replayed, "Second says the sum is 42 exactly.") {
		t.Errorf("side by side: recorded %q, replayed %q", recorded, replayed)
	}
	if ins != "Second says the 42 exactly." || del != "The 42." { // "42." and "42" are different words
		t.Errorf("diff: inserted %q, removed %q", ins, del)
	}
	var chats []llmtest.Recorded
	for _, r := range second.Requests() {
		if r.Path == "/v1/chat/completions" {
			chats = append(chats, r)
		}
	}
	if len(chats) != 2 || chats[1].Chat.Messages[len(chats[1].Chat.Messages)-1].Role != "tool" {
		t.Errorf("the second model got %d chat requests, want the step and its follow-up with the recorded result", len(chats))
	}
	run("scroll to the result", chromedp.ScrollIntoView(chromedp.CSS(`[data-testid=replay-result]`)))
	screenshot(t, ctx, "replay")

	var forkURL string
	var messages int
	run("fork", chromedp.Click(chromedp.CSS(`[data-testid=fork-run]`)))
	testkit.Eventually(t, 10*time.Second, "the fork opened", func() bool {
		run("where", into(&forkURL, chromedp.Location()))
		return !strings.Contains(forkURL, "/replay")
	})
	run("the fork's messages",
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=composer]`)),
		chromedp.WaitVisible(chromedp.CSS(`#messages article[data-role=user]`)),
		into(&messages, chromedp.Evaluate[int](`document.querySelectorAll('#messages article[data-role]').length`)),
	)
	if !strings.Contains(forkURL, "/s/") || strings.HasSuffix(forkURL, sessionID) {
		t.Fatalf("fork landed on %q", forkURL)
	}
	msgs, _, err := db.LatestMessages(context.Background(), forkURL[strings.LastIndex(forkURL, "/s/")+3:], 10)
	if err != nil || len(msgs) != 1 || msgs[0].Content != "add 40 and 2" || messages != 1 {
		t.Errorf("the fork holds %d messages (%d shown), err %v; want the one user message", len(msgs), messages, err)
	}
	problems.Check(t)
}

// diffText joins the texts of the diff's inserted (ins) or removed (del) words in
// the second step, one space between pieces.
func diffText(tag string) string {
	return `Array.from(document.querySelectorAll('[data-testid=replay-step]:nth-of-type(2) [data-testid=replay-diff] ` + tag +
		`')).map(e => e.textContent.trim()).join(' ')`
}

// secondChoice is the form value of the second provider's model.
func secondChoice(t *testing.T, db *store.DB) string {
	ps, err := db.ListProviders(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.Name == "Second" {
			return strconv.FormatInt(p.ID, 10) + ":second-model"
		}
	}
	t.Fatal("no provider Second")
	return ""
}
