package llm

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/respjson"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"
)

// openaiProvider talks to any OpenAI-compatible chat completions endpoint.
type openaiProvider struct {
	cfg    Config
	base   string
	chat   openai.ChatCompletionService
	models openai.ModelService
}

func newOpenAI(cfg Config, base string) *openaiProvider {
	// The services are built directly rather than with openai.NewClient, whose
	// defaults read OPENAI_API_KEY, OPENAI_BASE_URL and friends from the
	// environment: the Config is the only source of truth, and an empty key
	// means "no Authorization header".
	opts := []option.RequestOption{
		option.WithBaseURL(base + "/"),
		option.WithHTTPClient(cfg.HTTPClient),
		option.WithMaxRetries(0),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	return &openaiProvider{
		cfg:    cfg,
		base:   base,
		chat:   openai.NewChatCompletionService(opts...),
		models: openai.NewModelService(opts...),
	}
}

func (p *openaiProvider) Models(ctx context.Context) ([]string, error) {
	c := &call{parent: ctx, tap: &tap{}, base: p.base, key: p.cfg.APIKey}
	page, err := p.models.List(ctx, option.WithMiddleware(c.tap.middleware))
	if err != nil {
		return nil, c.fail(err, nil)
	}
	ids := make([]string, 0, len(page.Data))
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	return ids, nil
}

func (p *openaiProvider) Stream(ctx context.Context, req Request, onEvent func(Event)) (Response, error) {
	if onEvent == nil {
		onEvent = func(Event) {}
	}
	var resp Response
	params, err := openaiParams(req)
	if err != nil {
		return resp, err
	}
	sctx, dog := newWatchdog(ctx, p.cfg.StartTimeout, p.cfg.IdleTimeout)
	defer dog.stop()
	c := &call{parent: ctx, dog: dog, tap: &tap{}, base: p.base, key: p.cfg.APIKey}

	dog.arm()
	stream := p.chat.NewStreaming(sctx, params, option.WithMiddleware(c.tap.middleware))
	defer stream.Close()

	// Tool calls are assembled from fragments by index. A fragment with a new id
	// at a used index starts a new call: some servers send every call whole
	// without distinct indexes.
	calls := map[int64]*ToolCall{}
	var order []*ToolCall
	finished := false
	for stream.Next() {
		dog.chunk()
		chunk := stream.Current()
		if chunk.JSON.Usage.Valid() {
			resp.Usage = Usage{InputTokens: int(chunk.Usage.PromptTokens), OutputTokens: int(chunk.Usage.CompletionTokens)}
		}
		for _, choice := range chunk.Choices {
			if choice.Index != 0 {
				continue // we never ask for n > 1
			}
			d := choice.Delta
			if r := reasoningDelta(d.JSON.ExtraFields); r != "" {
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
				if tc.Function.Name != "" {
					call.Name += tc.Function.Name
				}
				call.Arguments += tc.Function.Arguments
			}
			if choice.FinishReason != "" {
				resp.FinishReason = choice.FinishReason
				finished = true
			}
		}
		dog.arm()
	}
	dog.chunk()
	err = stream.Err()
	if err == nil && !finished {
		// The body ended cleanly but the reply never said it was done.
		err = errors.New("stream ended without a finish reason")
		if ctx.Err() == nil && dog.timeout() == nil {
			return resp, brokenError(err)
		}
	}
	if err != nil {
		return resp, c.fail(err, openaiStreamError(p.cfg.APIKey))
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

// reasoningDelta reads "reasoning_content" (DeepSeek, vLLM) or "reasoning"
// (OpenRouter, Ollama) from a delta's fields the SDK does not know.
func reasoningDelta(extra map[string]respjson.Field) string {
	for _, name := range []string{"reasoning_content", "reasoning"} {
		// Unknown fields are marked invalid by the SDK; their Raw text is what we want.
		raw := extra[name].Raw()
		if raw == "" || raw == "null" {
			continue
		}
		var s string
		if json.Unmarshal([]byte(raw), &s) == nil && s != "" {
			return s
		}
	}
	return ""
}

// openaiStreamError converts an {"error":{...}} chunk inside a 200 stream.
func openaiStreamError(key string) func(error) *Error {
	return func(err error) *Error {
		var se *ssestream.StreamError
		if !errors.As(err, &se) {
			return nil
		}
		return streamEventError(errorType(se.Event.Data), providerDetail(se.Event.Data, key))
	}
}

func openaiParams(req Request) (openai.ChatCompletionNewParams, error) {
	params := openai.ChatCompletionNewParams{
		Model:         req.Model,
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	if req.MaxTokens > 0 {
		// max_tokens, not max_completion_tokens: local servers know only the former.
		params.MaxTokens = openai.Int(int64(req.MaxTokens))
	}
	for _, m := range req.Messages {
		switch m.Role {
		case RoleSystem:
			params.Messages = append(params.Messages, openai.SystemMessage(m.Content))
		case RoleUser:
			params.Messages = append(params.Messages, openai.UserMessage(m.Content))
		case RoleTool:
			params.Messages = append(params.Messages, openai.ToolMessage(m.Content, m.ToolCallID))
		case RoleAssistant:
			var a openai.ChatCompletionAssistantMessageParam
			if m.Content != "" || len(m.ToolCalls) == 0 {
				a.Content.OfString = openai.String(m.Content)
			}
			for _, tc := range m.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID: tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name:      tc.Name,
							Arguments: tc.Arguments,
						},
					},
				})
			}
			params.Messages = append(params.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		default:
			return params, requestError("A message has the unknown role " + capText(m.Role, 20) + ".")
		}
	}
	for _, t := range req.Tools {
		def := shared.FunctionDefinitionParam{Name: t.Name}
		if t.Description != "" {
			def.Description = openai.String(t.Description)
		}
		if len(t.Parameters) > 0 {
			var schema map[string]any
			if err := json.Unmarshal(t.Parameters, &schema); err != nil {
				return params, requestError("The tool " + capText(t.Name, 60) + " has an invalid parameter schema.")
			}
			def.Parameters = shared.FunctionParameters(schema)
		}
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(def))
	}
	return params, nil
}
