package views

import (
	"context"
	"io"
	"strconv"
	"strings"

	"github.com/a-h/templ"
)

// Search is the chat search: the query, its results, or why it was refused.
type Search struct {
	Query   string
	Results []SearchResult
	Error   string // a refused query (e.g. too long), shown instead of results
}

// SearchResult is one hit: a chat whose title matched (Seq 0) or one of its messages.
// Title and Snippet are cut and split by the server into plain text and matches.
type SearchResult struct {
	SessionID string
	Title     []SnippetPart
	Seq       int64
	Role      string // user|assistant, for a message hit
	Snippet   []SnippetPart
}

// SnippetPart is a run of a snippet's text; Match runs are shown in <mark>.
type SnippetPart struct {
	Text  string
	Match bool
}

// snippet renders parts as escaped text, matches wrapped in <mark>: the only markup in a
// snippet is the <mark> added here, whatever the message held.
func snippet(parts []SnippetPart) templ.Component {
	return templ.ComponentFunc(func(_ context.Context, w io.Writer) error {
		var b strings.Builder
		for _, p := range parts {
			if p.Match {
				b.WriteString("<mark>")
			}
			b.WriteString(templ.EscapeString(p.Text))
			if p.Match {
				b.WriteString("</mark>")
			}
		}
		_, err := io.WriteString(w, b.String())
		return err
	})
}

// searchResultPath opens the hit: the chat, at the message (?at= loads the page of
// turns around it; the fragment scrolls to it, also without JS).
func searchResultPath(r SearchResult) string {
	if r.Seq == 0 {
		return sessionPath(r.SessionID)
	}
	seq := strconv.FormatInt(r.Seq, 10)
	return sessionPath(r.SessionID, "?at="+seq+"#msg-"+seq)
}

func searchRoleLabel(role string) string {
	switch role {
	case "user":
		return "You"
	case "assistant":
		return "Assistant"
	}
	return "Title"
}

func newerPath(sessionID string, after int64) string {
	return sessionPath(sessionID, "/newer?after="+strconv.FormatInt(after, 10))
}

// chatSocketPath is the chat's websocket; opened at a message, it says so, so that the
// snapshot the socket sends (and morphs in) is the same page of turns.
func chatSocketPath(c Chat) string {
	if c.At > 0 {
		return sessionPath(c.Session.ID, "/ws?at="+strconv.FormatInt(c.At, 10))
	}
	return sessionPath(c.Session.ID, "/ws")
}
