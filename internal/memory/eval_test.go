package memory

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"testing"

	"atrium/internal/store"
)

// evalSet is testdata/eval.json: hand-written cases of one user's memories and
// paraphrased questions, each naming the memory it should find.
type evalSet struct {
	Distractors []string `json:"distractors"`
	Cases       []struct {
		Name     string            `json:"name"`
		Lang     string            `json:"lang"` // en, zh or mixed
		Memories map[string]string `json:"memories"`
		Other    []string          `json:"other"` // another user's memories
		Queries  []struct {
			Q    string `json:"q"`
			Want string `json:"want"`
			Tag  string `json:"tag"` // shared, morph or noshare
		} `json:"queries"`
	} `json:"cases"`
}

// evalGoal is the recall@5 the offline embedder must reach on questions that
// share a word (or CJK bigram, or an inflection of a word) with their memory.
const evalGoal = 0.9

// surfaceTerms are text's words as written (no stemming) and its CJK bigrams:
// what "shares a word" means for checking the tags.
func surfaceTerms(text string) map[string]bool {
	out := map[string]bool{}
	for _, t := range tokenize(text) {
		r := []rune(t.text)
		switch {
		case !t.cjk:
			if !stopwords[t.text] {
				out[t.text] = true
			}
		case len(r) == 1:
			out[t.text] = true
		default:
			for i := 0; i+1 < len(r); i++ {
				out[string(r[i:i+2])] = true
			}
		}
	}
	return out
}

func shares(a, b map[string]bool) bool {
	for t := range a {
		if b[t] {
			return true
		}
	}
	return false
}

type evalScore struct{ n, at1, at5 int }

func (s *evalScore) add(pos int) {
	s.n++
	if pos == 0 {
		s.at1++
	}
	if pos >= 0 && pos < 5 {
		s.at5++
	}
}

func (s evalScore) r5() float64 { return float64(s.at5) / float64(max(s.n, 1)) }

func (s evalScore) String() string {
	return fmt.Sprintf("n=%3d  recall@1 %.3f  recall@5 %.3f", s.n, float64(s.at1)/float64(max(s.n, 1)), s.r5())
}

// TestEval runs testdata/eval.json against a fresh database with the offline
// embedder. Each case gets a fresh user holding the case's memories and the
// common distractors, and a second user holding exact copies of them plus
// near-duplicates ("other"), which must never be returned.
func TestEval(t *testing.T) {
	raw, err := os.ReadFile("testdata/eval.json")
	ok(t, err)
	var set evalSet
	ok(t, json.Unmarshal(raw, &set))
	if len(set.Cases) < 60 {
		t.Fatalf("%d cases, want at least 60", len(set.Cases))
	}
	f := newFixture(t)
	ctx := context.Background()
	newUser := func(name string) int64 {
		u := store.User{Username: name, PasswordHash: "h", Role: store.RoleUser}
		ok(t, f.db.CreateUser(ctx, &u))
		return u.ID
	}
	groups := map[string]*evalScore{}
	score := func(g string) *evalScore {
		if groups[g] == nil {
			groups[g] = &evalScore{}
		}
		return groups[g]
	}
	var misses []string
	for ci, c := range set.Cases {
		owner, other := newUser(fmt.Sprint("eval", ci)), newUser(fmt.Sprint("evalother", ci))
		keys := make([]string, 0, len(c.Memories))
		for k := range c.Memories {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		idOf := map[string]string{}
		for _, k := range keys {
			idOf[k] = f.save(t, owner, c.Memories[k]).ID
		}
		for _, d := range set.Distractors {
			f.save(t, owner, d)
		}
		foreign := map[string]bool{}
		for _, s := range append(slices.Clone(c.Other), slices.Collect(mapValues(c.Memories))...) {
			foreign[f.save(t, other, s).ID] = true
		}
		for _, q := range c.Queries {
			text, found := c.Memories[q.Want]
			if !found {
				t.Fatalf("%s: %q wants unknown memory %q", c.Name, q.Q, q.Want)
			}
			// Keep the tags honest: "shared" must share a word as written,
			// "noshare" not even an index term.
			switch q.Tag {
			case "shared":
				if !shares(surfaceTerms(q.Q), surfaceTerms(text)) {
					t.Errorf("%s: %q is tagged shared but shares no word with %q", c.Name, q.Q, text)
				}
			case "noshare":
				if shares(set2(Terms(q.Q)), set2(Terms(text))) {
					t.Errorf("%s: %q is tagged noshare but shares a term with %q", c.Name, q.Q, text)
				}
			case "morph":
			default:
				t.Fatalf("%s: unknown tag %q", c.Name, q.Tag)
			}
			res := must(f.svc.Search(ctx, owner, q.Q, 5))
			for _, h := range res.Hits {
				if h.OwnerID != owner || foreign[h.ID] {
					t.Errorf("%s: %q returned another user's memory %q", c.Name, q.Q, h.Text)
				}
			}
			pos := slices.Index(ids(res.Hits), idOf[q.Want])
			score("all").add(pos)
			score(c.Lang).add(pos)
			score("tag " + q.Tag).add(pos)
			if q.Tag == "noshare" {
				score("no-shared-word").add(pos)
			} else {
				score("shares-a-word").add(pos)
			}
			if pos != 0 {
				rank := "missed"
				if pos > 0 {
					rank = fmt.Sprint("rank ", pos+1)
				}
				misses = append(misses, fmt.Sprintf("%-12s %-8s %-7s %q -> %q; got %q", c.Name, q.Tag, rank, q.Q, text, hitTexts(res.Hits)))
			}
		}
	}
	for _, m := range misses {
		t.Log("not first:", m)
	}
	for _, g := range []string{"all", "en", "zh", "mixed", "shares-a-word", "no-shared-word", "tag shared", "tag morph", "tag noshare"} {
		t.Logf("%-15s %v", g, *score(g))
	}
	if r := score("shares-a-word").r5(); r < evalGoal {
		t.Errorf("recall@5 over questions sharing a word = %.3f, want ≥ %.2f", r, evalGoal)
	}
}

func set2(ts []string) map[string]bool {
	out := map[string]bool{}
	for _, t := range ts {
		out[t] = true
	}
	return out
}

func mapValues(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// TestStem pins the inflections the eval relies on: each pair folds together.
func TestStem(t *testing.T) {
	for _, p := range [][2]string{{"cats", "cat"}, {"preferred", "prefer"}, {"running", "run"}, {"saving", "save"},
		{"allergies", "allergy"}, {"tomatoes", "tomato"}, {"emojis", "emoji"}, {"meetings", "meeting"},
		{"kilometres", "kilometers"}, {"replies", "reply"}, {"watches", "watch"}, {"growing", "grow"}} {
		if a, b := stem(p[0]), stem(p[1]); a != b {
			t.Errorf("stem(%q) = %q, stem(%q) = %q", p[0], a, p[1], b)
		}
	}
	for _, w := range []string{"class", "bus", "shoe", "thing", "5ks", "café"} {
		if s := stem(w); s != w && w != "shoe" {
			t.Errorf("stem(%q) = %q, want it unchanged", w, s)
		}
	}
}
