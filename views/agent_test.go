package views_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"atrium/views"

	"github.com/a-h/templ"
	"golang.org/x/net/html"
)

const hostile = `</pre><script>alert(1)</script><img src=x onerror=alert(1)>&amp;`

// noMarkup fails if the rendered elements contain a script or an img: text that
// should have been escaped became markup.
func noMarkup(t *testing.T, what string, els ...*html.Node) {
	t.Helper()
	if n := len(findAll(func(n *html.Node) bool { return n.Data == "script" || n.Data == "img" }, els...)); n != 0 {
		t.Errorf("%s: %d script/img elements, the text was not escaped", what, n)
	}
}

func children(n *html.Node) []*html.Node {
	var out []*html.Node
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.ElementNode {
			out = append(out, c)
		}
	}
	return out
}

func classOf(n *html.Node) string { v, _ := attr(n, "class"); return v }

func hasClass(n *html.Node, class string) bool {
	for _, c := range strings.Fields(classOf(n)) {
		if c == class {
			return true
		}
	}
	return false
}

func byClass(class string) func(*html.Node) bool {
	return func(n *html.Node) bool { return hasClass(n, class) }
}

func isOpen(n *html.Node) bool { _, ok := attr(n, "open"); return ok }

func TestToolDOMID(t *testing.T) {
	tests := []struct{ id, want string }{
		{"call_1", "tool-call_1"},
		{"toolu_01A-bc", "tool-toolu_01A-bc"},
		{"", "tool-x-"},
		{"a b", "tool-x-612062"},
		{`"><script>`, "tool-x-223e3c7363726970743e"},
		{"call.1", "tool-x-63616c6c2e31"},
		{"é", "tool-x-c3a9"},
		{"x-612062", "tool-x-782d363132303632"}, // would otherwise collide with "a b"
		{"x-", "tool-x-782d"},
		{"x_1", "tool-x_1"},
	}
	valid := regexp.MustCompile(`^tool-[A-Za-z0-9_-]*$`)
	seen := map[string]string{}
	for _, tt := range tests {
		got := views.ToolDOMID(tt.id)
		if got != tt.want {
			t.Errorf("ToolDOMID(%q) = %q, want %q", tt.id, got, tt.want)
		}
		if !valid.MatchString(got) {
			t.Errorf("ToolDOMID(%q) = %q has unsafe characters", tt.id, got)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("ToolDOMID(%q) = ToolDOMID(%q) = %q", tt.id, other, got)
		}
		seen[got] = tt.id
	}
}

func TestToolCardItem(t *testing.T) {
	tests := []struct {
		name                     string
		card                     views.ToolCard
		status, pill, duration   string
		waiting, result, cutNote bool
	}{
		{"running", views.ToolCard{ID: "c1", Name: "calculator", Args: "{\n  \"expr\": \"1+1\"\n}", Status: "running"},
			"running", "running…", "", true, false, false},
		{"unset status is running", views.ToolCard{ID: "c1", Name: "calculator"},
			"running", "running…", "", true, false, false},
		{"ok", views.ToolCard{ID: "c1", Name: "calculator", Args: "{}", Status: "ok", Result: "2", Duration: 400 * time.Millisecond},
			"ok", "ok", "0.4 s", false, true, false},
		{"ok truncated", views.ToolCard{ID: "c1", Name: "fetch", Status: "ok", Result: "abc", Truncated: true, Duration: 12 * time.Second},
			"ok", "ok", "12.0 s", false, true, true},
		{"error with code", views.ToolCard{ID: "c1", Name: "clock", Status: "error", ErrorCode: "timeout", Result: `{"error":"timeout"}`, Duration: 20 * time.Second},
			"error", "error: timeout", "20.0 s", false, true, false},
		{"error without code", views.ToolCard{ID: "c1", Name: "clock", Status: "error", Duration: 30 * time.Millisecond},
			"error", "error", "< 0.1 s", false, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			els := parseFragment(t, views.ToolCardItem(tt.card))
			if len(els) != 1 {
				t.Fatalf("%d top-level elements", len(els))
			}
			d := els[0]
			if d.Data != "details" {
				t.Fatalf("card is <%s>", d.Data)
			}
			wantAttr(t, d, "id", "tool-c1")
			wantAttr(t, d, "data-testid", "tool-card")
			wantAttr(t, d, "data-tool", tt.card.Name)
			wantAttr(t, d, "data-status", tt.status)
			if !hasClass(d, "tool-card") {
				t.Errorf("class=%q", classOf(d))
			}
			if isOpen(d) {
				t.Error("card is open by default")
			}
			if _, ok := attr(d, "hx-swap-oob"); ok {
				t.Error("ToolCardItem carries hx-swap-oob")
			}
			sum := one(t, "summary", byTag("summary"), d)
			if got := text(one(t, "name", byAttr("data-testid", "tool-name"), sum)); got != tt.card.Name {
				t.Errorf("name = %q", got)
			}
			if got := text(one(t, "pill", byAttr("data-testid", "tool-status"), sum)); got != tt.pill {
				t.Errorf("pill = %q, want %q", got, tt.pill)
			}
			dur := findAll(byAttr("data-testid", "tool-duration"), sum)
			if tt.duration == "" && len(dur) != 0 || tt.duration != "" && (len(dur) != 1 || text(dur[0]) != tt.duration) {
				t.Errorf("duration elements %d, want %q", len(dur), tt.duration)
			}
			if tt.card.Args != "" {
				args := one(t, "args", byAttr("data-testid", "tool-args"), d)
				if args.Data != "pre" || text(args) != tt.card.Args {
					t.Errorf("args <%s> %q", args.Data, text(args))
				}
			}
			if got := strings.Contains(text(d), "Waiting for the result"); got != tt.waiting {
				t.Errorf("waiting shown = %v", got)
			}
			res := findAll(byAttr("data-testid", "tool-result"), d)
			if (len(res) == 1) != tt.result {
				t.Errorf("%d result elements, want shown=%v", len(res), tt.result)
			} else if tt.result && text(res[0]) != tt.card.Result {
				t.Errorf("result = %q", text(res[0]))
			}
			note := findAll(byAttr("data-testid", "tool-truncated"), d)
			if (len(note) == 1) != tt.cutNote {
				t.Errorf("%d truncated notes, want shown=%v", len(note), tt.cutNote)
			} else if tt.cutNote && text(note[0]) != "(truncated; the full result is stored)" {
				t.Errorf("note = %q", text(note[0]))
			}
		})
	}
}

func TestToolCardEscapes(t *testing.T) {
	c := views.ToolCard{ID: `a"b<c>`, Name: hostile, Args: hostile, Status: "error", ErrorCode: hostile, Result: hostile}
	for name, comp := range map[string]templ.Component{"item": views.ToolCardItem(c), "frame": views.FrameToolCard(c)} {
		els := parseFragment(t, comp)
		noMarkup(t, name, els...)
		d := els[0]
		wantAttr(t, d, "id", views.ToolDOMID(c.ID))
		wantAttr(t, d, "data-tool", hostile)
		if got := text(one(t, "args", byAttr("data-testid", "tool-args"), d)); got != hostile {
			t.Errorf("%s: args = %q", name, got)
		}
		if got := text(one(t, "result", byAttr("data-testid", "tool-result"), d)); got != hostile {
			t.Errorf("%s: result = %q", name, got)
		}
		if got := text(one(t, "pill", byAttr("data-testid", "tool-status"), d)); got != "error: "+hostile {
			t.Errorf("%s: pill = %q", name, got)
		}
	}
	if out := render(t, views.ToolCardItem(c)); !strings.Contains(out, "&lt;script&gt;") {
		t.Errorf("no escaped script in %s", out)
	}
}

func TestMessageItemReasoningAndTools(t *testing.T) {
	cards := []views.ToolCard{
		{ID: "c1", Name: "clock", Status: "ok", Result: "12:00", Duration: time.Second},
		{ID: "c2", Name: "calculator", Status: "running"},
	}
	t.Run("text, reasoning and tools", func(t *testing.T) {
		m := views.Message{Seq: 4, Role: "assistant", HTML: "<p>Let me check.</p>", Reasoning: "first\n  " + hostile, Tools: cards}
		els := parseFragment(t, views.MessageItem(m))
		noMarkup(t, "message", els...)
		art := one(t, "article", byTag("article"), els...)
		kids := children(art)
		var order []string
		for _, k := range kids {
			order = append(order, strings.Fields(classOf(k))[0])
		}
		if got := strings.Join(order, " "); got != "reasoning md tool-cards" {
			t.Errorf("article children = %s, want reasoning md tool-cards", got)
		}
		r := one(t, "reasoning", byAttr("data-testid", "reasoning"), art)
		if r.Data != "details" || isOpen(r) {
			t.Errorf("reasoning is <%s> open=%v, want a closed details", r.Data, isOpen(r))
		}
		if got := text(one(t, "summary", byTag("summary"), r)); got != "Reasoning" {
			t.Errorf("summary = %q", got)
		}
		if got := text(one(t, "reasoning text", byClass("reasoning-text"), r)); got != m.Reasoning {
			t.Errorf("reasoning text = %q, want %q", got, m.Reasoning)
		}
		got := findAll(byAttr("data-testid", "tool-card"), art)
		if len(got) != 2 || idOf(got[0]) != "tool-c1" || idOf(got[1]) != "tool-c2" {
			t.Fatalf("cards %d", len(got))
		}
	})
	t.Run("tools only", func(t *testing.T) {
		els := parseFragment(t, views.MessageItem(views.Message{Seq: 5, Role: "assistant", Tools: cards[:1]}))
		if n := len(findAll(byClass("md"), els...)); n != 0 {
			t.Errorf("a step with no text renders %d .md", n)
		}
		if n := len(findAll(byAttr("data-testid", "reasoning"), els...)); n != 0 {
			t.Errorf("no reasoning, but %d boxes", n)
		}
		one(t, "card", byAttr("id", "tool-c1"), els...)
	})
	t.Run("plain message is unchanged", func(t *testing.T) {
		els := parseFragment(t, views.MessageItem(views.Message{Seq: 6, Role: "assistant", HTML: "<p>x</p>"}))
		if n := len(findAll(func(n *html.Node) bool { return hasClass(n, "reasoning") || hasClass(n, "tool-cards") }, els...)); n != 0 {
			t.Errorf("%d reasoning/tool elements", n)
		}
	})
}

func TestLiveMessageReasoning(t *testing.T) {
	t.Run("empty", func(t *testing.T) {
		out := render(t, views.LiveMessageItem(views.LiveMessage{}))
		// CSS hides the box with :empty, so the text div must have no whitespace.
		if !strings.Contains(out, `id="msg-live-reasoning"></div>`) {
			t.Errorf("empty #msg-live-reasoning is not empty: %s", out)
		}
		els := parseFragment(t, views.LiveMessageItem(views.LiveMessage{}))
		live := byID(t, "msg-live", els...)
		box := byID(t, "msg-live-reasoning-box", live)
		if box.Data != "details" || isOpen(box) || !hasClass(box, "reasoning") {
			t.Errorf("box <%s class=%q> open=%v", box.Data, classOf(box), isOpen(box))
		}
		byID(t, "msg-live-reasoning", box)
		byID(t, "msg-live-blocks", live)
		byID(t, "msg-live-tail", live)
		kids := children(live)
		if idOf(kids[0]) != "msg-live-reasoning-box" || !hasClass(kids[1], "md") {
			t.Errorf("the reasoning box is not above the answer")
		}
	})
	t.Run("escaped", func(t *testing.T) {
		els := parseFragment(t, views.LiveMessageItem(views.LiveMessage{Reasoning: hostile}))
		noMarkup(t, "live", els...)
		if got := text(byID(t, "msg-live-reasoning", els...)); got != hostile {
			t.Errorf("reasoning = %q", got)
		}
	})
}

// TestAgentFramesAreOOB is TestFramesAreOOB for the agent frames.
func TestAgentFramesAreOOB(t *testing.T) {
	step := views.Message{Seq: 3, Role: "assistant", Tools: []views.ToolCard{{ID: "c1", Name: "clock", Status: "running"}}}
	tests := []struct {
		name    string
		c       templ.Component
		want    []string
		wantIDs []string
	}{
		{"assistant step", views.FrameAssistantStep(step, views.LiveMessage{Model: "m1"}), []string{"outerHTML:#msg-live", "beforeend:#messages"}, []string{"msg-3", ""}},
		{"tool card", views.FrameToolCard(views.ToolCard{ID: "a b", Name: "clock", Status: "ok"}), []string{"morph"}, []string{"tool-x-612062"}},
		{"live reasoning", views.FrameLiveReasoning("thinking"), []string{"beforeend:#msg-live-reasoning"}, []string{""}},
		{"task panel", views.FrameTaskPanel(views.TaskPanel{SessionID: "s1", Goal: "g"}), []string{"morph"}, []string{"task-panel"}},
		{"context meter", views.FrameContextMeter(views.ContextMeter{Total: 1, Limit: 10}), []string{"morph"}, []string{"context-meter"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			els := parseFragment(t, tt.c)
			if len(els) != len(tt.want) {
				t.Fatalf("%d top-level elements, want %d: %s", len(els), len(tt.want), render(t, tt.c))
			}
			for i, el := range els {
				wantAttr(t, el, "hx-swap-oob", tt.want[i])
				if idOf(el) != tt.wantIDs[i] {
					t.Errorf("element %d id=%q, want %q", i, idOf(el), tt.wantIDs[i])
				}
			}
		})
	}
}

func TestFrameAssistantStep(t *testing.T) {
	step := views.Message{Seq: 3, Role: "assistant", HTML: "<p>Checking.</p>", Reasoning: "r", Model: "m1", CreatedAt: created,
		Tools: []views.ToolCard{{ID: "c1", Name: "clock", Status: "running"}}}
	out := render(t, views.FrameAssistantStep(step, views.LiveMessage{Model: "m1"}))
	item := render(t, views.MessageItem(step))
	first := strings.Replace(out, ` hx-swap-oob="outerHTML:#msg-live"`, "", 1)
	if !strings.HasPrefix(first, item) {
		t.Errorf("the first element minus hx-swap-oob is not MessageItem:\n%s\n%s", out, item)
	}
	els := parseFragment(t, views.FrameAssistantStep(step, views.LiveMessage{Model: "m1"}))
	kids := children(els[1])
	if len(kids) != 1 || idOf(kids[0]) != "msg-live" {
		t.Fatalf("the appended element is not one #msg-live")
	}
	byID(t, "msg-live-reasoning", kids[0])
	byID(t, "tool-c1", els[0])
}

func TestFrameLiveReasoningEscapes(t *testing.T) {
	for _, delta := range []string{" next words\n", hostile, "a & b < c"} {
		out := render(t, views.FrameLiveReasoning(delta))
		els := parseFragment(t, views.FrameLiveReasoning(delta))
		noMarkup(t, "reasoning frame", els...)
		if got := text(els[0]); got != delta {
			t.Errorf("frame text = %q, want %q (%s)", got, delta, out)
		}
		if len(children(els[0])) != 0 {
			t.Errorf("frame has element children: %s", out)
		}
	}
}

func TestTaskPanelBox(t *testing.T) {
	form := func(t *testing.T, els []*html.Node, sessionPath string) *html.Node {
		t.Helper()
		f := one(t, "task form", byAttr("data-testid", "task-form"), els...)
		wantAttr(t, f, "hx-post", sessionPath+"/task")
		wantAttr(t, f, "hx-target", "#task-panel")
		wantAttr(t, f, "hx-swap", "outerHTML")
		for _, name := range []string{"goal", "stage", "params"} {
			one(t, "field "+name, byAttr("name", name), f)
		}
		if ta := one(t, "params", byAttr("name", "params"), f); ta.Data != "textarea" {
			t.Errorf("params is <%s>", ta.Data)
		}
		one(t, "save", byAttr("data-testid", "task-save"), f)
		return f
	}
	t.Run("empty", func(t *testing.T) {
		els := parseFragment(t, views.TaskPanelBox(views.TaskPanel{SessionID: "s1"}))
		aside := els[0]
		if aside.Data != "aside" || idOf(aside) != "task-panel" {
			t.Fatalf("<%s id=%q>", aside.Data, idOf(aside))
		}
		wantAttr(t, aside, "data-testid", "task-panel")
		if got := text(one(t, "empty", byAttr("data-testid", "task-empty"), aside)); got != "No task yet. The assistant can set one with task_update, or you can set it here." {
			t.Errorf("empty text = %q", got)
		}
		for _, id := range []string{"task-goal", "task-stage", "task-params", "form-error"} {
			if n := len(findAll(byAttr("data-testid", id), aside)); n != 0 {
				t.Errorf("empty panel shows %s", id)
			}
		}
		f := form(t, els, "/s/s1")
		if !isOpen(f.Parent) {
			t.Error("the form of an empty panel is collapsed")
		}
	})
	t.Run("filled", func(t *testing.T) {
		tp := views.TaskPanel{SessionID: "a/b", Goal: "Plan " + hostile, Stage: "booking", Params: "{\n  \"city\": \"<Oslo>\"\n}", UpdatedAt: created}
		els := parseFragment(t, views.TaskPanelBox(tp))
		noMarkup(t, "task panel", els...)
		if got := text(one(t, "goal", byAttr("data-testid", "task-goal"), els...)); got != tp.Goal {
			t.Errorf("goal = %q", got)
		}
		if got := text(one(t, "stage", byAttr("data-testid", "task-stage"), els...)); got != "booking" {
			t.Errorf("stage = %q", got)
		}
		pre := one(t, "params", byAttr("data-testid", "task-params"), els...)
		if pre.Data != "pre" || text(pre) != tp.Params || pre.Parent.Data != "details" || isOpen(pre.Parent) {
			t.Errorf("params <%s> %q in <%s> open=%v", pre.Data, text(pre), pre.Parent.Data, isOpen(pre.Parent))
		}
		tm := one(t, "time", byTag("time"), one(t, "updated", byAttr("data-testid", "task-updated"), els...))
		wantAttr(t, tm, "datetime", "2025-03-01T12:00:00Z")
		f := form(t, els, "/s/a%2Fb")
		if isOpen(f.Parent) {
			t.Error("the edit form of a set task is open")
		}
		wantAttr(t, one(t, "goal input", byAttr("name", "goal"), f), "value", tp.Goal)
		if got := text(one(t, "params input", byAttr("name", "params"), f)); got != tp.Params {
			t.Errorf("params field = %q", got)
		}
	})
	t.Run("error", func(t *testing.T) {
		tp := views.TaskPanel{SessionID: "s1", Goal: "g", Params: "{bad", Error: "params: not a JSON object"}
		els := parseFragment(t, views.TaskPanelBox(tp))
		e := one(t, "error", byAttr("data-testid", "form-error"), els...)
		if text(e) != tp.Error {
			t.Errorf("error = %q", text(e))
		}
		f := form(t, els, "/s/s1")
		if !isOpen(f.Parent) {
			t.Error("the form is collapsed after a failed save")
		}
		if got := text(one(t, "params input", byAttr("name", "params"), f)); got != "{bad" {
			t.Errorf("params field = %q, want the submitted value", got)
		}
	})
}

func TestContextMeterBox(t *testing.T) {
	t.Run("nil", func(t *testing.T) {
		els := parseFragment(t, views.ContextMeterBox(nil))
		if len(els) != 1 || idOf(els[0]) != "context-meter" {
			t.Fatalf("placeholder: %s", render(t, views.ContextMeterBox(nil)))
		}
		wantAttr(t, els[0], "data-testid", "context-meter")
		if !strings.Contains(text(els[0]), "No context yet") {
			t.Errorf("placeholder text = %q", text(els[0]))
		}
	})
	t.Run("tool rows", func(t *testing.T) {
		// Issue 10 item 5: the definitions are not labelled "Tool results".
		m := &views.ContextMeter{Limit: 1000, Total: 700, Zones: []views.MeterZone{
			{Name: "tool_results", Tokens: 0}, {Name: "tools", Tokens: 692}, {Name: "dropped", Tokens: 8}}}
		labels := map[string]string{}
		for _, z := range findAll(byAttr("data-testid", "meter-zone"), parseFragment(t, views.ContextMeterBox(m))...) {
			name, _ := attr(z, "data-zone")
			labels[name] = text(one(t, "name", byClass("zone-name"), z))
		}
		if labels["tool_results"] != "Tool results" || labels["tools"] != "Tool definitions" || labels["dropped"] != "Dropped (not summarised)" {
			t.Errorf("labels %v", labels)
		}
	})
	t.Run("zones", func(t *testing.T) {
		m := &views.ContextMeter{Limit: 120000, Total: 5234, Zones: []views.MeterZone{
			{Name: "pinned", Tokens: 640, Budget: 800},
			{Name: "summary", Tokens: 520, Budget: 500},
			{Name: "history", Tokens: 3074},
			{Name: "tools", Tokens: 1000, Budget: 0},
		}}
		els := parseFragment(t, views.ContextMeterBox(m))
		if _, ok := attr(els[0], "hx-swap-oob"); ok {
			t.Error("ContextMeterBox carries hx-swap-oob")
		}
		total := one(t, "total", byAttr("data-testid", "meter-total"), els...)
		if got := text(one(t, "usage", byClass("zone-usage"), total)); got != "5,234 / 120,000 tokens" {
			t.Errorf("total = %q", got)
		}
		mt := one(t, "total meter", byTag("meter"), total)
		wantAttr(t, mt, "max", "120000")
		wantAttr(t, mt, "value", "5234")
		zones := findAll(byAttr("data-testid", "meter-zone"), els...)
		if len(zones) != 4 {
			t.Fatalf("%d zones", len(zones))
		}
		wants := []struct{ zone, usage, max string }{
			{"pinned", "640 / 800", "800"},
			{"summary", "520 / 500", "500"},
			{"history", "3,074", "120000"},
			{"tools", "1,000", "120000"},
		}
		for i, w := range wants {
			z := zones[i]
			wantAttr(t, z, "data-zone", w.zone)
			if got := text(one(t, "usage", byClass("zone-usage"), z)); got != w.usage {
				t.Errorf("%s usage = %q, want %q", w.zone, got, w.usage)
			}
			zm := one(t, "meter", byTag("meter"), z)
			wantAttr(t, zm, "max", w.max)
			if _, ok := attr(zm, "aria-label"); !ok {
				t.Errorf("%s meter has no label", w.zone)
			}
			if got := hasClass(z, "over"); got != (w.zone == "summary") {
				t.Errorf("%s over = %v", w.zone, got)
			}
		}
	})
}

func TestChatPageSidePanel(t *testing.T) {
	c := sampleChat()
	doc := parsePage(t, views.ChatPage(page, c))
	chat := byID(t, "chat", doc)
	side := one(t, "side panel", byAttr("data-testid", "side-panel"), chat)
	if side.Data != "details" || isOpen(side) {
		t.Errorf("side panel <%s> open=%v, want a closed details (app.js opens it on wide screens)", side.Data, isOpen(side))
	}
	if _, ok := attr(side, "data-side"); !ok {
		t.Error("side panel lacks data-side")
	}
	if sum := children(side)[0]; sum.Data != "summary" || text(sum) != "Task & context" {
		t.Errorf("first child <%s> %q, want the summary Task & context", sum.Data, text(sum))
	}
	panel := byID(t, "task-panel", side)
	byID(t, "context-meter", side)
	// The panel posts to the chat's session even when the web layer left SessionID empty.
	one(t, "task form", byAttr("hx-post", "/s/s1/task"), panel)
	var order []string
	for _, k := range children(chat) {
		if id := idOf(k); id != "" {
			order = append(order, id)
		} else {
			order = append(order, k.Data)
		}
	}
	if got := strings.Join(order, " "); got != "notice messages run-state consent-requests send-result details composer" {
		t.Errorf("#chat children = %s", got)
	}
	if len(findAll(byAttr("data-testid", "tool-card"), doc)) != 1 || len(findAll(byAttr("data-testid", "reasoning"), doc)) != 2 {
		t.Error("sample chat's tool card or reasoning boxes missing")
	}
}
