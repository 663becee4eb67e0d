package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"atrium/internal/llm/llmtest"
	"atrium/internal/store"
)

// reusedIDs are the provider's call ids per turn, as local OpenAI-compatible servers
// send them: "call_1" every turn, "0", "" for two calls, "call_1" twice in one step.
var reusedIDs = [][]string{{"call_1"}, {"call_1"}, {"0"}, {"", ""}, {"call_1", "call_1"}, {"call_1"}}

// reusedIDModel makes the fake model answer "turn N" with the calculator calls of
// reusedIDs[N], call k computing N*100+k, and a tool result with a short final text.
func reusedIDModel(fake *llmtest.Server) {
	fake.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" {
			return llmtest.Reply{Text: []string{"Done."}}
		}
		n, err := strconv.Atoi(strings.TrimPrefix(req.LastUser(), "turn "))
		if err != nil || n >= len(reusedIDs) {
			return llmtest.Reply{Text: []string{"?"}}
		}
		var calls []llmtest.ToolCall
		for k, id := range reusedIDs[n] {
			calls = append(calls, llmtest.ToolCall{ID: id, Name: "calculator", Arguments: fmt.Sprintf(`{"expression":"%d + %d"}`, n*100, k)})
		}
		return llmtest.Reply{ToolCalls: calls}
	})
}

// card is a tool card as rendered: its element id, arguments and result.
type card struct{ id, expr, result string }

var (
	cardRE   = regexp.MustCompile(`(?s)<details class="tool-card[^"]*" id="([^"]*)".*?</details>`)
	exprRE   = regexp.MustCompile(`&#34;expression&#34;: &#34;(\d+) \+ (\d+)&#34;`)
	resultRE = regexp.MustCompile(`&#34;result&#34;: (\d+)`)
)

// cards are the tool cards in an HTML text, in order.
func cards(s string) []card {
	var out []card
	for _, m := range cardRE.FindAllStringSubmatch(s, -1) {
		c := card{id: m[1]}
		if e := exprRE.FindStringSubmatch(m[0]); e != nil {
			a, _ := strconv.Atoi(e[1])
			b, _ := strconv.Atoi(e[2])
			c.expr = strconv.Itoa(a + b)
		}
		if r := resultRE.FindStringSubmatch(m[0]); r != nil {
			c.result = r[1]
		}
		out = append(out, c)
	}
	return out
}

// checkCards asserts that there is one card per call of reusedIDs, each with its own
// element id and the result of its own arguments.
func checkCards(t *testing.T, where string, got []card) {
	t.Helper()
	want := 0
	for _, ids := range reusedIDs {
		want += len(ids)
	}
	if len(got) != want {
		t.Errorf("%s: %d tool cards, want %d: %+v", where, len(got), want, got)
	}
	ids := map[string]bool{}
	for _, c := range got {
		if ids[c.id] {
			t.Errorf("%s: two cards share id=%q", where, c.id)
		}
		ids[c.id] = true
		if c.expr == "" || c.result != c.expr {
			t.Errorf("%s: card %s shows result %q for a call whose result is %q", where, c.id, c.result, c.expr)
		}
	}
}

// TestToolCardsWithReusedCallIDs is issue 10 item 3: a provider that reuses its call
// ids ("call_1" every turn, "0", "", twice in one step). Live, every step's card and
// the frame that fills it in share an element id no other card has, and the frame
// carries that call's result; after a reload every card shows its own result; every
// request the model got has distinct call ids, each result right after its call.
func TestToolCardsWithReusedCallIDs(t *testing.T) {
	env, admin, id := chatEnv(t)
	reusedIDModel(env.llm)
	ws := admin.dial(id)

	var live []card // the cards as the tool-result frames morph them
	stepIDs := map[string]bool{}
	for n := range reusedIDs {
		ws.send(fmt.Sprintf("turn %d", n))
		for _, f := range ws.until(`data-state="idle"`) {
			for _, c := range cards(f) {
				if strings.Contains(f, `hx-swap-oob="morph"`) && strings.Contains(f, `id="`+c.id+`" data-testid="tool-card"`) &&
					!strings.Contains(f, `outerHTML:#msg-live`) {
					live = append(live, c)
				} else {
					stepIDs[c.id] = true // the running card the step put on the page
				}
			}
		}
	}
	checkCards(t, "live frames", live)
	for _, c := range live {
		if !stepIDs[c.id] {
			t.Errorf("the result frame morphs #%s, which no step put on the page (steps: %v)", c.id, stepIDs)
		}
	}

	page := admin.get("/s/" + id)
	checkCards(t, "after reload", cards(page.body))
	if strings.Contains(page.body, "Waiting for the result") {
		t.Error("after reload a card is still waiting for its result")
	}

	for i, r := range env.llm.Requests() {
		if r.Chat.Protocol == "" {
			continue
		}
		checkWirePairing(t, fmt.Sprintf("request %d", i), r.Chat)
	}
}

// checkWirePairing asserts that a request's call ids are distinct and not empty, and
// that each tool result follows its call and carries that call's result.
func checkWirePairing(t *testing.T, where string, req llmtest.ChatRequest) {
	t.Helper()
	seen := map[string]bool{}
	var open []llmtest.ToolCall
	for _, m := range req.Messages {
		if m.Role == "tool" {
			if len(open) == 0 || open[0].ID != m.ToolCallID {
				t.Errorf("%s: result for %q does not follow its call (open %+v)", where, m.ToolCallID, open)
				return
			}
			var args struct{ Expression string }
			var res struct{ Result float64 }
			_ = json.Unmarshal([]byte(open[0].Arguments), &args)
			_ = json.Unmarshal([]byte(m.Content), &res)
			var a, b int
			fmt.Sscanf(args.Expression, "%d + %d", &a, &b)
			if int(res.Result) != a+b {
				t.Errorf("%s: result %s answers call %q (%s)", where, m.Content, m.ToolCallID, args.Expression)
			}
			open = open[1:]
			continue
		}
		if len(open) > 0 {
			t.Errorf("%s: calls %+v have no result", where, open)
		}
		open = m.ToolCalls
		for _, c := range m.ToolCalls {
			if c.ID == "" || seen[c.ID] {
				t.Errorf("%s: call id %q is empty or used twice", where, c.ID)
			}
			seen[c.ID] = true
		}
	}
}

// TestOlderPagesKeepToolCallsWithResults is issue 10 item 4: in a chat of tool turns
// whose page boundary would fall inside a turn, the first page and every "Load older"
// page show each card with its result, never "Waiting for the result…", and together
// show every card once.
func TestOlderPagesKeepToolCallsWithResults(t *testing.T) {
	env, admin, id := chatEnv(t)
	ctx := context.Background()
	const turns = 40 // 7 messages a turn: 280, and a page of 50 ends inside a turn
	for n := range turns {
		mustAppend := func(m *store.Message) {
			m.SessionID = id
			if err := env.db.AppendMessage(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		mustAppend(&store.Message{Role: store.RoleUser, Content: fmt.Sprintf("turn %d", n)})
		step := &store.Message{Role: store.RoleAssistant, ToolCalls: []byte(fmt.Sprintf(
			`[{"id":"call_1","name":"calculator","arguments":"{\"expression\":\"%d + 0\"}"},{"id":"call_1","name":"calculator","arguments":"{\"expression\":\"%d + 1\"}"}]`, n*100, n*100))}
		mustAppend(step)
		for k := range 2 {
			mustAppend(&store.Message{Role: store.RoleTool, ToolCallID: "call_1", CallKey: store.ToolCallKey(step.ID, k),
				Content: fmt.Sprintf(`{"expression":"%d + %d","result":%d}`, n*100, k, n*100+k)})
		}
		step2 := &store.Message{Role: store.RoleAssistant, ToolCalls: []byte(fmt.Sprintf(
			`[{"id":"call_1","name":"calculator","arguments":"{\"expression\":\"%d + 2\"}"}]`, n*100))}
		mustAppend(step2)
		mustAppend(&store.Message{Role: store.RoleTool, ToolCallID: "call_1", CallKey: store.ToolCallKey(step2.ID, 0),
			Content: fmt.Sprintf(`{"expression":"%d + 2","result":%d}`, n*100, n*100+2)})
		mustAppend(&store.Message{Role: store.RoleAssistant, Content: "Done."})
	}
	olderRE := regexp.MustCompile(`hx-get="([^"]*messages\?before=\d+)"`)
	var all []card
	body := admin.get("/s/" + id).body
	for pages := 1; ; pages++ {
		if strings.Contains(body, "Waiting for the result") {
			t.Errorf("page %d has a card waiting for its result", pages)
		}
		got := cards(body)
		all = append(got, all...)
		m := olderRE.FindStringSubmatch(body)
		if m == nil {
			break
		}
		if pages > turns {
			t.Fatal("too many pages")
		}
		r := admin.get(html.UnescapeString(m[1]))
		wantStatus(t, r, 200)
		body = r.body
	}
	if len(all) != 3*turns {
		t.Errorf("%d cards over all pages, want %d", len(all), 3*turns)
	}
	seen := map[string]bool{}
	for _, c := range all {
		if seen[c.id] || c.expr == "" || c.result != c.expr {
			t.Errorf("card %+v: shown twice, or not with its own result", c)
		}
		seen[c.id] = true
	}
}
