// Package contextwin is the context engine: it decides what of a session goes
// into the next model request. The request has three zones: a pinned system
// message (system prompt, user preferences, task goal and stage, retrieved
// memories), the rolling summary of older turns, and the latest whole turns
// verbatim, all fitting the model's window minus a reserve for the reply.
// Token counts come from a real BPE tokenizer (NewTokenizer).
//
// Assemble builds the messages and a Report of what went in, what was left out
// and why, from the bounded tail of a session that the store's
// LoadContextMessages fetches (at most DefaultLoadMax messages); Fold advances
// the rolling summary with the turns that left the verbatim window. The package
// runs no SQL.
package contextwin

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"atrium/internal/llm"
	"atrium/internal/store"
)

// Budgets bounds the zones of the context, in tokens. A zero field means its
// default (see DefaultBudgets).
type Budgets struct {
	Pinned                         int // system prompt + user preferences + task goal/stage + retrieved memories
	Summary                        int // rolling summary of older turns
	RecentTurns                    int // whole turns always sent verbatim (window permitting)
	ToolResultMax                  int // a tool result over this is cut to head + marker + tail in the context
	ToolResultHead, ToolResultTail int // what such a cut keeps
	Window                         int // the model's context window
	ReplyReserve                   int // kept free for the reply
}

// DefaultBudgets returns the seed article's budgets and a 32k window.
func DefaultBudgets() Budgets {
	return Budgets{
		Pinned:         800,
		Summary:        500,
		RecentTurns:    6,
		ToolResultMax:  2000,
		ToolResultHead: 500,
		ToolResultTail: 500,
		Window:         32768,
		ReplyReserve:   4096,
	}
}

// WithWindow returns b for a model whose context window is w tokens: the reply
// reserve stays at most a quarter of it, so small windows keep room for history.
func (b Budgets) WithWindow(w int) Budgets {
	b.Window = w
	b.ReplyReserve = min(DefaultBudgets().ReplyReserve, w/4)
	return b
}

func (b Budgets) withDefaults() Budgets {
	d := DefaultBudgets()
	for _, f := range []struct{ v, d *int }{
		{&b.Pinned, &d.Pinned}, {&b.Summary, &d.Summary}, {&b.RecentTurns, &d.RecentTurns},
		{&b.ToolResultMax, &d.ToolResultMax}, {&b.ToolResultHead, &d.ToolResultHead},
		{&b.ToolResultTail, &d.ToolResultTail}, {&b.Window, &d.Window}, {&b.ReplyReserve, &d.ReplyReserve},
	} {
		if *f.v <= 0 {
			*f.v = *f.d
		}
	}
	return b
}

// Input is what Assemble chooses from.
type Input struct {
	System string
	// The chat's own instructions and the user's custom instructions: pinned after
	// the system prompt, and cut only after memories, preferences and the task.
	ChatPrompt, AboutMe, AnswerStyle string
	Preferences                      []string
	Goal, Stage                      string
	Memories                         []string // most relevant first; the last ones go first when the pinned zone is full

	Summary    string
	SummarySeq int64 // the summary covers messages with seq <= SummarySeq

	// Messages are the session's messages after SummarySeq, ascending, as
	// store.DB.LoadContextMessages returns them (at most a bounded number of the
	// newest).
	Messages []store.Message
	// Unloaded: messages after SummarySeq and before Messages exist but were left
	// out by the load's bound. (Seqs alone cannot tell: the branch on screen has gaps
	// where other versions of a message are.)
	Unloaded bool

	Tools []llm.ToolSpec // offered tools, counted against the window

	// NoImages: the model takes no images, so attached images are replaced by a line
	// that says so (a chat can change its model after an image was sent).
	NoImages bool
}

// Zone is one part of the context, for the context meter. Budget 0 means the
// zone has no budget of its own.
type Zone struct {
	Name   string
	Tokens int
	Budget int
}

// Zone names, in Report.Zones order.
const (
	ZonePinned = "pinned"
	// ZoneInstructions is the part of the pinned zone that the user wrote (custom
	// instructions, the chat's instructions): shown on its own row, inside Pinned.
	ZoneInstructions = "instructions"
	ZoneSummary      = "summary"
	ZoneHistory      = "history"
	ZoneResults      = "tool_results" // tool messages of the history
	ZoneFiles        = "files"        // files attached to user messages of the history (text and images)
	ZoneTools        = "tools"        // the offered tools' definitions
	ZoneDropped      = "dropped"      // turns in neither the request nor the summary (only when there are some)
	ZoneTotal        = "total"
)

// Cut is a message left out of the context or shortened in it. Seq 0 is not a
// message: a part of the pinned zone or the summary.
type Cut struct {
	Seq    int64
	Reason string
}

// Report says what Assemble did. Every seq of Input.Messages is in Included,
// in Cut, or in both (a message sent shortened).
type Report struct {
	Zones    []Zone  // pinned, summary, history, tool results, tool definitions, total
	Included []int64 // seqs sent, ascending
	Cut      []Cut   // what was left out or cut, and why
	// Unsummarised are the whole turns older than the last RecentTurns, which
	// the summary does not cover yet: fold them next (Fold), then advance the
	// watermark to the last one's seq. When Unsummarised[0].Seq > SummarySeq+1,
	// the load's bound left older messages out; fold those first. Turns inside
	// the last RecentTurns that the window could not hold are in it too: they
	// left the context, so they belong in the summary.
	Unsummarised []store.Message
	// Dropped are the seqs of Unsummarised messages that are not in this
	// context: until a fold covers them they are in neither the summary nor
	// the request, so the caller folds first or shows them as dropped.
	Dropped     []int64
	Interrupted []string // tool call ids whose missing result was filled in as interrupted
	// Memories is how many recalled memories and preferences are in the pinned
	// zone, after the budget cut any (the memory hit rate counts a turn whose
	// context held at least one).
	Memories int
}

// MessageOverhead is what the chat format adds to every message, in tokens.
const MessageOverhead = 3

// SummaryHeader starts the summary message.
const SummaryHeader = "Summary of earlier conversation:\n"

// InterruptedResult stands in for the result of a tool call that did not finish.
const InterruptedResult = `{"error":"interrupted","detail":"the tool call did not finish"}`

// NoReply stands in for the reply of an older turn that has none (it failed or was
// interrupted before any text was written), so that a request never carries two user
// messages in a row.
const NoReply = "[no reply: it failed or was interrupted before any text was written]"

// OmittedMarker is the visible marker where a text was cut.
func OmittedMarker(tokens int) string {
	return fmt.Sprintf("[… %d tokens omitted …]", tokens)
}

// Assemble builds the model request's messages from in: the pinned system
// message, the summary message (when there is a summary) and the turns, and a
// Report. The stored messages are not modified. It is a pure function of its
// arguments and safe for concurrent use with a concurrency-safe tok.
//
// A turn is a user message with the assistant and tool messages after it, up
// to the next user message; turns are kept or dropped whole, newest first, so
// that the last RecentTurns are verbatim and older unsummarised ones are
// carried as far as the window allows. A tool result always follows the call
// it answers; a result without its call is left out, a call without a result
// gets InterruptedResult, an older turn with no reply gets NoReply. When even the newest turn does not fit, its tool
// results are cut harder (oldest first), then its older steps dropped, and as
// a last resort the newest user message is cut with a marker; it is never
// dropped.
func Assemble(in Input, b Budgets, tok Tokenizer) ([]llm.Message, Report) {
	b = b.withDefaults()
	a := assembler{b: b, tok: tok}
	var rep Report

	pinnedText, pinnedTokens, instrTokens := a.pinned(in, &rep)
	summaryText, summaryTokens := a.summary(in.Summary, &rep)
	toolTokens := 0
	for _, t := range in.Tools {
		toolTokens += tok.Count(t.Name) + tok.Count(t.Description) + tok.Count(string(t.Parameters)) + MessageOverhead
	}
	fixed := toolTokens
	if pinnedText != "" {
		fixed += pinnedTokens + MessageOverhead
	}
	if summaryText != "" {
		fixed += tok.Count(SummaryHeader) + summaryTokens + MessageOverhead
	}
	limit := b.Window - b.ReplyReserve
	avail := max(0, limit-fixed)

	// Split into turns; anything before the first user message (the load's
	// bound can start mid-turn) is a turn of its own.
	msgs := in.Messages
	if len(msgs) > 0 && in.Unloaded {
		rep.Cut = append(rep.Cut, Cut{Seq: in.SummarySeq + 1, Reason: fmt.Sprintf(
			"messages %d–%d not loaded (older than the newest loaded) and not summarised yet", in.SummarySeq+1, msgs[0].Seq-1)})
	}
	var left map[*store.Attachment]bool
	if !in.NoImages {
		left = leftImages(msgs, in.SummarySeq)
	}
	var turns []turn
	for i := 0; i < len(msgs); {
		j := i + 1
		for j < len(msgs) && msgs[j].Role != store.RoleUser {
			j++
		}
		turns = append(turns, a.turn(msgs[i:j], in.SummarySeq, in.NoImages, left))
		i = j
	}
	for k := 0; k < len(turns)-1; k++ {
		if items := turns[k].items; len(items) > 0 && items[len(items)-1].msg.Role == llm.RoleUser {
			turns[k].add(item{msg: llm.Message{Role: llm.RoleAssistant, Content: NoReply},
				cost: a.tok.Count(NoReply) + MessageOverhead})
		}
	}

	// Newest first, whole turns, while they fit.
	first := len(turns) // index of the oldest turn kept
	used := 0
	for k := len(turns) - 1; k >= 0; k-- {
		if used+turns[k].cost > avail {
			if k == len(turns)-1 {
				a.squeeze(&turns[k], avail)
				used += turns[k].cost
				first = k
			}
			break
		}
		used += turns[k].cost
		first = k
	}
	recentFrom := max(0, len(turns)-b.RecentTurns)

	out := make([]llm.Message, 0, 2+len(msgs))
	if pinnedText != "" {
		out = append(out, llm.Message{Role: llm.RoleSystem, Content: pinnedText})
	}
	if summaryText != "" {
		out = append(out, llm.Message{Role: llm.RoleSystem, Content: SummaryHeader + summaryText})
	}
	history, results, files, dropped := 0, 0, 0, 0
	wire := wireIDs{byKey: map[string]string{}, taken: map[string]bool{}}
	for k := range turns {
		t := &turns[k]
		if k < recentFrom || k < first {
			rep.Unsummarised = append(rep.Unsummarised, t.msgs...)
		}
		if k < first {
			reason := "dropped: window overflow, not summarised yet"
			if k < recentFrom {
				reason = fmt.Sprintf("dropped: window overflow, outside the last %d turns and not summarised yet", b.RecentTurns)
			}
			dropped += t.cost
			for _, m := range t.msgs {
				if m.Seq > in.SummarySeq {
					rep.Dropped = append(rep.Dropped, m.Seq)
				}
				rep.Cut = append(rep.Cut, Cut{Seq: m.Seq, Reason: reason})
			}
			continue
		}
		history += t.cost
		for _, it := range t.items {
			files += it.files
			if it.msg.Role == llm.RoleTool {
				results += it.cost
				it.msg.ToolCallID = wire.byKey[it.key]
			} else if len(it.keys) > 0 {
				it.msg.ToolCalls = wire.calls(it.msg.ToolCalls, it.keys)
			}
			out = append(out, it.msg)
			if it.seq != 0 {
				rep.Included = append(rep.Included, it.seq)
			} else if it.msg.Role == llm.RoleTool {
				rep.Interrupted = append(rep.Interrupted, it.msg.ToolCallID)
			}
		}
		rep.Cut = append(rep.Cut, t.cuts...)
	}
	slices.Sort(rep.Included)
	if len(rep.Unsummarised) > 0 && rep.Unsummarised[0].Seq <= in.SummarySeq {
		// Messages the summary already covers were skipped, not unsummarised.
		u := rep.Unsummarised[:0]
		for _, m := range rep.Unsummarised {
			if m.Seq > in.SummarySeq {
				u = append(u, m)
			}
		}
		rep.Unsummarised = u
	}
	rep.Zones = []Zone{
		{Name: ZonePinned, Tokens: pinnedTokens, Budget: b.Pinned},
		{Name: ZoneInstructions, Tokens: instrTokens, Budget: b.Pinned},
		{Name: ZoneSummary, Tokens: summaryTokens, Budget: b.Summary},
		{Name: ZoneHistory, Tokens: history - results - files, Budget: avail},
		{Name: ZoneResults, Tokens: results},
		{Name: ZoneTools, Tokens: toolTokens},
		{Name: ZoneTotal, Tokens: fixed + history, Budget: limit},
	}
	if files > 0 {
		rep.Zones = slices.Insert(rep.Zones, 5, Zone{Name: ZoneFiles, Tokens: files})
	}
	if len(rep.Dropped) > 0 {
		rep.Zones = slices.Insert(rep.Zones, len(rep.Zones)-1, Zone{Name: ZoneDropped, Tokens: dropped})
	}
	return out, rep
}

type assembler struct {
	b   Budgets
	tok Tokenizer
}

// item is one message of the context.
type item struct {
	msg        llm.Message
	keys       []string // an assistant step: its calls' store.ToolCallKey
	key        string   // a tool result: the key of the call it answers
	seq        int64    // 0: filled in (an interrupted tool call's result)
	cost       int      // tokens, MessageOverhead included
	full       string
	fullTokens int // tool results and user messages: the stored content and its tokens
	images     int // a user message: the tokens of its images (never cut)
	files      int // a user message: the tokens of its attachments as sent
}

type turn struct {
	msgs  []store.Message // as stored
	items []item
	cost  int
	cuts  []Cut // for the messages of this turn, when it is kept
}

func (t *turn) setCut(seq int64, reason string) {
	for i := range t.cuts {
		if t.cuts[i].Seq == seq {
			t.cuts[i].Reason = reason
			return
		}
	}
	t.cuts = append(t.cuts, Cut{Seq: seq, Reason: reason})
}

func (a *assembler) tokens(m *store.Message, calls []llm.ToolCall) int {
	if m.Tokens > 0 {
		return m.Tokens
	}
	n := a.tok.Count(m.Content)
	for _, c := range calls {
		n += a.tok.Count(c.Name) + a.tok.Count(c.Arguments)
	}
	return n
}

// turn pairs the tool results of msgs with their calls and cuts long results.
func (a *assembler) turn(msgs []store.Message, summarySeq int64, noImages bool, left map[*store.Attachment]bool) turn {
	t := turn{msgs: msgs, items: make([]item, 0, len(msgs))}
	paired := make([]bool, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		if m.Seq <= summarySeq {
			t.cuts = append(t.cuts, Cut{Seq: m.Seq, Reason: "covered by the summary"})
			continue
		}
		if m.Role == store.RoleTool {
			continue // placed after its call below, or an orphan
		}
		calls, err := ParseToolCalls(m.ToolCalls)
		if err != nil {
			t.cuts = append(t.cuts, Cut{Seq: m.Seq, Reason: "unreadable tool calls: " + err.Error()})
			calls = nil
		}
		if m.Content == "" && len(calls) == 0 && len(m.Attachments) == 0 {
			reason := "empty message"
			if m.Status == store.StatusError {
				reason = "failed message with no content"
			}
			t.cuts = append(t.cuts, Cut{Seq: m.Seq, Reason: reason})
			continue
		}
		n := a.tokens(m, calls)
		it := item{msg: llm.Message{Role: m.Role, Content: m.Content, ToolCalls: calls}, seq: m.Seq, cost: n + MessageOverhead}
		if m.Role == store.RoleUser {
			// Attached files travel with their message: a turn is kept or dropped whole.
			msg, extra, images := a.withAttachments(m, noImages, left)
			it.msg, it.cost, it.images, it.files = msg, it.cost+extra+images, images, extra+images
			it.full, it.fullTokens = msg.Content, n+extra
		}
		t.add(it)
		if m.Role != store.RoleAssistant {
			continue
		}
		// Calls and results pair by Atrium's key: providers reuse their call ids.
		keys := make([]string, len(calls))
		for k := range calls {
			keys[k] = store.ToolCallKey(m.ID, k)
		}
		t.items[len(t.items)-1].keys = keys
		for k, c := range calls {
			j := i + 1
			for ; j < len(msgs); j++ {
				r := &msgs[j]
				if !paired[j] && r.Role == store.RoleTool && r.CallKey == keys[k] && r.Seq > summarySeq &&
					!(r.Status == store.StatusError && r.Content == "") {
					break
				}
			}
			if j == len(msgs) {
				t.add(item{msg: llm.Message{Role: llm.RoleTool, Content: InterruptedResult, ToolCallID: c.ID}, key: keys[k],
					cost: a.tok.Count(InterruptedResult) + MessageOverhead})
				continue
			}
			paired[j] = true
			r := &msgs[j]
			n := a.tokens(r, nil)
			it := item{msg: llm.Message{Role: llm.RoleTool, Content: r.Content, ToolCallID: r.ToolCallID}, key: keys[k],
				seq: r.Seq, cost: n + MessageOverhead, full: r.Content, fullTokens: n}
			if n > a.b.ToolResultMax && n > a.b.ToolResultHead+a.b.ToolResultTail {
				text, cut := cutText(a.tok, r.Content, n, a.b.ToolResultHead, a.b.ToolResultTail)
				it.msg.Content, it.cost = text, cut+MessageOverhead
				t.cuts = append(t.cuts, Cut{Seq: r.Seq, Reason: fmt.Sprintf("truncated tool result %d → %d tokens", n, cut)})
			}
			t.add(it)
		}
	}
	for j := range msgs {
		r := &msgs[j]
		if r.Role != store.RoleTool || paired[j] || r.Seq <= summarySeq {
			continue
		}
		reason := fmt.Sprintf("orphan tool result: call %q is not in the context", r.ToolCallID)
		if r.Status == store.StatusError && r.Content == "" {
			reason = "failed message with no content"
		}
		t.cuts = append(t.cuts, Cut{Seq: r.Seq, Reason: reason})
	}
	return t
}

// wireIDs gives the calls of one request distinct ids that their results repeat: the
// provider's own id (some providers check their format), unless it is empty or an
// earlier call of the request has it; then Atrium's key, which OpenAI and Anthropic
// accept. Earlier calls keep their ids as the chat grows, so the prefix stays cacheable.
type wireIDs struct {
	byKey map[string]string // call key -> id on the wire
	taken map[string]bool
}

func (w *wireIDs) calls(calls []llm.ToolCall, keys []string) []llm.ToolCall {
	out := slices.Clone(calls)
	for i := range out {
		id := out[i].ID
		if id == "" || w.taken[id] {
			id = keys[i]
		}
		for n := 2; w.taken[id]; n++ { // a provider's id that looks like a key
			id = fmt.Sprintf("%s_%d", keys[i], n)
		}
		w.taken[id], w.byKey[keys[i]] = true, id
		out[i].ID = id
	}
	return out
}

func (t *turn) add(it item) {
	t.items = append(t.items, it)
	t.cost += it.cost
}

// squeeze makes the newest turn fit avail: its tool results are cut harder,
// oldest first, then its oldest steps (an assistant message with its results)
// dropped, then the user message cut.
func (a *assembler) squeeze(t *turn, avail int) {
	minimal := a.tok.Count("\n"+OmittedMarker(100000)+"\n") + MessageOverhead
	for i := range t.items {
		it := &t.items[i]
		if t.cost <= avail {
			return
		}
		if it.seq == 0 || it.msg.Role != llm.RoleTool || it.cost <= minimal {
			continue
		}
		target := max(minimal, it.cost-(t.cost-avail))
		text, n := shrink(a.tok, it.full, it.fullTokens, target-MessageOverhead, 0.5)
		t.cost += n + MessageOverhead - it.cost
		it.msg.Content, it.cost = text, n+MessageOverhead
		t.setCut(it.seq, fmt.Sprintf("window overflow: tool result cut %d → %d tokens", it.fullTokens, n))
	}
	// Drop steps after the user message, oldest first.
	u := 0
	for u < len(t.items) && t.items[u].msg.Role != llm.RoleUser {
		u++
	}
	if u == len(t.items) {
		u = -1 // no user message: every step may go
	}
	for t.cost > avail {
		start := u + 1
		if start >= len(t.items) {
			break
		}
		end := start + 1
		for end < len(t.items) && t.items[end].msg.Role != llm.RoleAssistant && t.items[end].msg.Role != llm.RoleUser {
			end++
		}
		for _, it := range t.items[start:end] {
			t.cost -= it.cost
			if it.seq != 0 {
				t.setCut(it.seq, "window overflow: an older step of the newest turn")
			}
		}
		t.items = append(t.items[:start], t.items[end:]...)
	}
	if t.cost <= avail || u < 0 {
		return
	}
	it := &t.items[u]
	target := max(minimal+it.images, it.cost-(t.cost-avail))
	text, n := shrink(a.tok, it.full, it.fullTokens, target-MessageOverhead-it.images, 0.5)
	t.cost += n + it.images + MessageOverhead - it.cost
	it.msg.Content, it.cost = text, n+it.images+MessageOverhead
	it.files = min(it.files, n+it.images) // the cut may have taken text files
	t.setCut(it.seq, fmt.Sprintf("window overflow: newest user message cut %d → %d tokens", it.fullTokens, n))
}

// pinned builds the pinned zone within its budget: the last memories go first,
// then the last preferences, the stage, the goal; the system prompt and the user's
// instructions are cut last, from the end. It returns the text, its tokens, and how
// many of them are the user's instructions.
func (a *assembler) pinned(in Input, rep *Report) (string, int, int) {
	prefs, mems := in.Preferences, in.Memories
	defer func() { rep.Memories = len(mems) + len(prefs) }() // what is left of them
	goal, stage := in.Goal, in.Stage
	var instr strings.Builder
	for _, part := range []struct{ header, text string }{
		{"Instructions for this chat:\n", in.ChatPrompt},
		{"About the user:\n", in.AboutMe},
		{"How the user wants answers:\n", in.AnswerStyle},
	} {
		if t := strings.TrimSpace(part.text); t != "" {
			if instr.Len() > 0 {
				instr.WriteString("\n\n")
			}
			instr.WriteString(part.header + t)
		}
	}
	instructions := instr.String()
	instrTokens := 0
	if instructions != "" {
		instrTokens = a.tok.Count(instructions)
	}
	build := func() string {
		var sb strings.Builder
		sep := func() {
			if sb.Len() > 0 {
				sb.WriteString("\n\n")
			}
		}
		if in.System != "" {
			sb.WriteString(in.System)
		}
		if instructions != "" {
			sep()
			sb.WriteString(instructions)
		}
		if len(prefs) > 0 {
			sep()
			sb.WriteString("User preferences:\n- ")
			sb.WriteString(strings.Join(prefs, "\n- "))
		}
		if goal != "" {
			sep()
			sb.WriteString("Task goal: ")
			sb.WriteString(goal)
		}
		if stage != "" {
			if goal != "" {
				sb.WriteString("\n")
			} else {
				sep()
			}
			sb.WriteString("Stage: ")
			sb.WriteString(stage)
		}
		if len(mems) > 0 {
			sep()
			sb.WriteString("Relevant memories:\n- ")
			sb.WriteString(strings.Join(mems, "\n- "))
		}
		return sb.String()
	}
	text := build()
	n := a.tok.Count(text)
	budget := a.b.Pinned
	for n > budget {
		// Drop by estimate (cached per-part counts), then count exactly again.
		excess := n - budget
		bullet := func(s string, last bool, header string) int {
			n := a.tok.Count("- "+s) + 1
			if last {
				n += a.tok.Count(header) + 1
			}
			return n
		}
		for excess > 0 {
			switch {
			case len(mems) > 0:
				k := len(mems)
				excess -= bullet(mems[k-1], k == 1, "Relevant memories:")
				mems = mems[:k-1]
				rep.Cut = append(rep.Cut, Cut{Reason: fmt.Sprintf("pinned zone over %d tokens: memory %d of %d left out", budget, k, len(in.Memories))})
			case len(prefs) > 0:
				k := len(prefs)
				excess -= bullet(prefs[k-1], k == 1, "User preferences:")
				prefs = prefs[:k-1]
				rep.Cut = append(rep.Cut, Cut{Reason: fmt.Sprintf("pinned zone over %d tokens: preference %d of %d left out", budget, k, len(in.Preferences))})
			case stage != "":
				excess -= a.tok.Count("Stage: "+stage) + 1
				stage = ""
				rep.Cut = append(rep.Cut, Cut{Reason: fmt.Sprintf("pinned zone over %d tokens: stage left out", budget)})
			case goal != "":
				excess -= a.tok.Count("Task goal: "+goal) + 1
				goal = ""
				rep.Cut = append(rep.Cut, Cut{Reason: fmt.Sprintf("pinned zone over %d tokens: task goal left out", budget)})
			default:
				excess = 0
			}
		}
		text = build()
		n = a.tok.Count(text)
		if n > budget && len(mems) == 0 && len(prefs) == 0 && goal == "" && stage == "" {
			cut, m := shrink(a.tok, text, n, budget, 1)
			what := "system prompt"
			if instructions != "" {
				what = "system prompt and instructions"
			}
			rep.Cut = append(rep.Cut, Cut{Reason: fmt.Sprintf("%s cut %d → %d tokens (pinned budget %d)", what, n, m, budget)})
			return cut, m, min(instrTokens, max(0, m-a.tok.Count(in.System)))
		}
	}
	return text, n, instrTokens
}

func (a *assembler) summary(s string, rep *Report) (string, int) {
	n := a.tok.Count(s)
	if n <= a.b.Summary {
		return s, n
	}
	cut, m := shrink(a.tok, s, n, a.b.Summary, 1)
	rep.Cut = append(rep.Cut, Cut{Reason: fmt.Sprintf("summary cut %d → %d tokens", n, m)})
	return cut, m
}

// cutText keeps the first head and last tail tokens of text (total tokens)
// around an OmittedMarker and returns the result and its token count (the
// kept tokens plus the marker's).
func cutText(tok Tokenizer, text string, total, head, tail int) (string, int) {
	h, s := cutOffsets(tok, text, head, tail)
	// The marker stands on a line of its own; blanks at the cut would only
	// cost tokens.
	before := strings.TrimRightFunc(text[:h], unicode.IsSpace)
	after := strings.TrimLeftFunc(text[s:], unicode.IsSpace)
	mid := "\n" + OmittedMarker(max(0, total-head-tail)) + "\n"
	if before == "" {
		mid = strings.TrimPrefix(mid, "\n")
	}
	if after == "" {
		mid = strings.TrimSuffix(mid, "\n")
	}
	return before + mid + after, head + tail + tok.Count(mid)
}

// shrink cuts text (total tokens) to at most target tokens, marker included,
// keeping headShare of what remains at the head and the rest at the tail.
func shrink(tok Tokenizer, text string, total, target int, headShare float64) (string, int) {
	if total <= target {
		return text, total
	}
	keep := target
	for range 3 { // the marker's own size depends on what it says
		mc := tok.Count("\n" + OmittedMarker(total-keep) + "\n")
		keep = max(0, target-mc)
	}
	head := int(float64(keep) * headShare)
	return cutText(tok, text, total, head, keep-head)
}

// ParseToolCalls decodes a stored message's ToolCalls: a JSON array of
// {id, name, arguments}, where arguments is JSON text or a JSON value. Empty
// input is no calls.
func ParseToolCalls(raw []byte) ([]llm.ToolCall, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var stored []struct {
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(raw, &stored); err != nil {
		return nil, fmt.Errorf("contextwin: parse tool calls: %w", err)
	}
	calls := make([]llm.ToolCall, len(stored))
	for i, s := range stored {
		args := string(s.Arguments)
		if len(s.Arguments) > 0 && s.Arguments[0] == '"' {
			if err := json.Unmarshal(s.Arguments, &args); err != nil {
				return nil, fmt.Errorf("contextwin: parse tool calls: %w", err)
			}
		}
		calls[i] = llm.ToolCall{ID: s.ID, Name: s.Name, Arguments: args}
	}
	return calls, nil
}
