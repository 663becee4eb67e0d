package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"atrium/internal/browsertest"
	"atrium/internal/llm/llmtest"
	"atrium/internal/store"
)

// TestEndToEndToolCardsReusedCallIDs is issue 10 item 3 in Chromium: a model server
// that reuses its call ids ("call_1" every turn, "0", "" twice in one step, "call_1"
// twice in one step). After each turn, and after a reload, every card on the page has
// its own element id and shows the result of its own call.
func TestEndToEndToolCardsReusedCallIDs(t *testing.T) {
	ctx, problems := browsertest.New(t, 1200, 900)
	ids := [][]string{{"call_1"}, {"call_1"}, {"0"}, {"", ""}, {"call_1", "call_1"}, {"call_1"}}
	fake := llmtest.NewServer(t)
	fake.SetModels("fake-model")
	fake.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		n, _ := strconv.Atoi(strings.TrimPrefix(req.LastUser(), "turn "))
		if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" || n >= len(ids) {
			return llmtest.Reply{Text: []string{fmt.Sprintf("Done %d.", n)}}
		}
		var calls []llmtest.ToolCall
		for k, id := range ids[n] {
			calls = append(calls, llmtest.ToolCall{ID: id, Name: "calculator", Arguments: fmt.Sprintf(`{"expression":"%d + %d"}`, n*100, k)})
		}
		return llmtest.Reply{ToolCalls: calls}
	})
	a := startApp(t, nil)
	run := stepRunner(t, ctx)
	setUpInBrowser(run, a, fake)

	check := func(where string, want int) { t.Helper(); checkCardsInBrowser(t, run, where, want) }

	run("new chat", chromedp.Navigate(a.URL+"/"), chromedp.Click(chromedp.CSS(`[data-testid=new-chat-main]`)))
	total := 0
	for n := range ids {
		total += len(ids[n])
		run(fmt.Sprint("turn ", n),
			sendSteps(fmt.Sprint("turn ", n)),
			chromedp.Poll[chromedp.Void](fmt.Sprintf(`[...document.querySelectorAll('#messages article[data-role=assistant][data-status=complete]')]
				.some(a => a.textContent.includes('Done %d.'))`, n), chromedp.WithPollingTimeout(15*time.Second)),
		)
		check(fmt.Sprint("live after turn ", n), total)
	}
	run("reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`[data-testid=tool-card]`)))
	check("after reload", total)
	problems.Check(t)
}

// checkCardsInBrowser asserts that the page shows want tool cards of calculator calls
// "a + b", each with its own element id, done, and showing its own call's result.
func checkCardsInBrowser(t *testing.T, run func(string, ...chromedp.Action[chromedp.Void]), where string, want int) {
	t.Helper()
	const readCards = `JSON.stringify([...document.querySelectorAll('[data-testid=tool-card]')].map(c => ({
		id: c.id, status: c.dataset.status,
		args: c.querySelector('[data-testid=tool-args]')?.textContent ?? '',
		result: c.querySelector('[data-testid=tool-result]')?.textContent ?? ''})))`
	var raw string
	run(where+": read cards", into(&raw, chromedp.Evaluate[string](readCards)))
	var cards []struct{ ID, Status, Args, Result string }
	if err := json.Unmarshal([]byte(raw), &cards); err != nil {
		t.Fatal(err)
	}
	if len(cards) != want {
		t.Errorf("%s: %d cards, want %d", where, len(cards), want)
	}
	seen := map[string]bool{}
	for _, c := range cards {
		var args struct{ Expression string }
		var res struct{ Result float64 }
		_ = json.Unmarshal([]byte(c.Args), &args)
		_ = json.Unmarshal([]byte(c.Result), &res)
		var x, y int
		fmt.Sscanf(args.Expression, "%d + %d", &x, &y)
		if seen[c.ID] || c.Status != "ok" || int(res.Result) != x+y || args.Expression == "" {
			t.Errorf("%s: card #%s (%s, args %q) shows %q: shared id, or not its own result", where, c.ID, c.Status, args.Expression, c.Result)
		}
		seen[c.ID] = true
	}
}

// TestEndToEndLoadOlderToolTurns is issue 10 item 4 in Chromium: in a chat of 40 tool
// turns (7 messages each, so a page of 50 messages would end inside a turn), clicking
// "Load older" until the start shows every card done with its own result; none is
// left "Waiting for the result…".
func TestEndToEndLoadOlderToolTurns(t *testing.T) {
	ctx, problems := browsertest.New(t, 1200, 900)
	fake := llmtest.NewServer(t)
	fake.SetModels("fake-model")
	a := startApp(t, nil)
	run := stepRunner(t, ctx)
	setUpInBrowser(run, a, fake)
	var loc string
	run("new chat", chromedp.Navigate(a.URL+"/"), chromedp.Click(chromedp.CSS(`[data-testid=new-chat-main]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=composer]`)), into(&loc, chromedp.Location()))
	id := loc[strings.LastIndex(loc, "/s/")+3:]

	db, err := store.Open(context.Background(), filepath.Join(a.DataDir, "atrium.db"))
	if err != nil {
		t.Fatal(err)
	}
	const turns = 40
	for n := range turns {
		add := func(m *store.Message) {
			m.SessionID = id
			if err := db.AppendMessage(context.Background(), m); err != nil {
				t.Fatal(err)
			}
		}
		add(&store.Message{Role: store.RoleUser, Content: fmt.Sprintf("turn %d", n)})
		for _, k := range [][]int{{0, 1}, {2}} { // two steps: two calls (both "call_1"), then one
			var calls []string
			for _, x := range k {
				calls = append(calls, fmt.Sprintf(`{"id":"call_1","name":"calculator","arguments":"{\"expression\":\"%d + %d\"}"}`, n*100, x))
			}
			step := &store.Message{Role: store.RoleAssistant, ToolCalls: []byte("[" + strings.Join(calls, ",") + "]")}
			add(step)
			for i, x := range k {
				add(&store.Message{Role: store.RoleTool, ToolCallID: "call_1", CallKey: store.ToolCallKey(step.ID, i),
					Content: fmt.Sprintf(`{"expression":"%d + %d","result":%d}`, n*100, x, n*100+x)})
			}
		}
		add(&store.Message{Role: store.RoleAssistant, Content: fmt.Sprintf("Done %d.", n)})
	}
	db.Close()

	run("open the chat", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`[data-testid=load-older]`)))
	for pages := 1; ; pages++ {
		var more bool
		run("more?", into(&more, chromedp.Evaluate[bool](`!!document.querySelector('[data-testid=load-older]')`)))
		if !more {
			break
		}
		if pages > turns {
			t.Fatal("Load older never reaches the start")
		}
		var before int
		run("count messages", into(&before, chromedp.Evaluate[int](`document.querySelectorAll('#messages article').length`)))
		// Click until the older page arrives: a button htmx has just swapped in is not
		// wired up at once, and a click on it then does nothing.
		run("load older", chromedp.Poll[chromedp.Void](fmt.Sprintf(`(() => {
			if (document.querySelectorAll('#messages article').length > %d) return true;
			const b = document.querySelector('[data-testid=load-older]');
			if (b && !b.classList.contains('htmx-request')) b.click();
			return false;
		})()`, before), chromedp.WithPollingInterval(100*time.Millisecond)))
	}
	var waiting bool
	run("waiting cards", into(&waiting, chromedp.Evaluate[bool](`document.querySelector('#messages').textContent.includes('Waiting for the result')`)))
	if waiting {
		t.Error("a card is still waiting for its result after Load older")
	}
	checkCardsInBrowser(t, run, "all pages", 3*turns)
	problems.Check(t)
}
