package llm_test

import (
	"context"
	"fmt"
	"testing"

	"atrium/internal/llm"
	"atrium/internal/llm/llmtest"
)

// imageRequest is a user message with two images and a question.
func imageRequest() llm.Request {
	return llm.Request{Model: "fake-model", Messages: []llm.Message{
		{Role: llm.RoleUser, Content: "What is in these?", Images: []llm.Image{
			{MediaType: "image/png", Data: []byte("\x89PNG1")},
			{MediaType: "image/jpeg", Data: []byte("\xff\xd8\xff2")},
		}},
	}}
}

// The OpenAI-compatible body carries the images as image_url parts with data: URLs,
// before the text part, byte for byte.
func TestOpenAIImageParts(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t)
	p := newProvider(t, llm.KindOpenAI, srv, "")
	if _, err := p.Stream(context.Background(), imageRequest(), nil); err != nil {
		t.Fatalf("Stream: %v", err)
	}
	want := `{"model":"fake-model","messages":[{"role":"user","content":[` +
		`{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORzE="}},` +
		`{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,/9j/Mg=="}},` +
		`{"type":"text","text":"What is in these?"}]}],"stream":true,"stream_options":{"include_usage":true}}`
	r := srv.LastRequest()
	if string(r.Body) != want {
		t.Errorf("body =\n%s\nwant\n%s", r.Body, want)
	}
	if m := r.Chat.Messages; len(m) != 1 || len(m[0].Images) != 2 || m[0].Content != "What is in these?" {
		t.Errorf("parsed = %+v", m)
	}
}

// A user message without images stays a plain string (what text-only servers expect).
func TestOpenAINoImagesIsString(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t)
	p := newProvider(t, llm.KindOpenAI, srv, "")
	req := llm.Request{Model: "m", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}
	if _, err := p.Stream(context.Background(), req, nil); err != nil {
		t.Fatalf("Stream: %v", err)
	}
	want := `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`
	if got := string(srv.LastRequest().Body); got != want {
		t.Errorf("body = %s, want %s", got, want)
	}
}

// The Anthropic body carries base64 image blocks before the text block, byte for byte.
func TestAnthropicImageBlocks(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t)
	p := newProvider(t, llm.KindAnthropic, srv, "k")
	if _, err := p.Stream(context.Background(), imageRequest(), nil); err != nil {
		t.Fatalf("Stream: %v", err)
	}
	want := `{"max_tokens":4096,"messages":[{"content":[` +
		`{"source":{"data":"iVBORzE=","media_type":"image/png","type":"base64"},"type":"image"},` +
		`{"source":{"data":"/9j/Mg==","media_type":"image/jpeg","type":"base64"},"type":"image"},` +
		`{"text":"What is in these?","type":"text"}],"role":"user"}],"model":"fake-model","stream":true}`
	r := srv.LastRequest()
	if string(r.Body) != want {
		t.Errorf("body =\n%s\nwant\n%s", r.Body, want)
	}
	if m := r.Chat.Messages; len(m) != 1 || len(m[0].Images) != 2 || m[0].Images[0] != "data:image/png;base64,iVBORzE=" {
		t.Errorf("parsed = %+v", m)
	}
}

// A recorded body with images reads back into the request it was built from, in
// both formats (the trace keeps only the body).
func TestParseRequestKeepsImages(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t)
	for _, kind := range []string{llm.KindOpenAI, llm.KindAnthropic} {
		p := newProvider(t, kind, srv, "k")
		want := imageRequest()
		want.Messages = append(want.Messages, llm.Message{Role: llm.RoleAssistant, Content: "ok"},
			llm.Message{Role: llm.RoleUser, Images: []llm.Image{{MediaType: "image/gif", Data: []byte("GIF89a")}}})
		if _, err := p.Stream(context.Background(), want, nil); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		got, err := llm.ParseRequest(kind, srv.LastRequest().Body)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if kind == llm.KindAnthropic {
			want.MaxTokens = 4096
		}
		if g, w := fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", want); g != w {
			t.Errorf("%s: parsed\n%s\nwant\n%s", kind, g, w)
		}
	}
}
