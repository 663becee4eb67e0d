package agent_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"atrium/internal/agent"
	"atrium/internal/contextwin"
	"atrium/internal/llm/llmtest"
	"atrium/internal/providers"
	"atrium/internal/store"
)

// factRE finds the facts the small-window test states ("my cat is Pixel").
var factRE = regexp.MustCompile(`my \w+ is \w+`)

// faithfulModel answers chat requests with a ~600-word reply and summary folds with
// every fact found in the fold prompt.
var faithfulModel = llmtest.FaithfulModel(factRE, strings.Repeat("the quick brown fox jumps over the lazy dog and ", 55))

// TestSmallWindowKeepsEveryFactReachable is issue 10 item 1: with short facts and
// ~600-word replies, a turn that does not fit the window must be in the summary or in
// the request (or reported dropped), at every window the config allows.
func TestSmallWindowKeepsEveryFactReachable(t *testing.T) {
	pets := []string{"my cat is Pixel", "my dog is Rex", "my parrot is Kiwi", "my hamster is Nibbles",
		"my rabbit is Clover", "my goldfish is Bubbles", "my turtle is Shelly", "my pony is Comet"}
	for _, window := range []int{2048, 4096, 8192, 32768} {
		t.Run(fmt.Sprint(window), func(t *testing.T) {
			h := newHarness(t, options{window: window})
			h.llm.SetHandler(faithfulModel)
			var said []string
			questions := append(slices.Clone(pets), "What are my pets called?")
			for i, q := range questions {
				before := len(h.llm.Requests())
				h.send(t, "Note: "+q+".")
				h.sink.waitFinal(t, i+1)
				h.waitIdle(t)
				// The reply's request: the last non-fold request of this turn.
				var reply *llmtest.Recorded
				for _, r := range h.llm.Requests()[before:] {
					if !llmtest.IsFold(r.Chat) {
						reply = &r
						break
					}
				}
				if reply == nil {
					t.Fatalf("turn %d: no reply request", i+1)
				}
				sent := strings.Join(contents(*reply), "\n")
				// The summarizer works, so nothing may be dropped: every fact is in
				// the request, verbatim or in the summary.
				rep := h.sink.waitFor(t, agent.EventContext, i+1).Report
				for _, f := range said {
					if !strings.Contains(sent, f) {
						t.Errorf("window %d, turn %d: %q is in neither the request nor the summary (dropped %v)", window, i+1, f, rep.Dropped)
					}
				}
				if len(rep.Dropped) > 0 {
					t.Errorf("window %d, turn %d: messages %v dropped although the fold works", window, i+1, rep.Dropped)
				}
				said = append(said, q)
			}
		})
	}
}

// TestSmallWindowFailedFoldIsShownDropped: when the summary fold fails, the turns
// that do not fit are reported dropped, in the trace's cut list and as the context
// meter's "dropped" zone, instead of vanishing.
func TestSmallWindowFailedFoldIsShownDropped(t *testing.T) {
	h := newHarness(t, options{window: 2048})
	h.llm.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		if strings.HasPrefix(req.Messages[0].Content, "You maintain the rolling summary") {
			return llmtest.Reply{Status: 500}
		}
		return faithfulModel(req)
	})
	for i, q := range []string{"my cat is Pixel", "my dog is Rex", "What are my pets called?"} {
		h.send(t, q)
		h.sink.waitFinal(t, i+1)
		h.waitIdle(t)
	}
	rep := h.sink.waitFor(t, agent.EventContext, 3).Report
	if !slices.Contains(rep.Dropped, 1) {
		t.Fatalf("dropped %v, want the first turn (seq 1) reported dropped", rep.Dropped)
	}
	var zone bool
	for _, z := range rep.Zones {
		zone = zone || (z.Name == "dropped" && z.Tokens > 0)
	}
	var cut bool
	for _, c := range rep.Cut {
		cut = cut || (c.Seq == 1 && strings.HasPrefix(c.Reason, "dropped:"))
	}
	if !zone || !cut {
		t.Errorf("dropped zone %v, cut reason %v: %+v %+v", zone, cut, rep.Zones, rep.Cut)
	}
}

// TestModelOwnWindowBoundsContext: a model with its own window (typed with the
// provider's models, or reported by the endpoint) bounds the context by that window;
// a model of the same provider without one uses the instance's.
func TestModelOwnWindowBoundsContext(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, options{})
	h.llm.SetHandler(faithfulModel)
	ps, err := h.db.ListProviders(ctx)
	if err != nil || len(ps) != 1 {
		t.Fatalf("providers %v, %v", ps, err)
	}
	p := ps[0]
	p.Models = []string{"fake-model", "big-model"}
	p.Windows = map[string]store.ModelWindow{"fake-model": {Tokens: 4096}}
	if err := h.db.UpdateProvider(ctx, p); err != nil {
		t.Fatal(err)
	}
	total := func(rep *contextwin.Report) contextwin.Zone {
		for _, z := range rep.Zones {
			if z.Name == contextwin.ZoneTotal {
				return z
			}
		}
		t.Fatalf("no total zone in %+v", rep.Zones)
		return contextwin.Zone{}
	}
	turn := 0
	for range 6 {
		turn++
		h.send(t, fmt.Sprintf("Note %d: my cat is Pixel.", turn))
		h.sink.waitFinal(t, turn)
		h.waitIdle(t)
		z := total(h.sink.waitFor(t, agent.EventContext, turn).Report)
		if z.Budget != 4096-1024 || z.Tokens > z.Budget {
			t.Fatalf("turn %d on the 4096-token model: %d of %d tokens, want a budget of %d", turn, z.Tokens, z.Budget, 4096-1024)
		}
	}
	// The same chat on the provider's other model: the instance's 32k window.
	if err := h.db.SetSessionModel(ctx, h.session.ID, h.session.OwnerID, providers.Value(p.ID, "big-model")); err != nil {
		t.Fatal(err)
	}
	h.session.Model = providers.Value(p.ID, "big-model")
	turn++
	h.send(t, "And now?")
	h.sink.waitFinal(t, turn)
	h.waitIdle(t)
	if z := total(h.sink.waitFor(t, agent.EventContext, turn).Report); z.Budget != 32768-4096 {
		t.Fatalf("model without its own window: budget %d, want %d", z.Budget, 32768-4096)
	}
}
