package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"atrium/internal/agent"
	"atrium/internal/llm/llmtest"
	"atrium/internal/memory"
	"atrium/internal/store"
)

// extractionCase is one entry of "extraction" in internal/memory/testdata/eval.json
// (its "extraction_about" says what the fields mean).
type extractionCase struct {
	Name     string `json:"name"`
	Lang     string `json:"lang"`
	Kind     string `json:"kind"`
	Memories []struct {
		Kind string `json:"kind"`
		Text string `json:"text"`
	} `json:"memories"`
	Message string `json:"message"`
	Reply   string `json:"reply"`
	Tool    *struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"tool"`
	Answer []struct {
		Op     string `json:"op"`
		Kind   string `json:"kind"`
		Target *int   `json:"target"`
		Text   string `json:"text"`
	} `json:"answer"`
	Want []string `json:"want"`
}

// Goals of issue 8 for the extraction.
const (
	updatesReplacedGoal = 0.95
	junkWritesGoal      = 0
)

// TestExtractionEval runs every extraction case through the real path (a turn of the
// agent with extraction on, the fake model scripting the extractor's JSON answer, the
// memory service on a real database) and prints the share of updates that replaced
// the old fact and the junk writes: memories written or changed that the case does not
// want or that say what another memory says (a duplicate, a copied system prompt, tool
// output or assistant statement, a secret, an injection). Goals: ≥ 95 % and 0.
//
//	go test ./internal/agent -run TestExtractionEval -v
func TestExtractionEval(t *testing.T) {
	raw, err := os.ReadFile("../memory/testdata/eval.json")
	if err != nil {
		t.Fatal(err)
	}
	var set struct {
		Extraction []extractionCase `json:"extraction"`
	}
	if err := json.Unmarshal(raw, &set); err != nil {
		t.Fatal(err)
	}
	if len(set.Extraction) < 40 {
		t.Fatalf("%d extraction cases", len(set.Extraction))
	}
	h := newHarness(t, options{cfg: agent.Config{ExtractMemories: true}})
	ctx := context.Background()

	var mu sync.Mutex
	var cur *extractionCase
	h.llm.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		mu.Lock()
		c := cur
		mu.Unlock()
		if strings.Contains(req.Messages[0].Content, "long-term memory") {
			return llmtest.Reply{Text: []string{scriptedAnswer(c, req.Messages[1].Content)}}
		}
		last := req.Messages[len(req.Messages)-1]
		if c.Tool != nil && last.Role != "tool" {
			return llmtest.Reply{ToolCalls: calls(llmtest.ToolCall{ID: "t1", Name: c.Tool.Name, Arguments: c.Tool.Arguments})}
		}
		return llmtest.Reply{Text: []string{cmpOr(c.Reply, "OK.")}}
	})

	type tally struct{ cases, replaced, junk, lost int }
	byKind := map[string]*tally{}
	var total tally
	runs := 0
	for i := range set.Extraction {
		c := &set.Extraction[i]
		u := &store.User{Username: "eval" + strconv.Itoa(i), PasswordHash: "x", Role: store.RoleUser}
		if err := h.db.CreateUser(ctx, u); err != nil {
			t.Fatal(err)
		}
		s := &store.Session{ID: "eval-" + strconv.Itoa(i), OwnerID: u.ID}
		if err := h.db.CreateSession(ctx, s); err != nil {
			t.Fatal(err)
		}
		seeded := map[string]string{} // id → text
		for _, m := range c.Memories {
			saved, err := h.memory.Save(ctx, u.ID, m.Kind, m.Text, memory.Source{Kind: memory.SourceManual}, 0.9)
			if err != nil {
				t.Fatalf("%s: seed: %v", c.Name, err)
			}
			seeded[saved.ID] = saved.Text
		}
		mu.Lock()
		cur = c
		mu.Unlock()
		if err := h.agent.Send(ctx, *s, c.Message); err != nil {
			t.Fatal(err)
		}
		runs++
		h.sink.waitFor(t, agent.EventRunEnded, runs)

		list, err := h.memory.List(ctx, u.ID)
		if err != nil {
			t.Fatal(err)
		}
		var texts []string
		seen := map[string]int{}
		for _, m := range list {
			texts = append(texts, m.Text)
			seen[m.Text]++
		}
		junk := 0
		for _, m := range list {
			if old, ok := seeded[m.ID]; (!ok || old != m.Text) && (!slices.Contains(c.Want, m.Text) || seen[m.Text] > 1) {
				junk++ // written or changed by the turn, and not wanted, or a second copy
			}
		}
		lost := 0
		for _, w := range c.Want {
			if !slices.Contains(texts, w) {
				lost++
			}
		}
		k := byKind[c.Kind]
		if k == nil {
			k = &tally{}
			byKind[c.Kind] = k
		}
		for _, tl := range []*tally{k, &total} {
			tl.cases++
			tl.junk += junk
			tl.lost += lost
		}
		if c.Kind == "update" {
			gone := true
			for _, m := range c.Memories { // the old facts: what the case does not want kept
				if !slices.Contains(c.Want, m.Text) && slices.Contains(texts, m.Text) {
					gone = false
				}
			}
			if gone && lost == 0 && junk == 0 {
				k.replaced++
				total.replaced++
			} else {
				t.Logf("%s: update did not replace the old fact: memories %q, want %q", c.Name, texts, c.Want)
			}
		}
		if junk > 0 || lost > 0 {
			t.Logf("%s (%s): memories %q, want %q (%d junk, %d lost)", c.Name, c.Kind, texts, c.Want, junk, lost)
		}
	}
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		tl := byKind[k]
		fmt.Printf("extraction eval: %-10s %2d cases, %d junk writes, %d wanted memories missing\n", k, tl.cases, tl.junk, tl.lost)
	}
	upd := byKind["update"]
	share := float64(upd.replaced) / float64(max(upd.cases, 1))
	fmt.Printf("extraction eval: %d cases; updates that replaced the old fact %d/%d = %.1f%% (goal ≥ %.0f%%); junk writes %d (goal %d); wanted memories missing %d\n",
		total.cases, upd.replaced, upd.cases, 100*share, 100*updatesReplacedGoal, total.junk, junkWritesGoal, total.lost)
	if share < updatesReplacedGoal {
		t.Errorf("updates that replaced the old fact: %.3f, goal %.2f", share, updatesReplacedGoal)
	}
	if total.junk > junkWritesGoal {
		t.Errorf("junk writes: %d, goal %d", total.junk, junkWritesGoal)
	}
}

// scriptedAnswer is the extractor's JSON answer for case c: its actions, with each
// target memory named by the number the prompt showed it under (a memory that was not
// shown gets a number past the list, as a model guessing would).
func scriptedAnswer(c *extractionCase, prompt string) string {
	type action struct {
		Op   string `json:"op"`
		Kind string `json:"kind,omitempty"`
		N    int    `json:"n,omitempty"`
		Text string `json:"text,omitempty"`
	}
	var out struct {
		Actions []action `json:"actions"`
	}
	out.Actions = []action{}
	for _, a := range c.Answer {
		act := action{Op: a.Op, Kind: a.Kind, Text: a.Text}
		if a.Op == "add" {
			act.Kind = cmpOr(a.Kind, memory.KindFact)
		} else {
			act.Kind = ""
		}
		if a.Target != nil {
			act.N = 99
			for _, line := range strings.Split(prompt, "\n") {
				n, rest, ok := strings.Cut(line, ". ")
				if ok && strings.HasSuffix(rest, "] "+c.Memories[*a.Target].Text) {
					act.N, _ = strconv.Atoi(n)
				}
			}
		}
		out.Actions = append(out.Actions, act)
	}
	b, _ := json.Marshal(out)
	return string(b)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
