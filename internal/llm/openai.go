package llm

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// openaiProvider talks to any OpenAI-compatible chat completions endpoint over plain
// HTTP and server-sent events.
//
// Why not github.com/openai/openai-go: the SDK alone put ~19 MB into the binary (its
// generated types and generic helpers; measured: 44.3 MiB with it, 25.6 MiB without),
// against a 40 MB budget for the whole program. The chat completions wire format this
// provider needs is small and stable, and it is the common denominator of the
// OpenAI-compatible servers (Ollama, llama.cpp, vLLM, LM Studio, OpenRouter, DeepSeek),
// so it is written out here. Anthropic keeps its official SDK.
type openaiProvider struct {
	cfg    Config
	base   string
	client *http.Client
}

func newOpenAI(cfg Config, base string) *openaiProvider {
	return &openaiProvider{cfg: cfg, base: base, client: cfg.HTTPClient}
}

// maxEventBytes bounds one server-sent event, so a hostile endpoint cannot make us
// buffer without end.
const maxEventBytes = 8 << 20

// send makes one request. Only the configured key is sent: nothing is read from the
// environment, and an empty key means no Authorization header.
func (p *openaiProvider) send(ctx context.Context, c *call, method, path string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, p.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "text/event-stream")
	} else {
		req.Header.Set("Accept", "application/json")
	}
	if p.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+p.cfg.APIKey)
	}
	return c.tap.middleware(req, p.client.Do)
}

func (p *openaiProvider) Models(ctx context.Context) ([]Model, error) {
	c := &call{parent: ctx, tap: &tap{}, base: p.base, key: p.cfg.APIKey}
	res, err := p.send(ctx, c, http.MethodGet, "/models", nil)
	if err != nil {
		return nil, c.fail(err, nil)
	}
	defer res.Body.Close()
	if res.StatusCode >= 400 {
		return nil, c.fail(fmt.Errorf("HTTP %d", res.StatusCode), nil)
	}
	// Servers that know their window say so under different names; the first one
	// present is taken.
	var page struct {
		Data []struct {
			ID               string `json:"id"`
			MaxModelLen      int    `json:"max_model_len"`      // vLLM
			ContextLength    int    `json:"context_length"`     // OpenRouter
			MaxContextLength int    `json:"max_context_length"` // LM Studio
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, maxEventBytes)).Decode(&page); err != nil {
		return nil, c.fail(err, nil)
	}
	out := make([]Model, 0, len(page.Data))
	for _, m := range page.Data {
		out = append(out, Model{ID: m.ID, Window: max(0, cmp.Or(m.MaxModelLen, m.ContextLength, m.MaxContextLength))})
	}
	return out, nil
}

// oaChunk is one streamed chat completion chunk (the fields we use).
type oaChunk struct {
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"` // DeepSeek, vLLM
			Reasoning        string `json:"reasoning"`         // OpenRouter, Ollama
			ToolCalls        []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

func (p *openaiProvider) Stream(ctx context.Context, req Request, onEvent func(Event)) (Response, error) {
	if onEvent == nil {
		onEvent = func(Event) {}
	}
	var resp Response
	body, err := openaiBody(req)
	if err != nil {
		return resp, err
	}
	sctx, dog := newWatchdog(ctx, p.cfg.StartTimeout, p.cfg.IdleTimeout)
	defer dog.stop()
	c := &call{parent: ctx, dog: dog, tap: &tap{}, base: p.base, key: p.cfg.APIKey}

	dog.arm()
	res, err := p.send(sctx, c, http.MethodPost, "/chat/completions", body)
	if err != nil {
		return resp, c.fail(err, nil)
	}
	defer res.Body.Close()
	if res.StatusCode >= 400 {
		return resp, c.fail(fmt.Errorf("HTTP %d", res.StatusCode), nil)
	}

	// Tool calls are assembled from fragments by index. A fragment with a new id at a
	// used index starts a new call: some servers send every call whole without
	// distinct indexes.
	calls := map[int]*ToolCall{}
	var order []*ToolCall
	finished, done := false, false
	events := newSSEReader(res.Body)
	for !done {
		data, err := events.next()
		dog.chunk()
		if err == io.EOF {
			break
		}
		if err != nil {
			return resp, c.fail(err, nil)
		}
		if bytes.Equal(data, []byte("[DONE]")) {
			done = true
			break
		}
		var chunk oaChunk
		if err := json.Unmarshal(data, &chunk); err != nil {
			return resp, brokenError(fmt.Errorf("malformed chunk: %w", err))
		}
		if len(chunk.Error) > 0 && string(chunk.Error) != "null" {
			return resp, streamEventError(errorType(data), providerDetail(data, p.cfg.APIKey))
		}
		if chunk.Usage != nil {
			resp.Usage = Usage{InputTokens: chunk.Usage.PromptTokens, OutputTokens: chunk.Usage.CompletionTokens}
		}
		for _, choice := range chunk.Choices {
			if choice.Index != 0 {
				continue // we never ask for n > 1
			}
			d := choice.Delta
			if r := d.ReasoningContent + d.Reasoning; r != "" {
				resp.Reasoning += r
				onEvent(Event{Kind: EventReasoning, Text: r})
			}
			if d.Content != "" {
				resp.Content += d.Content
				onEvent(Event{Kind: EventText, Text: d.Content})
			}
			for _, tc := range d.ToolCalls {
				call := calls[tc.Index]
				if call == nil || (tc.ID != "" && call.ID != "" && tc.ID != call.ID) {
					call = &ToolCall{}
					calls[tc.Index] = call
					order = append(order, call)
				}
				if tc.ID != "" {
					call.ID = tc.ID
				}
				call.Name += tc.Function.Name
				call.Arguments += tc.Function.Arguments
			}
			if choice.FinishReason != nil && *choice.FinishReason != "" {
				resp.FinishReason = *choice.FinishReason
				finished = true
			}
		}
		dog.arm()
	}
	if !finished {
		// The body ended (or said [DONE]) but the reply never said it was done.
		err := errors.New("stream ended without a finish reason")
		if ctx.Err() == nil && dog.timeout() == nil {
			return resp, brokenError(err)
		}
		return resp, c.fail(err, nil)
	}
	for _, call := range order {
		tc := *call
		if tc.Arguments == "" {
			tc.Arguments = "{}"
		}
		resp.ToolCalls = append(resp.ToolCalls, tc)
		onEvent(Event{Kind: EventToolCall, ToolCall: &tc})
	}
	return resp, nil
}

// sseReader reads the data of server-sent events, one event at a time.
type sseReader struct {
	r *bufio.Reader
}

func newSSEReader(r io.Reader) *sseReader { return &sseReader{r: bufio.NewReaderSize(r, 32<<10)} }

// next returns the data of the next event with data lines joined by "\n"; io.EOF at
// the end of the body. Comments and other fields are skipped.
func (s *sseReader) next() ([]byte, error) {
	var data []byte
	has := false
	for {
		line, err := s.r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// A long line: collect it whole, bounded.
			long := append([]byte(nil), line...)
			for err == bufio.ErrBufferFull && len(long) <= maxEventBytes {
				line, err = s.r.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if err != nil && err != io.EOF {
			return nil, err
		}
		if len(data) > maxEventBytes {
			return nil, errors.New("an event is larger than 8 MB")
		}
		trimmed := bytes.TrimRight(line, "\r\n")
		switch {
		case len(trimmed) == 0:
			if has {
				return data, nil
			}
		case bytes.HasPrefix(trimmed, []byte("data:")):
			v := bytes.TrimPrefix(trimmed[5:], []byte(" "))
			if has {
				data = append(data, '\n')
			}
			data = append(data, v...)
			has = true
		}
		if err == io.EOF {
			if has {
				return data, nil
			}
			return nil, io.EOF
		}
	}
}

// Wire types of the chat completions request.
type (
	oaRequest struct {
		Model         string      `json:"model"`
		Messages      []oaMessage `json:"messages"`
		Stream        bool        `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		Tools []oaTool `json:"tools,omitempty"`
		// max_tokens, not max_completion_tokens: local servers know only the former.
		MaxTokens int `json:"max_tokens,omitempty"`
	}
	oaMessage struct {
		Role       string       `json:"role"`
		Content    any          `json:"content,omitempty"` // *string, or []oaPart for a user message with images
		ToolCalls  []oaToolCall `json:"tool_calls,omitempty"`
		ToolCallID string       `json:"tool_call_id,omitempty"`
	}
	// oaPart is one part of a content array: text, or an image as a data: URL.
	oaPart struct {
		Type     string      `json:"type"`
		Text     *string     `json:"text,omitempty"`
		ImageURL *oaImageURL `json:"image_url,omitempty"`
	}
	oaImageURL struct {
		URL string `json:"url"`
	}
	oaToolCall struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	oaTool struct {
		Type     string `json:"type"`
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description,omitempty"`
			Parameters  json.RawMessage `json:"parameters,omitempty"`
		} `json:"function"`
	}
)

func openaiBody(req Request) ([]byte, error) {
	out := oaRequest{Model: req.Model, Stream: true, MaxTokens: req.MaxTokens}
	out.StreamOptions.IncludeUsage = true
	for _, m := range req.Messages {
		msg := oaMessage{Role: m.Role}
		content := m.Content
		switch m.Role {
		case RoleSystem:
			msg.Content = &content
		case RoleUser:
			msg.Content = &content
			if len(m.Images) > 0 {
				parts := make([]oaPart, 0, len(m.Images)+1)
				for _, img := range m.Images {
					parts = append(parts, oaPart{Type: "image_url", ImageURL: &oaImageURL{URL: img.DataURL()}})
				}
				if content != "" {
					parts = append(parts, oaPart{Type: "text", Text: &content})
				}
				msg.Content = parts
			}
		case RoleTool:
			msg.Content, msg.ToolCallID = &content, m.ToolCallID
		case RoleAssistant:
			if m.Content != "" || len(m.ToolCalls) == 0 {
				msg.Content = &content
			}
			for _, tc := range m.ToolCalls {
				call := oaToolCall{ID: tc.ID, Type: "function"}
				call.Function.Name, call.Function.Arguments = tc.Name, tc.Arguments
				msg.ToolCalls = append(msg.ToolCalls, call)
			}
		default:
			return nil, requestError("A message has the unknown role " + capText(m.Role, 20) + ".")
		}
		out.Messages = append(out.Messages, msg)
	}
	for _, t := range req.Tools {
		tool := oaTool{Type: "function"}
		tool.Function.Name, tool.Function.Description = t.Name, t.Description
		if len(t.Parameters) > 0 {
			if !json.Valid(t.Parameters) {
				return nil, requestError("The tool " + capText(t.Name, 60) + " has an invalid parameter schema.")
			}
			tool.Function.Parameters = t.Parameters
		}
		out.Tools = append(out.Tools, tool)
	}
	return json.Marshal(out)
}
