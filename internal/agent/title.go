package agent

import (
	"context"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"atrium/internal/llm"
	"atrium/internal/store"
)

// PurposeTitle marks the model request and response events of the title a chat gets
// after its first reply.
const PurposeTitle = "title"

// titlePrompt asks for a short title; the model sees the first exchange only.
const titlePrompt = `Write a title for this conversation: at most six words, in the language of the user's message. Answer with the title alone: no quotes, no "Title:", no punctuation at the end.`

// titleExcerpt bounds each side of the exchange shown to the model, in characters.
const titleExcerpt = 1000

// titleTimeout bounds the title call: a title is a nicety, never worth a long wait.
const titleTimeout = 30 * time.Second

// thinkRE drops the reasoning some local models put inline in their answer.
var thinkRE = regexp.MustCompile(`(?s)<think>.*?</think>`)

// wantsTitle reports whether the chat still has its provisional first-line title,
// which the model may replace (the user's own title always stays).
func (t *turn) wantsTitle(ctx context.Context) bool {
	if !t.a.cfg.GenerateTitles {
		return false
	}
	if t.s.Title != "" && t.s.TitleSource != store.TitleFromMessage {
		return false // titled before this turn began: a source never goes back to first_line
	}
	s, err := t.a.Store.SessionForOwner(ctx, t.s.ID, t.s.OwnerID)
	return err == nil && s.TitleSource == store.TitleFromMessage
}

// title asks the chat's model for a title of the first exchange and sets it unless the
// user renamed the chat meanwhile. A failure leaves the first-line title, which then
// stays: the chat is not asked about again on every reply.
func (t *turn) title(base context.Context) {
	a := t.a
	ctx, cancel := context.WithTimeout(base, titleTimeout)
	defer cancel()
	exchange := "User: " + excerpt(t.user.Content, titleExcerpt) + "\n\nAssistant: " + excerpt(t.final.Content, titleExcerpt)
	req := llm.Request{Model: t.model, Messages: []llm.Message{
		{Role: llm.RoleSystem, Content: titlePrompt}, {Role: llm.RoleUser, Content: exchange}}}
	started := a.Now()
	t.emit(Event{Kind: EventModelRequest, Model: t.model, Request: &req, Purpose: PurposeTitle})
	var sent *llm.HTTPRequest
	resp, err := t.provider.Stream(llm.WithCapture(ctx, func(h *llm.HTTPRequest) { sent = h }), req, func(llm.Event) {})
	t.inTok += resp.Usage.InputTokens
	t.outTok += resp.Usage.OutputTokens
	t.emit(Event{Kind: EventModelResponse, Model: t.model, Request: &req, Response: &resp, Wire: sent, Err: err,
		Duration: a.Now().Sub(started), Purpose: PurposeTitle})
	title := ""
	if err == nil {
		title = cleanModelTitle(resp.Content)
	}
	if title == "" {
		// Keep the first line, and mark it final so that no later reply asks again.
		s, err := a.Store.SessionForOwner(ctx, t.s.ID, t.s.OwnerID)
		if err != nil {
			return
		}
		title = s.Title
	}
	ok, err := a.Store.SetModelTitle(ctx, t.s.ID, t.s.OwnerID, title)
	if err != nil {
		a.Log.Warn("agent: title not saved", "session", t.s.ID, "err", err)
		return
	}
	if !ok {
		return // renamed by the user meanwhile
	}
	if s, err := a.Store.SessionForOwner(ctx, t.s.ID, t.s.OwnerID); err == nil {
		a.publish(Event{Kind: EventTitle, SessionID: s.ID, OwnerID: s.OwnerID, Session: &s})
	}
}

// cleanModelTitle takes the title out of a model's answer: the first non-empty line,
// without inline reasoning, a "Title:" prefix, markdown marks or quotes around it.
func cleanModelTitle(answer string) string {
	answer = thinkRE.ReplaceAllString(answer, "")
	for line := range strings.SplitSeq(answer, "\n") {
		// Peel marks until none is left: **Title: "Paris".** → Paris.
		for prev := ""; prev != line; {
			prev = line
			line = strings.Trim(line, "#*_`\"'“”‘’«» \t.。!！")
			if strings.HasPrefix(strings.ToLower(line), "title:") {
				line = line[len("title:"):]
			}
		}
		if line = store.CleanTitle(line); line != "" {
			if utf8.RuneCountInString(line) > 80 {
				line = string([]rune(line)[:79]) + "…"
			}
			return line
		}
	}
	return ""
}

// excerpt cuts s to n characters, marking the cut.
func excerpt(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + " …"
}
