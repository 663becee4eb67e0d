// Package llm puts model providers behind one small streaming interface.
//
// Two implementations exist: any OpenAI-compatible chat completions endpoint
// (OpenAI, Ollama, llama.cpp, vLLM, LM Studio, OpenRouter, DeepSeek ...) and the
// Anthropic Messages API. The OpenAI-compatible client is a small hand-written
// one over net/http (the official SDK added ~19 MB to the binary); the Anthropic
// one uses Anthropic's official Go SDK with its environment defaults
// (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL) and automatic retries switched off.
// Either way the Config is the only source of truth.
//
// Failures a user should see are *Error values whose Error() text says what to
// fix. Cancelling the caller's context returns ctx.Err() instead.
package llm

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Message is one entry of a conversation.
type Message struct {
	Role       string // system | user | assistant | tool
	Content    string
	ToolCalls  []ToolCall // assistant messages that called tools
	ToolCallID string     // tool messages: the call this is the result of
	// Images of a user message (attached files), sent before Content as image parts:
	// OpenAI "image_url" parts with a data: URL, Anthropic base64 image blocks. Only
	// models marked vision-capable get them (the caller checks).
	Images []Image `json:",omitempty"`
}

// Image is an image part of a message: one of image/png, image/jpeg, image/gif,
// image/webp, checked by the caller.
type Image struct {
	MediaType string
	Data      []byte
}

// DataURL is img as a data: URL (base64).
func (img Image) DataURL() string {
	return "data:" + img.MediaType + ";base64," + base64.StdEncoding.EncodeToString(img.Data)
}

// Roles.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// ToolCall is one call of a tool by the model.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // JSON text
}

// ToolSpec describes a tool the model may call.
type ToolSpec struct {
	Name        string
	Description string
	Parameters  json.RawMessage // JSON Schema of the arguments object
}

// Request is one model call.
type Request struct {
	Model     string
	Messages  []Message
	Tools     []ToolSpec
	MaxTokens int // 0: provider default (Anthropic, which requires it: 4096)
}

// EventKind says what an Event carries.
type EventKind int

// Event kinds.
const (
	EventText      EventKind = iota // a delta of the visible answer
	EventReasoning                  // a delta of the model's reasoning ("thinking")
	EventToolCall                   // a complete tool call, once its arguments are assembled
)

func (k EventKind) String() string {
	switch k {
	case EventText:
		return "text"
	case EventReasoning:
		return "reasoning"
	case EventToolCall:
		return "tool_call"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is one streamed piece of a reply.
type Event struct {
	Kind     EventKind
	Text     string    // EventText, EventReasoning
	ToolCall *ToolCall // EventToolCall
}

// Usage counts tokens as reported by the provider (zero when it reports none).
type Usage struct {
	InputTokens  int
	OutputTokens int
}

// Response is the assembled reply.
type Response struct {
	Content   string
	Reasoning string
	// ToolCalls holds only complete calls; a call cut off by a failure is left out.
	ToolCalls    []ToolCall
	Usage        Usage
	FinishReason string // as the provider says it: "stop", "tool_calls", "end_turn", "tool_use", "length" ...
}

// Provider is a model endpoint.
type Provider interface {
	// Stream sends req and calls onEvent for every text/reasoning delta and every
	// complete tool call, in order, from the calling goroutine. It returns the
	// assembled response. On failure it returns the response assembled so far AND
	// an error: *Error, or ctx.Err() when ctx was cancelled.
	Stream(ctx context.Context, req Request, onEvent func(Event)) (Response, error)
	// Models lists the models the endpoint offers (GET /models); errors are
	// *Error, or ctx.Err() when ctx was cancelled.
	Models(ctx context.Context) ([]Model, error)
}

// Model is one model an endpoint lists.
type Model struct {
	ID string
	// Window is the context window in tokens where the endpoint reports one (vLLM's
	// max_model_len, OpenRouter's context_length, LM Studio's max_context_length,
	// Anthropic's max_input_tokens); 0 when it does not say.
	Window int
}

// Provider kinds.
const (
	KindOpenAI    = "openai"    // any OpenAI-compatible endpoint
	KindAnthropic = "anthropic" // the Anthropic Messages API
)

// Default timeouts.
const (
	DefaultStartTimeout = 60 * time.Second
	DefaultIdleTimeout  = 60 * time.Second
)

// Config says which endpoint to talk to and how.
type Config struct {
	Kind    string // KindOpenAI or KindAnthropic
	BaseURL string // empty: the vendor's public API
	APIKey  string // may be empty (Ollama, llama.cpp); never read from the environment
	// StartTimeout bounds the time from sending the request to the first streamed
	// chunk (response headers included); IdleTimeout the gap between chunks.
	// Zero means the default (60s each).
	StartTimeout time.Duration
	IdleTimeout  time.Duration
	// HTTPClient is used for every request; nil means a fresh client without an
	// overall timeout (streams are bounded by the two timeouts above).
	HTTPClient *http.Client
}

// New returns the provider cfg describes. Config errors are *Error with Kind
// KindConfig. The returned Provider is safe for concurrent use.
func New(cfg Config) (Provider, error) {
	if cfg.StartTimeout < 0 || cfg.IdleTimeout < 0 {
		return nil, configError("The provider timeouts must not be negative.")
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if strings.ContainsAny(cfg.APIKey, "\r\n") {
		return nil, configError("The API key contains a line break. Paste it again in Settings → Providers.")
	}
	switch strings.ToLower(strings.TrimSpace(cfg.Kind)) {
	case KindOpenAI:
		base, err := normalizeBaseURL(cfg.BaseURL, "https://api.openai.com/v1", true)
		if err != nil {
			return nil, err
		}
		return newOpenAI(cfg, base), nil
	case KindAnthropic:
		base, err := normalizeBaseURL(cfg.BaseURL, "https://api.anthropic.com", false)
		if err != nil {
			return nil, err
		}
		return newAnthropic(cfg, base), nil
	case "":
		return nil, configError("No provider kind is set. Choose openai or anthropic in Settings → Providers.")
	default:
		return nil, configError(fmt.Sprintf("The provider kind %q is not supported. Choose openai or anthropic in Settings → Providers.", capText(cfg.Kind, 40)))
	}
}

// normalizeBaseURL checks raw and returns it without trailing slashes. For
// OpenAI-compatible endpoints (withV1) a URL without a path gets "/v1"
// ("http://localhost:11434" → "http://localhost:11434/v1"); for Anthropic, whose
// SDK adds "v1/..." itself, a trailing "/v1" is removed.
func normalizeBaseURL(raw, def string, withV1 bool) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		raw = def
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", configError(fmt.Sprintf("The base URL %q is not a valid http(s) URL. Fix it in Settings → Providers.", capText(raw, 100)))
	}
	u.RawQuery, u.Fragment, u.RawPath = "", "", ""
	u.Path = strings.TrimRight(u.Path, "/")
	if withV1 && u.Path == "" {
		u.Path = "/v1"
	}
	if !withV1 {
		u.Path = strings.TrimSuffix(u.Path, "/v1")
	}
	return u.String(), nil
}

// displayURL is base without credentials, for messages.
func displayURL(base string) string {
	u, err := url.Parse(base)
	if err != nil {
		return base
	}
	u.User = nil
	return u.String()
}
