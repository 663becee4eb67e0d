package llmtest_test

import (
	"context"
	"strings"
	"testing"

	"atrium/internal/llm"
	"atrium/internal/llm/llmtest"
)

func TestWords(t *testing.T) {
	for _, text := range []string{"", "one", "Hello there, world.", "  leading and trailing  ", "line\nbreak\ttab", "ünïcode wörds"} {
		words := llmtest.Words(text)
		if got := strings.Join(words, ""); got != text {
			t.Errorf("Words(%q) joined = %q", text, got)
		}
		for _, w := range words[min(1, len(words)):] {
			if strings.TrimSpace(w) == "" || w[0] == ' ' {
				t.Errorf("Words(%q) = %q: a chunk must start with a word", text, words)
			}
		}
	}
	if got := llmtest.Words("a b c"); len(got) != 3 || got[0] != "a " {
		t.Errorf("Words = %q", got)
	}
}

// Replies come from the queue first, then from Handler, then "ok".
func TestReplyOrder(t *testing.T) {
	srv := llmtest.NewServer(t)
	p, err := llm.New(llm.Config{Kind: llm.KindOpenAI, BaseURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	ask := func(text string) string {
		t.Helper()
		resp, err := p.Stream(context.Background(), llm.Request{Model: "m", Messages: []llm.Message{{Role: "user", Content: text}}}, nil)
		if err != nil {
			t.Fatalf("Stream: %v", err)
		}
		return resp.Content
	}
	if got := ask("x"); got != "ok" {
		t.Errorf("default reply = %q", got)
	}
	srv.Enqueue(llmtest.Reply{Text: []string{"queued"}})
	srv.SetHandler(func(req llmtest.ChatRequest) llmtest.Reply {
		return llmtest.Reply{Text: llmtest.Words("you said " + req.LastUser())}
	})
	if got := ask("x"); got != "queued" {
		t.Errorf("first reply = %q", got)
	}
	if got := ask("hello"); got != "you said hello" {
		t.Errorf("handler reply = %q", got)
	}
	if n := len(srv.Requests()); n != 3 {
		t.Errorf("requests = %d", n)
	}
}
