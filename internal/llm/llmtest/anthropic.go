package llmtest

import (
	"encoding/json"
	"net/http"
	"strings"
)

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	req := chatOf(r)
	reply := s.next(req)
	e := &sse{s: s, w: w, r: r, reply: reply}
	if !e.start(func(status int) string {
		return mustJSON(map[string]any{"type": "error", "error": map[string]any{"type": anthropicErrorType(status), "message": http.StatusText(status)}})
	}) {
		return
	}
	model := req.Model
	if model == "" {
		model = "fake-model"
	}
	var in, out int
	if reply.Usage != nil {
		in, out = reply.Usage.InputTokens, reply.Usage.OutputTokens
	}
	send := func(event string, data map[string]any, delta bool) bool {
		data["type"] = event
		return e.send(event, mustJSON(data), delta)
	}
	if !send("message_start", map[string]any{"message": map[string]any{
		"id": "msg_fake", "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": in, "output_tokens": 1},
	}}, false) {
		return
	}
	index := 0
	block := func(start map[string]any, deltas []map[string]any) bool {
		if !send("content_block_start", map[string]any{"index": index, "content_block": start}, false) {
			return false
		}
		for _, d := range deltas {
			counts := d["type"] != "signature_delta"
			if !send("content_block_delta", map[string]any{"index": index, "delta": d}, counts) {
				return false
			}
		}
		ok := send("content_block_stop", map[string]any{"index": index}, false)
		index++
		return ok
	}
	if len(reply.Reasoning) > 0 {
		var ds []map[string]any
		for _, t := range reply.Reasoning {
			ds = append(ds, map[string]any{"type": "thinking_delta", "thinking": t})
		}
		ds = append(ds, map[string]any{"type": "signature_delta", "signature": "fake-signature"})
		if !block(map[string]any{"type": "thinking", "thinking": "", "signature": ""}, ds) {
			return
		}
	}
	if len(reply.Text) > 0 {
		var ds []map[string]any
		for _, t := range reply.Text {
			ds = append(ds, map[string]any{"type": "text_delta", "text": t})
		}
		if !block(map[string]any{"type": "text", "text": ""}, ds) {
			return
		}
	}
	for _, tc := range reply.ToolCalls {
		var ds []map[string]any
		for _, f := range fragments(tc.Arguments) {
			ds = append(ds, map[string]any{"type": "input_json_delta", "partial_json": f})
		}
		if !block(map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Name, "input": map[string]any{}}, ds) {
			return
		}
	}
	stop := reply.FinishReason
	if stop == "" {
		stop = "end_turn"
		if len(reply.ToolCalls) > 0 {
			stop = "tool_use"
		}
	}
	if !send("message_delta", map[string]any{
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": out},
	}, false) {
		return
	}
	send("message_stop", map[string]any{}, false)
}

func anthropicErrorType(status int) string {
	switch {
	case status == 401:
		return "authentication_error"
	case status == 403:
		return "permission_error"
	case status == 404:
		return "not_found_error"
	case status == 429:
		return "rate_limit_error"
	case status == 529:
		return "overloaded_error"
	case status >= 500:
		return "api_error"
	}
	return "invalid_request_error"
}

// parseAnthropic reads a Messages API request body into the common shape.
func parseAnthropic(body []byte) ChatRequest {
	var v struct {
		Model     string          `json:"model"`
		Stream    bool            `json:"stream"`
		MaxTokens int             `json:"max_tokens"`
		System    json.RawMessage `json:"system"`
		Messages  []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
		} `json:"tools"`
	}
	req := ChatRequest{Protocol: "anthropic"}
	if json.Unmarshal(body, &v) != nil {
		return req
	}
	req.Model, req.Stream, req.MaxTokens = v.Model, v.Stream, v.MaxTokens
	if sys := textOf(v.System); sys != "" {
		req.Messages = append(req.Messages, Message{Role: "system", Content: sys})
	}
	for _, m := range v.Messages {
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			req.Messages = append(req.Messages, Message{Role: m.Role, Content: s})
			continue
		}
		var blocks []struct {
			Type      string          `json:"type"`
			Text      string          `json:"text"`
			ID        string          `json:"id"`
			Name      string          `json:"name"`
			Input     json.RawMessage `json:"input"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
			Source    struct {
				Type      string `json:"type"`
				MediaType string `json:"media_type"`
				Data      string `json:"data"`
			} `json:"source"`
		}
		_ = json.Unmarshal(m.Content, &blocks)
		msg := Message{Role: m.Role}
		var text strings.Builder
		for _, b := range blocks {
			switch b.Type {
			case "text":
				text.WriteString(b.Text)
			case "tool_use":
				msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Arguments: string(b.Input)})
			case "image":
				msg.Images = append(msg.Images, "data:"+b.Source.MediaType+";base64,"+b.Source.Data)
			case "tool_result":
				req.Messages = append(req.Messages, Message{Role: "tool", ToolCallID: b.ToolUseID, Content: textOf(b.Content)})
			}
		}
		msg.Content = text.String()
		if msg.Content != "" || len(msg.ToolCalls) > 0 || len(msg.Images) > 0 {
			req.Messages = append(req.Messages, msg)
		}
	}
	for _, t := range v.Tools {
		req.Tools = append(req.Tools, Tool{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
	}
	return req
}
