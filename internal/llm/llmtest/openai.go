package llmtest

import (
	"encoding/json"
	"net/http"
	"time"
)

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	req := chatOf(r)
	reply := s.next(req)
	e := &sse{s: s, w: w, r: r, reply: reply}
	if !e.start(func(status int) string {
		return mustJSON(map[string]any{"error": map[string]any{"message": http.StatusText(status), "type": "fake_error", "code": nil}})
	}) {
		return
	}
	model := req.Model
	if model == "" {
		model = "fake-model"
	}
	created := time.Now().Unix()
	chunk := func(delta map[string]any, finish any) string {
		return mustJSON(map[string]any{
			"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}},
		})
	}
	first := true
	role := func(d map[string]any) map[string]any {
		if first {
			d["role"] = "assistant"
			first = false
		}
		return d
	}
	for _, t := range reply.Reasoning {
		if !e.send("", chunk(role(map[string]any{"reasoning_content": t}), nil), true) {
			return
		}
	}
	for _, t := range reply.Text {
		if !e.send("", chunk(role(map[string]any{"content": t}), nil), true) {
			return
		}
	}
	for i, tc := range reply.ToolCalls {
		for j, frag := range fragments(tc.Arguments) {
			call := map[string]any{"index": i, "function": map[string]any{"arguments": frag}}
			if j == 0 {
				call["id"] = tc.ID
				call["type"] = "function"
				call["function"].(map[string]any)["name"] = tc.Name
			}
			if !e.send("", chunk(role(map[string]any{"tool_calls": []any{call}}), nil), true) {
				return
			}
		}
	}
	finish := reply.FinishReason
	if finish == "" {
		finish = "stop"
		if len(reply.ToolCalls) > 0 {
			finish = "tool_calls"
		}
	}
	if !e.send("", chunk(role(map[string]any{}), finish), true) {
		return
	}
	if u := reply.Usage; u != nil {
		usage := mustJSON(map[string]any{
			"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{},
			"usage": map[string]any{
				"prompt_tokens": u.InputTokens, "completion_tokens": u.OutputTokens,
				"total_tokens": u.InputTokens + u.OutputTokens,
			},
		})
		if !e.send("", usage, true) {
			return
		}
	}
	e.send("", "[DONE]", false)
}

// parseOpenAI reads a chat completions request body.
func parseOpenAI(body []byte) ChatRequest {
	var v struct {
		Model     string `json:"model"`
		Stream    bool   `json:"stream"`
		MaxTokens int    `json:"max_tokens"`
		Messages  []struct {
			Role       string          `json:"role"`
			Content    json.RawMessage `json:"content"`
			ToolCallID string          `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
		Tools []struct {
			Function struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
	}
	req := ChatRequest{Protocol: "openai"}
	if json.Unmarshal(body, &v) != nil {
		return req
	}
	req.Model, req.Stream, req.MaxTokens = v.Model, v.Stream, v.MaxTokens
	for _, m := range v.Messages {
		msg := Message{Role: m.Role, Content: textOf(m.Content), ToolCallID: m.ToolCallID}
		var parts []struct {
			Type     string `json:"type"`
			ImageURL struct {
				URL string `json:"url"`
			} `json:"image_url"`
		}
		if json.Unmarshal(m.Content, &parts) == nil {
			for _, p := range parts {
				if p.Type == "image_url" {
					msg.Images = append(msg.Images, p.ImageURL.URL)
				}
			}
		}
		for _, tc := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		req.Messages = append(req.Messages, msg)
	}
	for _, t := range v.Tools {
		req.Tools = append(req.Tools, Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	return req
}

// textOf reads content that is a string or an array of {"type":"text","text":...} parts.
func textOf(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	out := ""
	for _, p := range parts {
		if p.Type == "text" {
			out += p.Text
		}
	}
	return out
}
