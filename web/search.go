package web

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"atrium/internal/errs"
	"atrium/internal/store"
	"atrium/views"
)

const (
	searchResultsLimit = 30
	maxSearchRunes     = 200 // longer queries are refused: nobody types more, and each word costs a condition
	snippetRunes       = 160 // a snippet's length, about two lines of the sidebar
	snippetLead        = 40  // runes of context kept before the first match
)

// searchChats answers GET /search?q=: the user's own chats whose title or messages hold
// every word. htmx (the sidebar box) gets the list; a plain GET gets a page, so the
// search works without JS. Odd queries (operators, quotes, one character) are just text.
func (s *Server) searchChats(c echo.Context) error {
	u, _ := currentUser(c)
	q := cleanSearchText(c.QueryParam("q"))
	v := views.Search{Query: q}
	status := http.StatusOK
	switch {
	case q == "":
	case utf8.RuneCountInString(q) > maxSearchRunes:
		// 422: app.js swaps it in place, so the reason shows where the results would.
		v.Error = fmt.Sprintf("Search for at most %d characters.", maxSearchRunes)
		status = http.StatusUnprocessableEntity
	default:
		hits, err := s.Store.SearchChats(c.Request().Context(), u.ID, q, searchResultsLimit)
		if err != nil {
			return err
		}
		v.Results = searchResults(hits, q)
	}
	c.Response().Header().Add("Vary", "HX-Request")
	if isHTMX(c) {
		return render(c, status, views.SearchResults(v))
	}
	side, err := s.sessionList(c, "", "")
	if err != nil {
		return err
	}
	return render(c, status, views.SearchPage(s.page(c, "Search"), side, v))
}

// cleanSearchText makes text safe to show and to match: invalid UTF-8, control
// characters (NUL among them) and bidi controls become spaces, runs of white space one.
func cleanSearchText(t string) string {
	t = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || store.IsBidiControl(r) || r == utf8.RuneError {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(t, " "))
	return strings.Join(strings.Fields(t), " ")
}

func searchResults(hits []store.SearchHit, q string) []views.SearchResult {
	var words [][]rune
	for _, w := range strings.Fields(q) {
		words = append(words, foldRunes([]rune(w)))
	}
	out := make([]views.SearchResult, 0, len(hits))
	for _, h := range hits {
		title := h.Title
		if title == "" {
			title = "New chat"
		}
		r := views.SearchResult{SessionID: h.SessionID, Seq: h.Seq, Role: h.Role,
			Title: markMatches([]rune(cleanSearchText(title)), words, 0, store.MaxTitle)}
		if h.MessageID > 0 {
			text := []rune(cleanSearchText(snippetWindow(h.Content, words)))
			start := 0
			if at := firstMatch(foldRunes(text), words); at > snippetLead {
				start = at - snippetLead
			}
			r.Snippet = markMatches(text, words, start, snippetRunes)
		}
		out = append(out, r)
	}
	return out
}

// snippetWindow is the part of content around its first match that a snippet can
// show (twice the runes it needs, at 4 bytes a rune), so that a long message is never
// turned into runes whole: a hit may hold megabytes, and a search shows 50 hits.
func snippetWindow(content string, words [][]rune) string {
	before, after := 8*snippetLead, 8*snippetRunes
	if len(content) <= before+after {
		return content
	}
	at := max(0, firstMatchIn(content, words))
	from, to := max(0, at-before), min(len(content), at+after)
	for from > 0 && !utf8.RuneStart(content[from]) {
		from--
	}
	for to < len(content) && !utf8.RuneStart(content[to]) {
		to++
	}
	return content[from:to]
}

// firstMatchIn is the byte offset in s of the first of words (lower-cased runes), or
// -1, comparing rune by rune as foldRunes folds, without copying s.
func firstMatchIn(s string, words [][]rune) int {
	for i := 0; i < len(s); {
		for _, w := range words {
			if hasFoldedPrefix(s[i:], w) {
				return i
			}
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return -1
}

func hasFoldedPrefix(s string, w []rune) bool {
	for _, wr := range w {
		r, size := utf8.DecodeRuneInString(s)
		if size == 0 || unicode.ToLower(r) != wr {
			return false
		}
		s = s[size:]
	}
	return len(w) > 0
}

// foldRunes lower-cases rune by rune, so positions in the result are positions in the
// original (strings.ToLower may change lengths).
func foldRunes(rs []rune) []rune {
	out := make([]rune, len(rs))
	for i, r := range rs {
		out[i] = unicode.ToLower(r)
	}
	return out
}

// indexRunes is the first position of w in s at or after from, or -1.
func indexRunes(s, w []rune, from int) int {
	for i := from; i+len(w) <= len(s); i++ {
		if runesEqual(s[i:i+len(w)], w) {
			return i
		}
	}
	return -1
}

func runesEqual(a, b []rune) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func firstMatch(folded []rune, words [][]rune) int {
	first := -1
	for _, w := range words {
		if i := indexRunes(folded, w, 0); i >= 0 && (first < 0 || i < first) {
			first = i
		}
	}
	return first
}

// markMatches cuts text[start:start+n] (with "…" where text was cut) and splits it into
// parts, every occurrence of a word marked. Matching is on lower-cased runes, like the
// index's case folding; a match the fold misses is simply not marked.
func markMatches(text []rune, words [][]rune, start, n int) []views.SnippetPart {
	end := min(len(text), start+n)
	if end-start < n { // near the end: show more of what comes before
		start = max(0, end-n)
	}
	// Cut at spaces where there is one near (not in Chinese, which has none).
	if start > 0 {
		if i := indexRunes(text[:min(end, start+12)], []rune{' '}, start); i >= 0 {
			start = i + 1
		}
	}
	if end < len(text) {
		for i := end - 1; i > max(start, end-12); i-- {
			if text[i] == ' ' {
				end = i
				break
			}
		}
	}
	folded := foldRunes(text[:end])
	marked := make([]bool, end)
	for _, w := range words {
		if len(w) == 0 {
			continue
		}
		for i := indexRunes(folded, w, max(0, start-len(w)+1)); i >= 0; i = indexRunes(folded, w, i+1) {
			for j := i; j < i+len(w) && j < end; j++ {
				marked[j] = true
			}
		}
	}
	var parts []views.SnippetPart
	if start > 0 {
		parts = append(parts, views.SnippetPart{Text: "…"})
	}
	for i := start; i < end; {
		j := i
		for j < end && marked[j] == marked[i] {
			j++
		}
		parts = append(parts, views.SnippetPart{Text: string(text[i:j]), Match: marked[i]})
		i = j
	}
	if end < len(text) {
		parts = append(parts, views.SnippetPart{Text: "…"})
	}
	return parts
}

// chatViewAt is chatView opened at message seq at (a search result): when it is older
// than the latest page, the page is the whole turns around it, with "Load older" and
// "Load newer"; either way the message is marked as the target.
func (s *Server) chatViewAt(ctx context.Context, ss store.Session, snap Snapshot, at int64) (views.Chat, error) {
	chat, err := s.chatView(ctx, ss, snap)
	if err != nil || at <= 0 {
		return chat, err
	}
	chat.At = at
	if chat.OlderCursor > 0 && at < chat.OlderCursor {
		msgs, hasOlder, hasNewer, err := s.Store.MessagesAround(ctx, ss.ID, at, messagesPerPage)
		if err != nil {
			return views.Chat{}, err
		}
		if len(msgs) > 0 {
			if chat.Messages, err = s.pageViews(ctx, ss.ID, msgs, liveHider(snap)); err != nil {
				return views.Chat{}, err
			}
			if err := s.fillMemoryChips(ctx, ss.OwnerID, ss.ID, chat.Messages); err != nil {
				return views.Chat{}, err
			}
			chat.OlderCursor, chat.NewerCursor = 0, 0
			if hasOlder {
				chat.OlderCursor = msgs[0].Seq
			}
			if hasNewer {
				chat.NewerCursor = msgs[len(msgs)-1].Seq
			}
		}
	}
	for i := range chat.Messages {
		chat.Messages[i].Target = chat.Messages[i].Seq == at
	}
	return chat, nil
}

// liveHider leaves out the messages of the reply still streaming (the live view shows them).
func liveHider(snap Snapshot) func(store.Message) bool {
	return func(m store.Message) bool { return snap.Live != nil && m.Seq > snap.AfterSeq }
}

// atParam is the ?at= message seq a chat is opened at (0: none, or not a number).
func atParam(c echo.Context) int64 {
	at, err := strconv.ParseInt(c.QueryParam("at"), 10, 64)
	if err != nil || at < 0 {
		return 0
	}
	return at
}

// newerMessages serves the page of whole turns after ?after=SEQ ("Load newer", on a
// chat opened at an old search result).
func (s *Server) newerMessages(c echo.Context) error {
	ss, err := s.ownedSession(c)
	if err != nil {
		return err
	}
	after, err := strconv.ParseInt(c.QueryParam("after"), 10, 64)
	if err != nil || after < 0 {
		return errs.E(errs.Invalid, "Bad 'after' parameter.")
	}
	ctx := c.Request().Context()
	msgs, hasNewer, err := s.Store.MessagesAfterPage(ctx, ss.ID, after, messagesPerPage)
	if err != nil {
		return err
	}
	items, err := s.pageViews(ctx, ss.ID, msgs, liveHider(s.Hub.Snapshot(ss.ID)))
	if err != nil {
		return err
	}
	if err := s.fillMemoryChips(ctx, ss.OwnerID, ss.ID, items); err != nil {
		return err
	}
	var cursor int64
	if hasNewer && len(msgs) > 0 {
		cursor = msgs[len(msgs)-1].Seq
	}
	return render(c, http.StatusOK, views.NewerMessages(ss.ID, items, cursor))
}
