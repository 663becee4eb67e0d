package llm

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
)

// ParseRequest reads a request body as the provider of kind (KindOpenAI or
// KindAnthropic) sent it back into the Request it was built from, so that a
// recording keeps only the body (the trace stores each model request once).
//
// For an OpenAI-compatible body it is the exact inverse of the encoding. For an
// Anthropic body it is exact but for what that encoding itself normalises: system
// messages come first (the agent puts them there), empty user and system messages
// are not in the body, consecutive assistant messages come back as one, tool-call
// arguments come back compacted (invalid ones as "{}"), MaxTokens is the value sent
// (4096 when the request left it 0). A tool's Parameters is the schema as sent
// (JSON, same meaning; keys may be in another order).
//
// Errors: a body that is not such a request.
func ParseRequest(kind string, body []byte) (Request, error) {
	switch kind {
	case KindOpenAI:
		return parseOpenAIBody(body)
	case KindAnthropic:
		return parseAnthropicBody(body)
	}
	return Request{}, fmt.Errorf("llm: parse request: unknown API format %q", kind)
}

func parseOpenAIBody(body []byte) (Request, error) {
	var in oaRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return Request{}, fmt.Errorf("llm: parse chat completions request: %w", err)
	}
	req := Request{Model: in.Model, MaxTokens: in.MaxTokens}
	for _, m := range in.Messages {
		msg := Message{Role: m.Role, ToolCallID: m.ToolCallID}
		switch c := m.Content.(type) {
		case string:
			msg.Content = c
		case []any: // a user message with images: image_url parts, then a text part
			for _, p := range c {
				part, _ := p.(map[string]any)
				switch part["type"] {
				case "text":
					t, _ := part["text"].(string)
					msg.Content += t
				case "image_url":
					u, _ := part["image_url"].(map[string]any)
					url, _ := u["url"].(string)
					img, err := parseDataURL(url)
					if err != nil {
						return Request{}, fmt.Errorf("llm: parse chat completions request: %w", err)
					}
					msg.Images = append(msg.Images, img)
				}
			}
		}
		for _, tc := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		req.Messages = append(req.Messages, msg)
	}
	for _, t := range in.Tools {
		req.Tools = append(req.Tools, ToolSpec{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	return req, nil
}

// Wire types of a Messages API request, as anthropicParams builds it.
type (
	anRequest struct {
		Model     string      `json:"model"`
		MaxTokens int         `json:"max_tokens"`
		System    anContent   `json:"system"`
		Messages  []anMessage `json:"messages"`
		Tools     []struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
		} `json:"tools"`
	}
	anMessage struct {
		Role    string    `json:"role"`
		Content anContent `json:"content"`
	}
	anBlock struct {
		Type      string          `json:"type"`
		Text      string          `json:"text"`
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Input     json.RawMessage `json:"input"`
		ToolUseID string          `json:"tool_use_id"`
		Content   anContent       `json:"content"`
		Source    struct {
			MediaType string `json:"media_type"`
			Data      []byte `json:"data"` // base64 in the JSON
		} `json:"source"`
	}
	// anContent is a string or a list of blocks.
	anContent []anBlock
)

func (c *anContent) UnmarshalJSON(b []byte) error {
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte(`"`)) {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*c = anContent{{Type: "text", Text: s}}
		return nil
	}
	return json.Unmarshal(b, (*[]anBlock)(c))
}

// text is the content's text blocks, joined.
func (c anContent) text() string {
	var sb strings.Builder
	for _, b := range c {
		if b.Type == "text" {
			sb.WriteString(b.Text)
		}
	}
	return sb.String()
}

func parseAnthropicBody(body []byte) (Request, error) {
	var in anRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return Request{}, fmt.Errorf("llm: parse messages request: %w", err)
	}
	req := Request{Model: in.Model, MaxTokens: in.MaxTokens}
	for _, b := range in.System {
		req.Messages = append(req.Messages, Message{Role: RoleSystem, Content: b.Text})
	}
	for _, m := range in.Messages {
		switch m.Role {
		case RoleUser:
			// One user turn holds consecutive user and tool messages, a block each; a
			// user message's images come as blocks before its text block (none when
			// its text is empty).
			var images []Image
			flush := func() {
				if len(images) > 0 {
					req.Messages = append(req.Messages, Message{Role: RoleUser, Images: images})
					images = nil
				}
			}
			for _, b := range m.Content {
				switch b.Type {
				case "image":
					images = append(images, Image{MediaType: b.Source.MediaType, Data: b.Source.Data})
				case "text":
					req.Messages = append(req.Messages, Message{Role: RoleUser, Content: b.Text, Images: images})
					images = nil
				case "tool_result":
					flush()
					req.Messages = append(req.Messages, Message{Role: RoleTool, ToolCallID: b.ToolUseID, Content: b.Content.text()})
				}
			}
			flush()
		case RoleAssistant:
			msg := Message{Role: RoleAssistant}
			for _, b := range m.Content {
				switch b.Type {
				case "text":
					msg.Content += b.Text
				case "tool_use":
					args := "{}"
					if len(b.Input) > 0 {
						var buf bytes.Buffer
						if json.Compact(&buf, b.Input) == nil {
							args = buf.String()
						}
					}
					msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Arguments: args})
				}
			}
			req.Messages = append(req.Messages, msg)
		default:
			return Request{}, fmt.Errorf("llm: parse messages request: a message has the role %q", m.Role)
		}
	}
	for _, t := range in.Tools {
		req.Tools = append(req.Tools, ToolSpec{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
	}
	return req, nil
}

// parseDataURL reads an image part's "data:<type>;base64,<data>" URL.
func parseDataURL(url string) (Image, error) {
	rest, ok := strings.CutPrefix(url, "data:")
	media, enc, ok2 := strings.Cut(rest, ";base64,")
	if !ok || !ok2 {
		return Image{}, fmt.Errorf("an image part is not a base64 data: URL")
	}
	data, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return Image{}, fmt.Errorf("an image part's data: %w", err)
	}
	return Image{MediaType: media, Data: data}, nil
}
