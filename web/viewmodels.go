package web

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"atrium/internal/contextwin"
	"atrium/internal/llm"
	"atrium/internal/markdown"
	"atrium/internal/store"
	"atrium/internal/tools"
	"atrium/views"
)

// This file maps stored data to view models (messages, tool cards, task panel, meter).

// resultPreviewChars caps what a tool card shows of a result; the full result is stored.
const resultPreviewChars = 2000

// messageView maps a stored message to its view, rendering assistant markdown. results
// holds the tool messages of the page by their call's key (store.ToolCallKey), for the
// cards of a step that called tools (a call without a result shows as running).
func messageView(m store.Message, results map[string]*store.Message) views.Message {
	v := views.Message{ID: m.ID, Seq: m.Seq, Role: m.Role, Status: m.Status, Error: m.Error, Model: m.Model,
		CreatedAt: m.CreatedAt, Reasoning: noNUL(m.Reasoning),
		Interrupted: m.Status == store.StatusStopped && m.Error == store.ReplyInterrupted}
	if m.Role != store.RoleAssistant {
		v.Text = noNUL(m.Content)
		for _, a := range m.Attachments {
			v.Files = append(v.Files, views.File{Name: a.Name, URL: fileURL(a.ID), Size: a.Size, Image: a.Kind == store.AttachImage})
		}
		return v
	}
	v.HTML = markdown.Render(m.Content)
	v.SessionID, v.RunID = m.SessionID, m.RunID
	v.Text = noNUL(m.Content) // the markdown source, for Copy
	v.Memories = len(m.Memories)
	v.Saved = savedViews(m)
	calls, _ := contextwin.ParseToolCalls(m.ToolCalls)
	for i, c := range calls {
		key := store.ToolCallKey(m.ID, i)
		v.Tools = append(v.Tools, toolCard(c, key, results[key]))
	}
	return v
}

// noNUL replaces NUL, which HTML escaping lets through and browsers treat unevenly,
// with U+FFFD, as the HTML parser would; the stored text keeps it.
func noNUL(s string) string { return strings.ReplaceAll(s, "\x00", "\uFFFD") }

// toolCard describes one call, known by its key (the provider's id may be shared by
// other calls); result is its committed tool message, or nil while it runs.
func toolCard(call llm.ToolCall, key string, result *store.Message) views.ToolCard {
	c := views.ToolCard{ID: key, Name: call.Name, Args: prettyJSON(call.Arguments), Status: "running"}
	if result == nil {
		return c
	}
	c.Status, c.Duration = "ok", result.Duration
	if result.Status == store.StatusError {
		c.Status, c.ErrorCode = "error", result.Error
	}
	c.Result = prettyJSON(result.Content)
	if utf8.RuneCountInString(c.Result) > resultPreviewChars {
		c.Result, c.Truncated = string([]rune(c.Result)[:resultPreviewChars]), true
	}
	return c
}

// prettyJSON indents JSON for reading; anything else is returned as it is.
func prettyJSON(s string) string {
	var buf bytes.Buffer
	if json.Indent(&buf, []byte(s), "", "  ") != nil {
		return s
	}
	return buf.String()
}

// taskView maps a session's task state to the side panel.
func taskView(sessionID string, state []byte, errMsg string) views.TaskPanel {
	t := views.TaskPanel{SessionID: sessionID, Error: errMsg}
	ts, err := tools.ParseTaskState(state)
	if err != nil {
		return t
	}
	t.Goal, t.Stage, t.UpdatedAt = ts.Goal, ts.Stage, ts.UpdatedAt
	if len(ts.Params) > 0 {
		b, _ := json.MarshalIndent(ts.Params, "", "  ")
		t.Params = string(b)
	}
	return t
}

// meterView maps the context engine's zones to the meter (the total zone gives the limit).
func meterView(zones []contextwin.Zone) *views.ContextMeter {
	m := &views.ContextMeter{}
	for _, z := range zones {
		if z.Name == contextwin.ZoneTotal {
			m.Total, m.Limit = z.Tokens, z.Budget
			continue
		}
		if z.Name == contextwin.ZoneInstructions && z.Tokens == 0 {
			continue // a user without custom instructions needs no empty row
		}
		m.Zones = append(m.Zones, views.MeterZone{Name: z.Name, Tokens: z.Tokens, Budget: z.Budget})
	}
	return m
}
