package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"atrium/internal/contextwin"
	"atrium/internal/errs"
	"atrium/internal/jsonpos"
	"atrium/internal/store"
	"atrium/internal/tools"
)

// chatsExport is the documented export and import format of chats (README, Chats):
// one chat (from a chat's menu) or all of a user's (from Account), oldest first, each
// with its whole transcript: user and assistant messages, tool calls and results.
type chatsExport struct {
	Format  string       `json:"format"`  // chatsFormat
	Version int          `json:"version"` // 1
	Chats   []chatExport `json:"chats"`
}

type chatExport struct {
	Title        string          `json:"title"`
	CreatedAt    string          `json:"created_at,omitempty"` // RFC 3339
	SystemPrompt string          `json:"system_prompt,omitempty"`
	Task         json.RawMessage `json:"task,omitempty"` // the task panel's state, a JSON object
	Temporary    bool            `json:"temporary,omitempty"`
	Messages     []messageExport `json:"messages"`
}

type messageExport struct {
	Role       string           `json:"role"` // user, assistant or tool
	Content    string           `json:"content"`
	Reasoning  string           `json:"reasoning,omitempty"`
	ToolCalls  []toolCallExport `json:"tool_calls,omitempty"`   // an assistant step that called tools
	ToolCallID string           `json:"tool_call_id,omitempty"` // a tool result: the call it answers
	Status     string           `json:"status,omitempty"`       // complete (default), stopped or error
	Error      string           `json:"error,omitempty"`
	Model      string           `json:"model,omitempty"`
	CreatedAt  string           `json:"created_at,omitempty"`
	Files      []fileExport     `json:"files,omitempty"` // a user message's attached files
}

// fileExport is an attached file in an export: its name, its type as sniffed, and its
// bytes (base64 in the JSON). An import checks it again like an upload.
type fileExport struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Data []byte `json:"data"`
}

type toolCallExport struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"` // JSON text, as the model wrote it
}

// storedToolCall is how a tool call is kept in messages.tool_calls (llm.ToolCall).
type storedToolCall struct{ ID, Name, Arguments string }

const chatsFormat = "atrium.chats"

// Import limits: a person's chats, not a data dump.
const (
	maxChatsImportBytes = 32 << 20
	maxImportChats      = 2000
	maxImportMessages   = 20000 // per chat
)

// exportChats gives every chat of the user as one JSON file (chatsExport), written a
// chat at a time: the files of all chats together may be far larger than the memory
// one request should take. A chat that fails after the first is written leaves the
// file cut short, which an import refuses, and is logged.
func (s *Server) exportChats(c echo.Context) error {
	u, _ := currentUser(c)
	ctx := c.Request().Context()
	ss, err := s.Store.OwnerSessions(ctx, u.ID)
	if err != nil {
		return err
	}
	w := c.Response()
	jsonFileHeaders(c, "atrium-chats.json")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("    ", "  ")
	fmt.Fprintf(w, "{\n  \"format\": %q,\n  \"version\": 1,\n  \"chats\": [", chatsFormat)
	for i, ss := range ss {
		ch, err := s.chatExport(c, ss)
		if err == nil {
			sep := "\n    "
			if i > 0 {
				sep = "," + sep
			}
			if _, err = io.WriteString(w, sep); err == nil {
				err = enc.Encode(ch)
			}
		}
		if err != nil {
			s.Log.Warn("web: export chats: cut short", "user", u.ID, "chat", ss.ID, "err", err)
			return nil
		}
	}
	_, err = io.WriteString(w, "  ]\n}\n")
	return err
}

// exportChat gives one chat, as JSON (the import format) or as Markdown.
func (s *Server) exportChat(c echo.Context) error {
	ss, err := s.ownedSession(c)
	if err != nil {
		return err
	}
	ch, err := s.chatExport(c, ss)
	if err != nil {
		return err
	}
	name := exportFileName(ch.Title)
	if c.QueryParam("format") == "md" {
		c.Response().Header().Set(echo.HeaderContentDisposition, `attachment; filename="`+name+`.md"`)
		c.Response().Header().Set("Cache-Control", "no-store")
		return c.Blob(http.StatusOK, "text/markdown; charset=utf-8", []byte(chatMarkdown(ch)))
	}
	return sendJSONFile(c, chatsExport{Format: chatsFormat, Version: 1, Chats: []chatExport{ch}}, name+".json")
}

func (s *Server) chatExport(c echo.Context, ss store.Session) (chatExport, error) {
	msgs, err := s.Store.AllMessages(c.Request().Context(), ss.ID)
	if err != nil {
		return chatExport{}, err
	}
	var users []int64
	for _, m := range msgs {
		if m.Role == store.RoleUser {
			users = append(users, m.ID)
		}
	}
	files, err := s.Store.MessageFiles(c.Request().Context(), ss.ID, users)
	if err != nil {
		return chatExport{}, err
	}
	ch := chatExport{Title: ss.Title, CreatedAt: ss.CreatedAt.UTC().Format(time.RFC3339), SystemPrompt: ss.SystemPrompt,
		Temporary: ss.Temporary, Messages: make([]messageExport, 0, len(msgs))}
	if st := bytes.TrimSpace(ss.State); len(st) > 0 && !bytes.Equal(st, []byte("{}")) {
		ch.Task = json.RawMessage(st)
	}
	for _, m := range msgs {
		e := messageExport{Role: m.Role, Content: m.Content, Reasoning: m.Reasoning, ToolCallID: m.ToolCallID,
			Error: m.Error, Model: m.Model, CreatedAt: m.CreatedAt.UTC().Format(time.RFC3339)}
		if m.Status != store.StatusComplete {
			e.Status = m.Status
		}
		for _, a := range files[m.ID] {
			e.Files = append(e.Files, fileExport{Name: a.Name, Type: a.MIME, Data: a.Data})
		}
		if len(m.ToolCalls) > 0 {
			var calls []storedToolCall
			if err := json.Unmarshal(m.ToolCalls, &calls); err != nil {
				return chatExport{}, fmt.Errorf("web: export: message %d tool calls: %w", m.ID, err)
			}
			for _, tc := range calls {
				e.ToolCalls = append(e.ToolCalls, toolCallExport{ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments})
			}
		}
		ch.Messages = append(ch.Messages, e)
	}
	return ch, nil
}

func sendJSONFile(c echo.Context, v any, name string) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	jsonFileHeaders(c, name)
	return c.Blob(http.StatusOK, "application/json", buf.Bytes())
}

// jsonFileHeaders makes the response a JSON download named name, never cached.
func jsonFileHeaders(c echo.Context, name string) {
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "application/json")
	h.Set(echo.HeaderContentDisposition, `attachment; filename="`+name+`"`)
	h.Set("Cache-Control", "no-store")
}

// exportFileName makes a file name from a title: letters, digits and dashes only.
func exportFileName(title string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(title) {
		if r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
		if b.Len() >= 60 {
			break
		}
	}
	name := strings.Trim(b.String(), "-")
	if name == "" {
		name = "chat"
	}
	return "atrium-" + name
}

// chatMarkdown renders a chat for reading: the title, then each message under its
// speaker; tool calls and results as fenced blocks.
func chatMarkdown(ch chatExport) string {
	var b strings.Builder
	title := ch.Title
	if title == "" {
		title = "Chat"
	}
	fmt.Fprintf(&b, "# %s\n\n", title)
	if ch.SystemPrompt != "" {
		fmt.Fprintf(&b, "> Instructions for this chat: %s\n\n", strings.ReplaceAll(ch.SystemPrompt, "\n", "\n> "))
	}
	for _, m := range ch.Messages {
		switch m.Role {
		case store.RoleUser:
			fmt.Fprintf(&b, "## You · %s\n\n%s\n\n", m.CreatedAt, m.Content)
			for _, f := range m.Files {
				fmt.Fprintf(&b, "*Attached: %s (%s, %d bytes; in the JSON export)*\n\n", f.Name, f.Type, len(f.Data))
			}
		case store.RoleAssistant:
			who := "Assistant"
			if m.Model != "" {
				who += " (" + m.Model + ")"
			}
			fmt.Fprintf(&b, "## %s · %s\n\n", who, m.CreatedAt)
			if m.Content != "" {
				b.WriteString(m.Content + "\n\n")
			}
			for _, tc := range m.ToolCalls {
				fmt.Fprintf(&b, "Tool call `%s`:\n\n%s\n\n", tc.Name, fence(tc.Arguments, "json"))
			}
		case store.RoleTool:
			fmt.Fprintf(&b, "Tool result:\n\n%s\n\n", fence(m.Content, ""))
		}
		if m.Error != "" {
			fmt.Fprintf(&b, "*%s*\n\n", m.Error)
		}
	}
	return b.String()
}

// fence puts text in a code fence longer than any backtick run inside it.
func fence(text, lang string) string {
	f := contextwin.Fence(text)
	return f + lang + "\n" + text + "\n" + f
}

// importChats adds the chats of an export (a file, or pasted JSON) as new chats of
// the user: all of them or, when anything is wrong, none, with the reason and place.
func (s *Server) importChats(c echo.Context) error {
	u, _ := currentUser(c)
	data := []byte(c.FormValue("json"))
	if file, ok, err := uploadedFile(c, "file", maxChatsImportBytes); err != nil {
		return err
	} else if ok {
		data = file
	}
	chats, err := parseChatsImport(c.Request().Context(), data, s.Config.MaxPromptBytes())
	if err == nil {
		for i := range chats {
			chats[i].ID = s.NewID()
			for j := range chats[i].Messages {
				for k := range chats[i].Messages[j].Attachments {
					chats[i].Messages[j].Attachments[k].ID = uuid.NewString()
				}
			}
		}
		err = s.Store.ImportChats(c.Request().Context(), u.ID, chats)
	}
	if err != nil {
		if errs.Code(err) == errs.Internal {
			return err
		}
		return s.accountFail(c, errs.E(errs.Code(err), "%s Nothing was imported.", errs.Message(err)), nil)
	}
	n := 0
	for _, ch := range chats {
		n += len(ch.Messages)
	}
	return c.Redirect(http.StatusSeeOther, "/settings/account?notice="+url.QueryEscape(fmt.Sprintf("Imported %d chats with %d messages.", len(chats), n)))
}

// importedFile checks an exported file as an upload is checked and returns it ready to
// store (without id, owner or chat).
func importedFile(ctx context.Context, f fileExport) (store.Attachment, error) {
	a, err := checkFile(ctx, fileName(f.Name), f.Data)
	if err != nil {
		return a, err
	}
	if a.Kind == store.AttachText {
		if f.Type == store.PDFText {
			a.MIME = store.PDFText // the text of a PDF, as exported
		}
		a.Tokens = contextwin.NewTokenizer().Count(contextwin.FileBlock(a.Name, a.MIME, string(a.Data)))
	}
	return a, nil
}

// parseChatsImport checks a whole import before anything is stored. Malformed JSON
// is "line L, column C: …"; a bad chat or message names it ("chat 2, message 5: …"),
// up to ten problems at once.
func parseChatsImport(ctx context.Context, data []byte, maxText int) ([]store.ImportedChat, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errs.E(errs.Invalid, `The import is empty: choose a file exported from Atrium ({"format": "atrium.chats", …}).`)
	}
	if len(data) > maxChatsImportBytes {
		return nil, errs.E(errs.TooLarge, "The import is larger than %d MB.", maxChatsImportBytes>>20)
	}
	var doc chatsExport
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, jsonpos.Error(data, err)
	}
	switch {
	case doc.Format != chatsFormat:
		return nil, errs.E(errs.Invalid, `This is not an Atrium chats export: "format" must be %q.`, chatsFormat)
	case doc.Version != 1:
		return nil, errs.E(errs.Invalid, `This export has version %d; this Atrium reads version 1.`, doc.Version)
	case len(doc.Chats) == 0:
		return nil, errs.E(errs.Invalid, `The export has no chats.`)
	case len(doc.Chats) > maxImportChats:
		return nil, errs.E(errs.TooLarge, "The export has %d chats; at most %d can be imported at once.", len(doc.Chats), maxImportChats)
	}
	var problems []string
	out := make([]store.ImportedChat, 0, len(doc.Chats))
	for i, ch := range doc.Chats {
		at := func(format string, args ...any) {
			problems = append(problems, fmt.Sprintf("chat %d: ", i+1)+fmt.Sprintf(format, args...))
		}
		ic := store.ImportedChat{Title: store.CleanTitle(ch.Title), SystemPrompt: cleanInstructions(ch.SystemPrompt), Temporary: ch.Temporary}
		if ch.CreatedAt != "" {
			t, err := time.Parse(time.RFC3339, ch.CreatedAt)
			if err != nil {
				at(`"created_at" must be an RFC 3339 time like 2025-01-31T09:30:00Z`)
			}
			ic.CreatedAt = t
		}
		if utf8.RuneCountInString(ic.SystemPrompt) > store.MaxSystemPrompt {
			at("the chat's instructions are longer than %d characters", store.MaxSystemPrompt)
		}
		if len(ch.Task) > 0 && string(ch.Task) != "null" {
			if err := tools.ValidateTaskState(ch.Task); err != nil {
				at("the task is not valid: %s", taskProblem(err))
			}
			ic.State = ch.Task
		}
		if len(ch.Messages) > maxImportMessages {
			at("%d messages; at most %d per chat", len(ch.Messages), maxImportMessages)
			continue
		}
		calls := map[string]bool{} // tool call ids asked so far, for the results' check
		for j, m := range ch.Messages {
			bad := func(format string, args ...any) {
				problems = append(problems, fmt.Sprintf("chat %d, message %d: ", i+1, j+1)+fmt.Sprintf(format, args...))
			}
			sm := store.Message{Role: m.Role, Content: m.Content, Reasoning: m.Reasoning, ToolCallID: m.ToolCallID,
				Status: m.Status, Error: m.Error, Model: m.Model}
			switch m.Role {
			case store.RoleUser, store.RoleAssistant, store.RoleTool:
			default:
				bad(`"role" must be "user", "assistant" or "tool", not %q`, m.Role)
			}
			switch m.Status {
			case "", store.StatusComplete, store.StatusStopped, store.StatusError:
			default:
				bad(`"status" must be "complete", "stopped" or "error", not %q`, m.Status)
			}
			if !utf8.ValidString(m.Content) || strings.ContainsRune(m.Content, 0) {
				bad("the content holds invalid text (not UTF-8, or a NUL)")
			}
			// As large as a message the chat itself takes (text with attached resources).
			if len(m.Content) > maxText || len(m.Reasoning) > maxText {
				bad("the content or reasoning is larger than %s, the most a chat message holds", byteSize(int64(maxText)))
			}
			if len(m.ToolCalls) > 0 {
				if m.Role != store.RoleAssistant {
					bad(`only an assistant message can have "tool_calls"`)
				}
				stored := make([]storedToolCall, 0, len(m.ToolCalls))
				for k, tc := range m.ToolCalls {
					// Arguments are kept as the model wrote them, broken JSON included (its
					// call got an invalid_arguments result), so a chat's own export imports.
					if tc.Name == "" || len(tc.Arguments) > maxText {
						bad(`tool call %d needs a "name" and "arguments" of at most %s`, k+1, byteSize(int64(maxText)))
					}
					calls[tc.ID] = true
					stored = append(stored, storedToolCall{ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments})
				}
				sm.ToolCalls, _ = json.Marshal(stored)
			}
			if m.Role == store.RoleTool && !calls[m.ToolCallID] {
				bad(`a tool result must follow the call it answers ("tool_call_id" %q is not a call before it)`, m.ToolCallID)
			}
			if m.CreatedAt != "" {
				t, err := time.Parse(time.RFC3339, m.CreatedAt)
				if err != nil {
					bad(`"created_at" must be an RFC 3339 time`)
				}
				sm.CreatedAt = t
			}
			if len(m.Files) > 0 && m.Role != store.RoleUser {
				bad(`only a user message can have "files"`)
			}
			if len(m.Files) > maxFilesPerMessage {
				bad("%d files; at most %d per message", len(m.Files), maxFilesPerMessage)
			}
			var filesSize int
			for k, f := range m.Files {
				// Checked like an upload: by content, whatever "type" says.
				a, err := importedFile(ctx, f)
				if err != nil {
					bad("file %d: %s", k+1, errs.Message(err))
					continue
				}
				filesSize += len(a.Data)
				sm.Attachments = append(sm.Attachments, a)
			}
			if filesSize > maxMessageFiles {
				bad("its files hold %s; at most %s per message", megabytes(int64(filesSize)), megabytes(maxMessageFiles))
			}
			ic.Messages = append(ic.Messages, sm)
		}
		out = append(out, ic)
	}
	if len(problems) > 0 {
		if len(problems) > 10 {
			problems = append(problems[:10], fmt.Sprintf("and %d more", len(problems)-10))
		}
		return nil, errs.E(errs.Invalid, "%s.", strings.Join(problems, "; "))
	}
	return out, nil
}
