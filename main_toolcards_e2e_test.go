package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"atrium/internal/browsertest"
	"atrium/internal/llm/llmtest"
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

	const readCards = `JSON.stringify([...document.querySelectorAll('[data-testid=tool-card]')].map(c => ({
		id: c.id, status: c.dataset.status,
		args: c.querySelector('[data-testid=tool-args]')?.textContent ?? '',
		result: c.querySelector('[data-testid=tool-result]')?.textContent ?? ''})))`
	check := func(where string, want int) {
		t.Helper()
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
