package contextwin_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"atrium/internal/contextwin"
	"atrium/internal/llm"
	"atrium/internal/store"
)

// wordTok counts words: budgets become easy to hit exactly.
type wordTok struct{}

func (wordTok) Count(s string) int { return len(strings.Fields(s)) }

func words(prefix string, n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = fmt.Sprintf("%s%d", prefix, i+1)
	}
	return strings.Join(w, " ")
}

func user(seq int64, text string) store.Message {
	return store.Message{Seq: seq, Role: store.RoleUser, Content: text, Status: store.StatusComplete}
}

// asst is an assistant message with id seq calling tools with the provider ids callIDs.
func asst(seq int64, text string, callIDs ...string) store.Message {
	m := store.Message{ID: seq, Seq: seq, Role: store.RoleAssistant, Content: text, Status: store.StatusComplete}
	if len(callIDs) > 0 {
		var parts []string
		for _, id := range callIDs {
			parts = append(parts, fmt.Sprintf(`{"id":%q,"name":"calc","arguments":"{\"x\":1}"}`, id))
		}
		m.ToolCalls = []byte("[" + strings.Join(parts, ",") + "]")
	}
	return m
}

func result(seq int64, id, text string) store.Message {
	return store.Message{Seq: seq, Role: store.RoleTool, Content: text, ToolCallID: id, Status: store.StatusComplete}
}

// keyed gives the tool results of msgs the keys of the calls they answer, as the
// agent stores them: a result answers the first call of the nearest earlier step
// with its provider id that no earlier result answered.
func keyed(msgs []store.Message) []store.Message {
	msgs = slices.Clone(msgs)
	var step *store.Message
	var answered []bool
	for i := range msgs {
		m := &msgs[i]
		calls, _ := contextwin.ParseToolCalls(m.ToolCalls)
		if m.Role == store.RoleAssistant && len(calls) > 0 {
			step, answered = m, make([]bool, len(calls))
			continue
		}
		if m.Role != store.RoleTool || step == nil || m.CallKey != "" {
			continue
		}
		calls, _ = contextwin.ParseToolCalls(step.ToolCalls)
		for k, c := range calls {
			if !answered[k] && c.ID == m.ToolCallID {
				answered[k], m.CallKey = true, store.ToolCallKey(step.ID, k)
				break
			}
		}
	}
	return msgs
}

func roles(out []llm.Message) string {
	var r []string
	for _, m := range out {
		s := m.Role
		if m.Role == llm.RoleTool {
			s += ":" + m.ToolCallID
		}
		r = append(r, s)
	}
	return strings.Join(r, " ")
}

func cutReason(rep contextwin.Report, seq int64) string {
	for _, c := range rep.Cut {
		if c.Seq == seq {
			return c.Reason
		}
	}
	return ""
}

func zone(rep contextwin.Report, name string) contextwin.Zone {
	for _, z := range rep.Zones {
		if z.Name == name {
			return z
		}
	}
	return contextwin.Zone{}
}

// checkInvariants asserts what must hold for every assembled context: every
// input seq is accounted for, every tool result follows the call it answers,
// every call has a result, and the newest user message is there.
func checkInvariants(t *testing.T, in contextwin.Input, out []llm.Message, rep contextwin.Report) {
	t.Helper()
	for _, m := range in.Messages {
		if !slices.Contains(rep.Included, m.Seq) && cutReason(rep, m.Seq) == "" {
			t.Errorf("seq %d neither included nor cut", m.Seq)
		}
	}
	var open []string // call ids of the last assistant message still to be answered
	for i, m := range out {
		switch m.Role {
		case llm.RoleTool:
			if len(open) == 0 || open[0] != m.ToolCallID {
				t.Errorf("message %d: tool result %q does not follow its call (open %v): %s", i, m.ToolCallID, open, roles(out))
				continue
			}
			open = open[1:]
		default:
			if len(open) > 0 {
				t.Errorf("message %d (%s): calls %v have no result", i, m.Role, open)
			}
			open = nil
			for _, c := range m.ToolCalls {
				open = append(open, c.ID)
			}
		}
	}
	if len(open) > 0 {
		t.Errorf("calls %v at the end have no result", open)
	}
	for i := len(in.Messages) - 1; i >= 0; i-- {
		if m := in.Messages[i]; m.Role == store.RoleUser {
			if !slices.Contains(rep.Included, m.Seq) {
				t.Errorf("newest user message %d not included", m.Seq)
			}
			break
		}
	}
}

func TestAssembleOrderAndPairing(t *testing.T) {
	stopped := asst(2, "partial answer")
	stopped.Status = store.StatusStopped
	failed := asst(2, "")
	failed.Status = store.StatusError
	failedResult := result(3, "x", "")
	failedResult.Status = store.StatusError
	tests := []struct {
		name        string
		msgs        []store.Message
		want        string // roles of the turns' messages (after system messages)
		included    []int64
		cut         map[int64]string // seq -> part of the reason
		interrupted []string
		unloaded    bool // the load's bound left older messages out
	}{
		{
			name:     "plain turn",
			msgs:     []store.Message{user(1, "hi"), asst(2, "hello")},
			want:     "user assistant",
			included: []int64{1, 2},
		},
		{
			name:     "results follow their call in call order",
			msgs:     []store.Message{user(1, "q"), asst(2, "", "x", "y"), result(3, "y", "Y"), result(4, "x", "X"), asst(5, "done")},
			want:     "user assistant tool:x tool:y assistant",
			included: []int64{1, 2, 3, 4, 5},
		},
		{
			name:     "orphan result is dropped",
			msgs:     []store.Message{user(1, "q"), result(2, "z", "Z"), asst(3, "a")},
			want:     "user assistant",
			included: []int64{1, 3},
			cut:      map[int64]string{2: "orphan tool result"},
		},
		{
			name:        "missing result is interrupted",
			msgs:        []store.Message{user(1, "q"), asst(2, "", "x", "y"), result(3, "x", "X")},
			want:        "user assistant tool:x tool:y",
			included:    []int64{1, 2, 3},
			interrupted: []string{"y"},
		},
		{
			name:        "result after the next user message is an orphan, its call interrupted",
			msgs:        []store.Message{user(1, "q"), asst(2, "", "x"), user(3, "again"), result(4, "x", "X"), asst(5, "a")},
			want:        "user assistant tool:x user assistant",
			included:    []int64{1, 2, 3, 5},
			cut:         map[int64]string{4: "orphan"},
			interrupted: []string{"x"},
		},
		{
			// It was "user user": two user messages in a row.
			name:     "failed message without content is skipped, a placeholder reply takes its place",
			msgs:     []store.Message{user(1, "q"), failed, user(3, "again")},
			want:     "user assistant user",
			included: []int64{1, 3},
			cut:      map[int64]string{2: "failed message with no content"},
		},
		{
			name: "reply interrupted before any text: placeholder",
			msgs: []store.Message{user(1, "q"), {Seq: 2, Role: store.RoleAssistant, Status: store.StatusStopped, Error: store.ReplyInterrupted},
				user(3, "again")},
			want:     "user assistant user",
			included: []int64{1, 3},
			cut:      map[int64]string{2: "empty message"},
		},
		{
			name:     "user message with no reply row at all: placeholder",
			msgs:     []store.Message{user(1, "q"), user(2, "again"), asst(3, "a"), user(4, "third")},
			want:     "user assistant user assistant user",
			included: []int64{1, 2, 3, 4},
		},
		{
			name:        "failed tool result without content leaves its call interrupted",
			msgs:        []store.Message{user(1, "q"), asst(2, "", "x"), failedResult},
			want:        "user assistant tool:x",
			included:    []int64{1, 2},
			cut:         map[int64]string{3: "failed message with no content"},
			interrupted: []string{"x"},
		},
		{
			name:     "stopped reply keeps its partial content",
			msgs:     []store.Message{user(1, "q"), stopped},
			want:     "user assistant",
			included: []int64{1, 2},
		},
		{
			name:     "loaded from mid-turn: leading orphan dropped",
			msgs:     []store.Message{result(7, "old", "R"), asst(8, "so"), user(9, "q"), asst(10, "a")},
			want:     "assistant user assistant",
			included: []int64{8, 9, 10},
			cut:      map[int64]string{7: "orphan", 1: "not loaded"},
			unloaded: true,
		},
		{
			// The branch on screen skips the seqs of other versions: not a gap in the load.
			name:     "seq gaps of other versions are not unloaded history",
			msgs:     []store.Message{user(4, "q"), asst(9, "a"), user(12, "again"), asst(13, "b")},
			want:     "user assistant user assistant",
			included: []int64{4, 9, 12, 13},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := contextwin.Input{System: "be brief", Messages: keyed(tc.msgs), Unloaded: tc.unloaded}
			out, rep := contextwin.Assemble(in, contextwin.DefaultBudgets(), wordTok{})
			checkInvariants(t, in, out, rep)
			if !tc.unloaded && len(rep.Cut) > 0 && slices.ContainsFunc(rep.Cut, func(c contextwin.Cut) bool { return strings.Contains(c.Reason, "not loaded") }) {
				t.Errorf("cut %v: nothing was left unloaded", rep.Cut)
			}
			if out[0].Role != llm.RoleSystem || out[0].Content != "be brief" {
				t.Errorf("first message %+v, want the system prompt", out[0])
			}
			if got := roles(out[1:]); got != tc.want {
				t.Errorf("roles %q, want %q", got, tc.want)
			}
			if !slices.Equal(rep.Included, tc.included) {
				t.Errorf("included %v, want %v", rep.Included, tc.included)
			}
			for seq, part := range tc.cut {
				if r := cutReason(rep, seq); !strings.Contains(r, part) {
					t.Errorf("cut reason for %d = %q, want it to contain %q", seq, r, part)
				}
			}
			if !slices.Equal(rep.Interrupted, tc.interrupted) {
				t.Errorf("interrupted %v, want %v", rep.Interrupted, tc.interrupted)
			}
			for _, m := range out {
				if m.Role == llm.RoleTool && slices.Contains(tc.interrupted, m.ToolCallID) && m.Content != contextwin.InterruptedResult {
					t.Errorf("interrupted result content %q", m.Content)
				}
			}
			for i, m := range out {
				if i > 0 && m.Role == llm.RoleUser && out[i-1].Role == llm.RoleUser {
					t.Errorf("messages %d and %d are both user messages", i-1, i)
				}
				if m.Role == llm.RoleAssistant && m.Content == contextwin.NoReply && strings.Contains(tc.want, "user user") {
					t.Error("placeholder where none is wanted")
				}
			}
			if tc.name == "stopped reply keeps its partial content" && out[len(out)-1].Content != "partial answer" {
				t.Errorf("stopped content %q", out[len(out)-1].Content)
			}
			if tc.name == "results follow their call in call order" {
				if c := out[2].ToolCalls; len(c) != 2 || c[0].Name != "calc" || c[0].Arguments != `{"x":1}` {
					t.Errorf("tool calls %+v", c)
				}
			}
		})
	}
}

func TestAssemblePinnedZone(t *testing.T) {
	in := contextwin.Input{
		System:      "You are Atrium.",
		Preferences: []string{"metric units", "short answers"},
		Goal:        "plan a trip",
		Stage:       "booking",
		Memories:    []string{"lives in Lyon"},
		Messages:    []store.Message{user(1, "hi")},
	}
	out, _ := contextwin.Assemble(in, contextwin.DefaultBudgets(), contextwin.NewTokenizer())
	want := "You are Atrium.\n\nUser preferences:\n- metric units\n- short answers\n\nTask goal: plan a trip\nStage: booking\n\nRelevant memories:\n- lives in Lyon"
	if out[0].Content != want {
		t.Errorf("pinned zone\n%q\nwant\n%q", out[0].Content, want)
	}

	// Dropping order: memories (last first), preferences, stage, goal, then the system prompt is cut.
	in.System = words("s", 10)
	in.Memories = []string{"lives in Lyon", "m1"}
	out, _ = contextwin.Assemble(in, contextwin.DefaultBudgets(), wordTok{})
	full := wordTok{}.Count(out[0].Content) // 33
	steps := []struct {
		budget int
		want   []string // substrings that must be present
		gone   []string
	}{
		{full, []string{"m1", "lives in Lyon", "short answers", "booking"}, nil},
		{full - 1, []string{"lives in Lyon"}, []string{"m1"}},
		{full - 3, []string{"short answers"}, []string{"m1", "Lyon", "Relevant memories"}},
		{full - 16, []string{"plan a trip", "booking"}, []string{"metric units", "short answers", "Lyon", "User preferences"}},
		{full - 18, []string{"plan a trip"}, []string{"booking", "Stage"}},
		{10, []string{"s10"}, []string{"metric", "plan a trip"}},
		{9, []string{"s1 ", "tokens omitted"}, []string{"s10", "metric"}},
	}
	for _, st := range steps {
		t.Run(fmt.Sprint("budget ", st.budget), func(t *testing.T) {
			b := contextwin.DefaultBudgets()
			b.Pinned = st.budget
			out, rep := contextwin.Assemble(in, b, wordTok{})
			p := out[0].Content
			for _, w := range st.want {
				if !strings.Contains(p, w) {
					t.Errorf("pinned zone %q lacks %q", p, w)
				}
			}
			for _, w := range st.gone {
				if strings.Contains(p, w) {
					t.Errorf("pinned zone %q still has %q", p, w)
				}
			}
			z := zone(rep, contextwin.ZonePinned)
			if z.Tokens > st.budget || z.Budget != st.budget || (wordTok{}).Count(p) > st.budget {
				t.Errorf("pinned zone %+v (counted %d) over budget %d", z, (wordTok{}).Count(p), st.budget)
			}
			if st.budget < full && len(rep.Cut) == 0 {
				t.Errorf("nothing reported cut")
			}
			if st.budget == full && len(rep.Cut) != 0 {
				t.Errorf("cut at the exact budget: %v", rep.Cut)
			}
		})
	}
}

func TestAssembleBudgetEdges(t *testing.T) {
	tok := wordTok{}
	t.Run("summary", func(t *testing.T) {
		for _, over := range []int{0, 1} {
			b := contextwin.DefaultBudgets()
			in := contextwin.Input{Summary: words("w", b.Summary+over), SummarySeq: 4, Messages: []store.Message{user(5, "q")}}
			out, rep := contextwin.Assemble(in, b, tok)
			if out[0].Role != llm.RoleSystem || !strings.HasPrefix(out[0].Content, contextwin.SummaryHeader) {
				t.Fatalf("first message %q is not the summary", out[0].Content)
			}
			z := zone(rep, contextwin.ZoneSummary)
			cut := strings.Contains(out[0].Content, "tokens omitted")
			if z.Tokens > b.Summary || cut != (over == 1) || (len(rep.Cut) == 1) != (over == 1) {
				t.Errorf("over by %d: zone %+v, marker %v, cuts %v", over, z, cut, rep.Cut)
			}
		}
	})
	t.Run("recent turns", func(t *testing.T) {
		for _, extra := range []int{0, 1} {
			b := contextwin.DefaultBudgets()
			var msgs []store.Message
			for i := range b.RecentTurns + extra {
				s := int64(2*i + 1)
				msgs = append(msgs, user(s, "q"), asst(s+1, "a"))
			}
			in := contextwin.Input{Messages: msgs}
			out, rep := contextwin.Assemble(in, b, tok)
			checkInvariants(t, in, out, rep)
			if len(rep.Unsummarised) != 2*extra || len(rep.Included) != len(msgs) || len(out) != len(msgs) {
				t.Errorf("%d turns: unsummarised %d, included %d, sent %d", b.RecentTurns+extra, len(rep.Unsummarised), len(rep.Included), len(out))
			}
			if extra == 1 && (rep.Unsummarised[0].Seq != 1 || rep.Unsummarised[1].Seq != 2) {
				t.Errorf("unsummarised %v, want the oldest turn", rep.Unsummarised)
			}
		}
	})
	t.Run("tool result max", func(t *testing.T) {
		b := contextwin.DefaultBudgets()
		for _, over := range []int{0, 1} {
			body := words("t", b.ToolResultMax+over)
			in := contextwin.Input{Messages: keyed([]store.Message{user(1, "q"), asst(2, "", "x"), result(3, "x", body)})}
			out, rep := contextwin.Assemble(in, b, tok)
			got := out[len(out)-1].Content
			if over == 0 {
				if got != body || len(rep.Cut) != 0 {
					t.Errorf("at the limit: cut (%d words), %v", tok.Count(got), rep.Cut)
				}
				continue
			}
			omitted := b.ToolResultMax + 1 - b.ToolResultHead - b.ToolResultTail
			want := words("t", b.ToolResultHead) + "\n" + contextwin.OmittedMarker(omitted) + "\n" +
				strings.Join(strings.Fields(body)[b.ToolResultMax+1-b.ToolResultTail:], " ")
			if got != want {
				t.Errorf("one over: got %d words %q…", tok.Count(got), got[:80])
			}
			if in.Messages[2].Content != body {
				t.Error("stored message modified")
			}
			wantReason := fmt.Sprintf("truncated tool result %d → %d tokens", b.ToolResultMax+1, b.ToolResultHead+b.ToolResultTail+5)
			if r := cutReason(rep, 3); r != wantReason || !slices.Contains(rep.Included, 3) {
				t.Errorf("reason %q, want %q; included %v", r, wantReason, rep.Included)
			}
		}
	})
	t.Run("window", func(t *testing.T) {
		msgs := []store.Message{user(1, words("a", 10)), asst(2, words("b", 10)), user(3, words("c", 10)), asst(4, words("d", 10))}
		in := contextwin.Input{System: "sys", Messages: msgs}
		total := (1 + 3) + 4*(10+3)
		for _, short := range []int{0, 1} {
			b := contextwin.DefaultBudgets()
			b.ReplyReserve = 100
			b.Window = total + b.ReplyReserve - short
			out, rep := contextwin.Assemble(in, b, tok)
			checkInvariants(t, in, out, rep)
			z := zone(rep, contextwin.ZoneTotal)
			if z.Budget != b.Window-b.ReplyReserve || z.Tokens > z.Budget {
				t.Errorf("total zone %+v", z)
			}
			if short == 0 && (len(out) != 5 || z.Tokens != total) {
				t.Errorf("exact fit: sent %d, total %d want %d", len(out), z.Tokens, total)
			}
			if short == 1 {
				if !slices.Equal(rep.Included, []int64{3, 4}) || cutReason(rep, 1) != "dropped: window overflow, not summarised yet" ||
					cutReason(rep, 2) != "dropped: window overflow, not summarised yet" || !slices.Equal(rep.Dropped, []int64{1, 2}) {
					t.Errorf("one over: included %v, cut %v", rep.Included, rep.Cut)
				}
			}
		}
	})
	t.Run("tools count against the window", func(t *testing.T) {
		msgs := []store.Message{user(1, words("a", 10)), user(2, words("b", 10))}
		b := contextwin.DefaultBudgets()
		b.ReplyReserve = 100
		b.Window = b.ReplyReserve + 2*13
		tools := []llm.ToolSpec{{Name: "calc", Description: "adds", Parameters: []byte(`{}`)}}
		in := contextwin.Input{Messages: msgs, Tools: tools}
		_, rep := contextwin.Assemble(in, b, tok)
		if z := zone(rep, contextwin.ZoneTools); z.Tokens != 3+3 || !slices.Equal(rep.Included, []int64{2}) {
			t.Errorf("tools zone %+v, included %v", z, rep.Included)
		}
	})
}

func TestAssembleSummaryFailedCarriesHistory(t *testing.T) {
	// The summary stopped at seq 10 and folding has failed since: 20 turns are
	// unsummarised. All are carried while the window allows; the rest are
	// reported cut, oldest first, and offered for folding.
	var msgs []store.Message
	for i := range 20 {
		s := int64(11 + 3*i)
		msgs = append(msgs, user(s, words("u", 20)), asst(s+1, "", "c"+fmt.Sprint(s)), result(s+2, "c"+fmt.Sprint(s), words("r", 30)))
	}
	in := contextwin.Input{System: "sys", Summary: "earlier: the user likes tea", SummarySeq: 10, Messages: keyed(msgs)}
	turnCost := 20 + 3 + (3 + 3) + 30 + 3 // user, call (name + args words), result
	for _, tc := range []struct {
		name   string
		window int
		kept   int // turns
	}{
		{"window fits all", 100000, 20},
		{"window fits nine turns", 9*turnCost + 1 + 3 + 5 + 3 + 5, 9},
		{"window fits one turn", turnCost + 1 + 3 + 5 + 3 + 5, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := contextwin.DefaultBudgets()
			b.ReplyReserve = 10
			b.Window = tc.window + b.ReplyReserve
			out, rep := contextwin.Assemble(in, b, wordTok{})
			checkInvariants(t, in, out, rep)
			// Turns older than the last 6, and any turn the window dropped, go to the fold.
			if want := 3 * max(14, 20-tc.kept); len(rep.Unsummarised) != want || rep.Unsummarised[0].Seq != 11 {
				t.Errorf("unsummarised %d messages from %d, want %d from 11", len(rep.Unsummarised), rep.Unsummarised[0].Seq, want)
			}
			if want := 3 * (20 - tc.kept); len(rep.Dropped) != want {
				t.Errorf("dropped %d messages, want %d", len(rep.Dropped), want)
			}
			if len(rep.Included) != 3*tc.kept || rep.Included[0] != msgs[3*(20-tc.kept)].Seq {
				t.Errorf("included %v, want the last %d turns", rep.Included, tc.kept)
			}
			for _, m := range msgs[:3*(20-tc.kept)] {
				if r := cutReason(rep, m.Seq); !strings.Contains(r, "window overflow") {
					t.Errorf("seq %d: reason %q", m.Seq, r)
				}
			}
			if zone(rep, contextwin.ZoneTotal).Tokens > tc.window {
				t.Errorf("total %v over %d", rep.Zones, tc.window)
			}
		})
	}
}

func TestAssembleWindowOverflowNewestTurn(t *testing.T) {
	tok := wordTok{}
	b := contextwin.DefaultBudgets()
	b.ReplyReserve = 100
	b.Window = b.ReplyReserve + 1000
	big := words("r", 1800) // under ToolResultMax: only the overflow cuts it
	t.Run("tool results cut harder, oldest first", func(t *testing.T) {
		msgs := []store.Message{
			user(1, "old question"), asst(2, "old answer"),
			user(3, "now"), asst(4, "", "x"), result(5, "x", big), asst(6, "", "y"), result(7, "y", words("s", 400)),
		}
		in := contextwin.Input{Messages: keyed(msgs)}
		out, rep := contextwin.Assemble(in, b, tok)
		checkInvariants(t, in, out, rep)
		if !slices.Equal(rep.Included, []int64{3, 4, 5, 6, 7}) {
			t.Errorf("included %v", rep.Included)
		}
		if !strings.Contains(cutReason(rep, 5), "window overflow: tool result cut 1800 →") || cutReason(rep, 7) != "" {
			t.Errorf("cuts %v", rep.Cut)
		}
		if z := zone(rep, contextwin.ZoneTotal); z.Tokens > z.Budget {
			t.Errorf("total %+v", z)
		}
		if last := out[len(out)-1].Content; last != words("s", 400) {
			t.Errorf("newest result cut before the older one")
		}
	})
	t.Run("newest user message cut, never dropped", func(t *testing.T) {
		huge := words("q", 5000)
		msgs := []store.Message{user(1, "old"), asst(2, "", "x"), result(3, "x", "X"), user(4, huge), asst(5, "", "y"), result(6, "y", big)}
		in := contextwin.Input{Messages: keyed(msgs)}
		out, rep := contextwin.Assemble(in, b, tok)
		checkInvariants(t, in, out, rep)
		if !slices.Equal(rep.Included, []int64{4}) || len(out) != 1 || out[0].Role != llm.RoleUser {
			t.Fatalf("included %v, sent %s", rep.Included, roles(out))
		}
		c := out[0].Content
		if !strings.HasPrefix(c, "q1 q2") || !strings.HasSuffix(c, "q5000") || !strings.Contains(c, "tokens omitted") {
			t.Errorf("user message not cut with a marker: %.60q", c)
		}
		if r := cutReason(rep, 4); !strings.Contains(r, "newest user message cut 5000 →") {
			t.Errorf("reason %q", r)
		}
		if r := cutReason(rep, 6); !strings.Contains(r, "window overflow") {
			t.Errorf("reason for 6 %q", r)
		}
		if z := zone(rep, contextwin.ZoneTotal); z.Tokens > z.Budget {
			t.Errorf("total %+v", z)
		}
	})
}

func TestAssembleTruncationMarkerBPE(t *testing.T) {
	tok := contextwin.NewTokenizer()
	var sb strings.Builder
	for i := range 1500 {
		fmt.Fprintf(&sb, "line %d: état ✓ ok\n", i)
	}
	body := sb.String()
	total := tok.Count(body)
	msgs := []store.Message{user(1, "run it"), asst(2, "", "x"), result(3, "x", body)}
	b := contextwin.DefaultBudgets()
	out, rep := contextwin.Assemble(contextwin.Input{Messages: keyed(msgs)}, b, tok)
	got := out[2].Content
	marker := "\n" + contextwin.OmittedMarker(total-b.ToolResultHead-b.ToolResultTail) + "\n"
	head, tail, ok := strings.Cut(got, marker)
	if !ok {
		t.Fatalf("no marker %q in %.200q", marker, got)
	}
	if !strings.HasPrefix(body, head) || !strings.HasSuffix(body, tail) {
		t.Error("head or tail is not the stored text's")
	}
	if h, tl := tok.Count(head), tok.Count(tail); h < b.ToolResultHead-2 || h > b.ToolResultHead || tl < b.ToolResultTail-2 || tl > b.ToolResultTail+2 {
		t.Errorf("head %d tokens, tail %d tokens", h, tl)
	}
	if msgs[2].Content != body {
		t.Error("stored message modified")
	}
	if !strings.HasPrefix(cutReason(rep, 3), fmt.Sprintf("truncated tool result %d → ", total)) {
		t.Errorf("reason %q", cutReason(rep, 3))
	}
}

func TestAssembleUsesCachedTokens(t *testing.T) {
	m := user(1, "short")
	m.Tokens = 5000
	b := contextwin.DefaultBudgets()
	b.Window, b.ReplyReserve = 2000, 100
	_, rep := contextwin.Assemble(contextwin.Input{Messages: []store.Message{user(0, "x"), m}}, b, wordTok{})
	if r := cutReason(rep, 1); !strings.Contains(r, "newest user message cut 5000") {
		t.Errorf("cached count not used: %v", rep.Cut)
	}
}

// TestZonesSeparateToolDefinitionsAndResults is issue 10 item 5: the meter's "Tool
// results" must not count the offered tools' definitions.
func TestZonesSeparateToolDefinitionsAndResults(t *testing.T) {
	specs := []llm.ToolSpec{{Name: "clock", Description: "tells the time", Parameters: []byte(`{}`)}}
	b := contextwin.DefaultBudgets()
	// A chat that never called a tool: no tool results, the definitions in their own zone.
	_, rep := contextwin.Assemble(contextwin.Input{Messages: []store.Message{user(1, "hi"), asst(2, "hello")}, Tools: specs}, b, wordTok{})
	if z := zone(rep, contextwin.ZoneResults); z.Name == "" || z.Tokens != 0 {
		t.Errorf("tool results zone %+v in a chat without tool calls", z)
	}
	if z := zone(rep, contextwin.ZoneTools); z.Tokens == 0 {
		t.Errorf("tool definitions zone %+v", z)
	}
	// With a call: the result's tokens are in the results zone and not in history.
	msgs := []store.Message{user(1, "time?"), asst(2, "", "c1"), result(3, "c1", words("r", 40)), asst(4, "noon")}
	_, rep = contextwin.Assemble(contextwin.Input{Messages: keyed(msgs), Tools: specs}, b, wordTok{})
	res, hist := zone(rep, contextwin.ZoneResults), zone(rep, contextwin.ZoneHistory)
	if res.Tokens != 40+contextwin.MessageOverhead {
		t.Errorf("tool results zone %+v, want the result's 40 tokens + overhead", res)
	}
	if total := zone(rep, contextwin.ZoneTotal); total.Tokens != hist.Tokens+res.Tokens+zone(rep, contextwin.ZoneTools).Tokens {
		t.Errorf("zones do not add up: %+v", rep.Zones)
	}
}

// The user's instructions (the chat's own, about me, how to answer) follow the system
// prompt, are shown as their own meter row, and are cut only after memories,
// preferences and the task.
func TestAssembleInstructions(t *testing.T) {
	in := contextwin.Input{
		System: "You are Atrium.", ChatPrompt: "Answer in French.", AboutMe: "I am a nurse.", AnswerStyle: " Be brief. ",
		Preferences: []string{"metric units"}, Goal: "plan a trip", Memories: []string{"lives in Lyon"},
		Messages: []store.Message{user(1, "hi")},
	}
	out, rep := contextwin.Assemble(in, contextwin.DefaultBudgets(), wordTok{})
	want := "You are Atrium.\n\nInstructions for this chat:\nAnswer in French.\n\nAbout the user:\nI am a nurse.\n\nHow the user wants answers:\nBe brief." +
		"\n\nUser preferences:\n- metric units\n\nTask goal: plan a trip\n\nRelevant memories:\n- lives in Lyon"
	if out[0].Content != want {
		t.Fatalf("pinned zone\n%q\nwant\n%q", out[0].Content, want)
	}
	if rep.Memories != 2 { // the memory and the preference
		t.Errorf("report counts %d recalled memories in the context, want 2", rep.Memories)
	}
	instr := (wordTok{}).Count("Instructions for this chat:\nAnswer in French.\n\nAbout the user:\nI am a nurse.\n\nHow the user wants answers:\nBe brief.")
	if z := zone(rep, contextwin.ZoneInstructions); z.Tokens != instr {
		t.Errorf("instructions zone %+v, want %d tokens", z, instr)
	}

	// Just room for the system prompt and the instructions: everything else goes first.
	b := contextwin.DefaultBudgets()
	b.Pinned = (wordTok{}).Count("You are Atrium.\n\n") + instr
	out, rep = contextwin.Assemble(in, b, wordTok{})
	for _, gone := range []string{"Lyon", "metric", "plan a trip"} {
		if strings.Contains(out[0].Content, gone) {
			t.Errorf("%q kept while the instructions had to fit: %q", gone, out[0].Content)
		}
	}
	for _, kept := range []string{"You are Atrium.", "Answer in French.", "I am a nurse.", "Be brief."} {
		if !strings.Contains(out[0].Content, kept) {
			t.Errorf("%q cut before memories, preferences and the task: %q", kept, out[0].Content)
		}
	}
	if rep.Memories != 0 { // found, but none was sent: no memory hit
		t.Errorf("report counts %d recalled memories after all were cut", rep.Memories)
	}
	// Less room still: the end of the instructions is cut, and the cut says so.
	b.Pinned = 8
	out, rep = contextwin.Assemble(in, b, wordTok{})
	if !strings.HasPrefix(out[0].Content, "You are Atrium.") || (wordTok{}).Count(out[0].Content) > 8 {
		t.Errorf("tight pinned zone %q", out[0].Content)
	}
	var said bool
	for _, c := range rep.Cut {
		said = said || strings.HasPrefix(c.Reason, "system prompt and instructions cut")
	}
	if !said || zone(rep, contextwin.ZoneInstructions).Tokens > 8 {
		t.Errorf("cuts %+v, instructions zone %+v", rep.Cut, zone(rep, contextwin.ZoneInstructions))
	}
	// Without any, the row is empty.
	in.ChatPrompt, in.AboutMe, in.AnswerStyle = "", "  ", ""
	_, rep = contextwin.Assemble(in, contextwin.DefaultBudgets(), wordTok{})
	if z := zone(rep, contextwin.ZoneInstructions); z.Tokens != 0 {
		t.Errorf("instructions zone %+v without instructions", z)
	}
}
