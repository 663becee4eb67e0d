package llm

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// defaultAnthropicMaxTokens is sent when Request.MaxTokens is 0: the Messages
// API requires max_tokens.
const defaultAnthropicMaxTokens = 4096

// anthropicProvider talks to the Anthropic Messages API.
type anthropicProvider struct {
	cfg    Config
	base   string // without /v1: the SDK adds it
	client anthropic.Client
}

func newAnthropic(cfg Config, base string) *anthropicProvider {
	// WithoutEnvironmentDefaults keeps ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL,
	// profiles and federation out: the Config is the only source of truth.
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(base + "/"),
		option.WithHTTPClient(cfg.HTTPClient),
		option.WithMaxRetries(0),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	return &anthropicProvider{cfg: cfg, base: base, client: anthropic.NewClient(opts...)}
}

func (p *anthropicProvider) Models(ctx context.Context) ([]Model, error) {
	c := &call{parent: ctx, tap: &tap{}, base: p.base, key: p.cfg.APIKey}
	page, err := p.client.Models.List(ctx, anthropic.ModelListParams{Limit: anthropic.Int(1000)}, option.WithMiddleware(c.tap.middleware))
	if err != nil {
		return nil, c.fail(err, nil)
	}
	out := make([]Model, 0, len(page.Data))
	for _, m := range page.Data {
		out = append(out, Model{ID: m.ID, Window: int(max(0, m.MaxInputTokens))})
	}
	return out, nil
}

func (p *anthropicProvider) Stream(ctx context.Context, req Request, onEvent func(Event)) (Response, error) {
	if onEvent == nil {
		onEvent = func(Event) {}
	}
	var resp Response
	params, err := anthropicParams(req)
	if err != nil {
		return resp, err
	}
	sctx, dog := newWatchdog(ctx, p.cfg.StartTimeout, p.cfg.IdleTimeout)
	defer dog.stop()
	c := &call{parent: ctx, dog: dog, tap: &tap{}, base: p.base, key: p.cfg.APIKey}

	dog.arm()
	stream := p.client.Messages.NewStreaming(sctx, params, option.WithMiddleware(c.tap.middleware))
	defer stream.Close()

	type block struct {
		call *ToolCall // tool_use blocks only
		args strings.Builder
	}
	blocks := map[int64]*block{}
	finished := false
	for stream.Next() {
		dog.chunk()
		ev := stream.Current()
		switch ev.Type {
		case "message_start":
			resp.Usage.InputTokens = int(ev.Message.Usage.InputTokens)
			resp.Usage.OutputTokens = int(ev.Message.Usage.OutputTokens)
		case "content_block_start":
			b := &block{}
			if ev.ContentBlock.Type == "tool_use" {
				b.call = &ToolCall{ID: ev.ContentBlock.ID, Name: ev.ContentBlock.Name}
			}
			blocks[ev.Index] = b
		case "content_block_delta":
			switch ev.Delta.Type {
			case "text_delta":
				if ev.Delta.Text != "" {
					resp.Content += ev.Delta.Text
					onEvent(Event{Kind: EventText, Text: ev.Delta.Text})
				}
			case "thinking_delta":
				if ev.Delta.Thinking != "" {
					resp.Reasoning += ev.Delta.Thinking
					onEvent(Event{Kind: EventReasoning, Text: ev.Delta.Thinking})
				}
			case "input_json_delta":
				if b := blocks[ev.Index]; b != nil {
					b.args.WriteString(ev.Delta.PartialJSON)
				}
			}
		case "content_block_stop":
			if b := blocks[ev.Index]; b != nil && b.call != nil {
				tc := *b.call
				tc.Arguments = b.args.String()
				if strings.TrimSpace(tc.Arguments) == "" {
					tc.Arguments = "{}"
				}
				resp.ToolCalls = append(resp.ToolCalls, tc)
				onEvent(Event{Kind: EventToolCall, ToolCall: &tc})
			}
			delete(blocks, ev.Index)
		case "message_delta":
			if ev.Delta.StopReason != "" {
				resp.FinishReason = string(ev.Delta.StopReason)
			}
			if ev.Usage.InputTokens > 0 {
				resp.Usage.InputTokens = int(ev.Usage.InputTokens)
			}
			if ev.Usage.OutputTokens > 0 {
				resp.Usage.OutputTokens = int(ev.Usage.OutputTokens)
			}
		case "message_stop":
			finished = true
		}
		dog.arm()
	}
	dog.chunk()
	err = stream.Err()
	if err == nil && !finished {
		err = errors.New("stream ended without message_stop")
		if ctx.Err() == nil && dog.timeout() == nil {
			return resp, brokenError(err)
		}
	}
	if err != nil {
		return resp, c.fail(err, anthropicStreamError(p.cfg.APIKey))
	}
	return resp, nil
}

// anthropicStreamError converts an "event: error" inside a 200 stream.
func anthropicStreamError(key string) func(error) *Error {
	return func(err error) *Error {
		var ae *anthropic.Error
		if errors.As(err, &ae) {
			raw := []byte(ae.RawJSON())
			return streamEventError(errorType(raw), providerDetail(raw, key))
		}
		const prefix = "received error while streaming: "
		if msg := err.Error(); strings.HasPrefix(msg, prefix) {
			raw := []byte(strings.TrimPrefix(msg, prefix))
			return streamEventError(errorType(raw), providerDetail(raw, key))
		}
		return nil
	}
}

func anthropicParams(req Request) (anthropic.MessageNewParams, error) {
	params := anthropic.MessageNewParams{Model: req.Model, MaxTokens: defaultAnthropicMaxTokens}
	if req.MaxTokens > 0 {
		params.MaxTokens = int64(req.MaxTokens)
	}
	// The API wants alternating user/assistant turns; tool results are user
	// content blocks, so consecutive tool and user messages share one turn.
	var lastRole string
	add := func(role string, blocks ...anthropic.ContentBlockParamUnion) {
		if len(blocks) == 0 {
			return
		}
		if role == lastRole && len(params.Messages) > 0 {
			last := &params.Messages[len(params.Messages)-1]
			if role == RoleUser {
				last.OfUser.Content = append(last.OfUser.Content, blocks...)
			} else {
				last.OfAssistant.Content = append(last.OfAssistant.Content, blocks...)
			}
			return
		}
		if role == RoleUser {
			params.Messages = append(params.Messages, anthropic.NewUserMessage(blocks...))
		} else {
			params.Messages = append(params.Messages, anthropic.NewAssistantMessage(blocks...))
		}
		lastRole = role
	}
	for _, m := range req.Messages {
		switch m.Role {
		case RoleSystem:
			if m.Content != "" {
				params.System = append(params.System, anthropic.TextBlockParam{Text: m.Content})
			}
		case RoleUser:
			var blocks []anthropic.ContentBlockParamUnion
			for _, img := range m.Images {
				blocks = append(blocks, anthropic.NewImageBlockBase64(img.MediaType, base64.StdEncoding.EncodeToString(img.Data)))
			}
			if m.Content != "" {
				blocks = append(blocks, anthropic.NewTextBlock(m.Content))
			}
			add(RoleUser, blocks...)
		case RoleTool:
			add(RoleUser, anthropic.NewToolResultBlock(m.ToolCallID, m.Content, false))
		case RoleAssistant:
			var blocks []anthropic.ContentBlockParamUnion
			if m.Content != "" {
				blocks = append(blocks, anthropic.NewTextBlock(m.Content))
			}
			for _, tc := range m.ToolCalls {
				input := json.RawMessage(tc.Arguments)
				if !json.Valid(input) {
					input = json.RawMessage("{}")
				}
				blocks = append(blocks, anthropic.NewToolUseBlock(tc.ID, input, tc.Name))
			}
			add(RoleAssistant, blocks...)
		default:
			return params, requestError("A message has the unknown role " + capText(m.Role, 20) + ".")
		}
	}
	for _, t := range req.Tools {
		schema := anthropic.ToolInputSchemaParam{}
		if len(t.Parameters) > 0 {
			var s map[string]any
			if err := json.Unmarshal(t.Parameters, &s); err != nil {
				return params, requestError("The tool " + capText(t.Name, 60) + " has an invalid parameter schema.")
			}
			schema.Properties = s["properties"]
			if req, ok := s["required"].([]any); ok {
				for _, r := range req {
					if name, ok := r.(string); ok {
						schema.Required = append(schema.Required, name)
					}
				}
			}
			for k, v := range s {
				if k != "type" && k != "properties" && k != "required" {
					if schema.ExtraFields == nil {
						schema.ExtraFields = map[string]any{}
					}
					schema.ExtraFields[k] = v
				}
			}
		}
		tool := anthropic.ToolParam{Name: t.Name, InputSchema: schema}
		if t.Description != "" {
			tool.Description = anthropic.String(t.Description)
		}
		params.Tools = append(params.Tools, anthropic.ToolUnionParam{OfTool: &tool})
	}
	return params, nil
}
