package contextwin_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"atrium/internal/contextwin"
	"atrium/internal/llm"
	"atrium/internal/store"

	"github.com/tiktoken-go/tokenizer"
)

func TestTokenizer(t *testing.T) {
	tok := contextwin.NewTokenizer()
	for text, want := range map[string]int{"": 0, "hello world": 2, "tiktoken is great!": 6} {
		if got := tok.Count(text); got != want {
			t.Errorf("Count(%q) = %d, want %d", text, got, want)
		}
	}
	// Concurrent use (run with -race).
	raw, err := tokenizer.Get(tokenizer.Cl100kBase)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			s := strings.Repeat("concurrent counting ", 50+i)
			want, _ := raw.Count(s)
			for range 3 { // the second and third are cached
				if n := tok.Count(s); n != want {
					t.Errorf("Count = %d, want %d", n, want)
				}
			}
		})
	}
	wg.Wait()
}

func TestFold(t *testing.T) {
	tok := contextwin.NewTokenizer()
	b := contextwin.DefaultBudgets()
	b.Summary = 20
	turns := keyed([]store.Message{user(11, "Let's use PostgreSQL."), asst(12, "", "c1"), result(13, "c1", "42"), asst(14, "Agreed, PostgreSQL it is.")})
	long := strings.Repeat("The user chose PostgreSQL for storage. ", 10) // ~70 tokens
	fits := "The user chose PostgreSQL. The calculator gave 42."

	tests := []struct {
		name    string
		answers []string
		errs    []error
		want    string
		wantErr bool
		calls   int
	}{
		{name: "success", answers: []string{fits}, want: fits, calls: 1},
		{name: "too long, then short enough", answers: []string{long, fits}, want: fits, calls: 2},
		{name: "too long twice: cut at a sentence", answers: []string{long, long}, want: strings.TrimSpace(strings.Repeat("The user chose PostgreSQL for storage. ", 2)), calls: 2},
		{name: "too long, then the retry fails: the first answer is cut", answers: []string{long, ""}, errs: []error{nil, errors.New("boom")}, want: strings.TrimSpace(strings.Repeat("The user chose PostgreSQL for storage. ", 2)), calls: 2},
		{name: "failure", answers: []string{""}, errs: []error{errors.New("model down")}, wantErr: true, calls: 1},
		{name: "empty answer", answers: []string{"  "}, wantErr: true, calls: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got [][]llm.Message
			sum := func(_ context.Context, msgs []llm.Message) (string, error) {
				i := len(got)
				got = append(got, msgs)
				var err error
				if i < len(tc.errs) {
					err = tc.errs[i]
				}
				return tc.answers[i], err
			}
			s, err := contextwin.Fold(context.Background(), sum, "The user likes tea.", turns, b, tok)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if len(got) != tc.calls {
				t.Errorf("%d summarizer calls, want %d", len(got), tc.calls)
			}
			if s != tc.want {
				t.Errorf("summary %q, want %q", s, tc.want)
			}
			if !tc.wantErr && tok.Count(s) > b.Summary {
				t.Errorf("summary has %d tokens, over %d", tok.Count(s), b.Summary)
			}
			prompt := got[0][0].Content + got[0][1].Content
			for _, w := range []string{"decisions", "open questions", "preferences", "at most 20 tokens", "The user likes tea.", "User: Let's use PostgreSQL.", "Result of calc: 42", "Assistant: Agreed"} {
				if !strings.Contains(prompt, w) {
					t.Errorf("prompt lacks %q:\n%s", w, prompt)
				}
			}
			if tc.calls == 2 && !strings.Contains(got[1][len(got[1])-1].Content, "hard limit is 20 tokens") {
				t.Errorf("second request %q is not firmer", got[1][len(got[1])-1].Content)
			}
		})
	}
	t.Run("no turns", func(t *testing.T) {
		s, err := contextwin.Fold(context.Background(), nil, "old", nil, b, tok)
		if s != "old" || err != nil {
			t.Errorf("got %q, %v", s, err)
		}
	})
}

// TestFoldBatchCapsInput is issue 10 item 2: a backlog of unsummarised turns is
// folded in batches of whole turns within FoldInputMax, not as one ever-growing prompt.
func TestFoldBatchCapsInput(t *testing.T) {
	tok := contextwin.NewTokenizer()
	b := contextwin.DefaultBudgets()
	var turns []store.Message
	for i := range 100 {
		s := int64(2*i + 1)
		turns = append(turns, store.Message{Seq: s, Role: store.RoleUser, Content: "question", Tokens: 5},
			store.Message{Seq: s + 1, Role: store.RoleAssistant, Content: "answer", Tokens: 600})
	}
	batch := contextwin.FoldBatch(turns, b, tok)
	used := 0
	for _, m := range batch {
		used += m.Tokens
	}
	if len(batch) == 0 || len(batch) == len(turns) || batch[len(batch)-1].Role != store.RoleAssistant {
		t.Fatalf("batch of %d messages ending with %q, want whole turns, fewer than all", len(batch), batch[len(batch)-1].Role)
	}
	if max := contextwin.FoldInputMax(b); used > max || used < max-700 {
		t.Errorf("batch has %d tokens, want as many whole turns as fit %d", used, max)
	}
}
