package store

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"
)

// SearchHit is one match of SearchChats: a message (MessageID > 0) or a chat title
// (MessageID 0). Content is the message's whole text; the caller cuts the snippet.
type SearchHit struct {
	SessionID string
	Title     string
	MessageID int64
	Seq       int64
	Role      string
	Content   string
}

// MaxSearchHits caps SearchChats' limit.
const MaxSearchHits = 50

// SearchChats finds owner's chats whose title or user/assistant message text holds
// every word of query (case-insensitive substrings), newest message first. Temporary
// chats are not searched, nor versions that are not on a chat's branch on screen (a
// hit must open where the chat shows it). Words of three characters or more go through the trigram
// index; shorter ones (a trigram index cannot hold them) are matched with LIKE, over
// the index's hits when there are longer words, else over the owner's messages.
func (db *DB) SearchChats(ctx context.Context, owner int64, query string, limit int) ([]SearchHit, error) {
	words := strings.Fields(query)
	if len(words) == 0 {
		return nil, nil
	}
	limit = min(max(limit, 1), MaxSearchHits)
	var long []string
	var cond []string
	var args []any
	var titleCond []string
	var titleArgs []any
	for _, w := range words {
		like := "%" + likeEscaper.Replace(w) + "%"
		titleCond = append(titleCond, `s.title LIKE ? ESCAPE '\'`)
		titleArgs = append(titleArgs, like)
		if utf8.RuneCountInString(w) >= 3 {
			long = append(long, `"`+strings.ReplaceAll(w, `"`, `""`)+`"`)
			continue
		}
		cond = append(cond, `m.content LIKE ? ESCAPE '\'`)
		args = append(args, like)
	}
	var q string
	if len(long) > 0 {
		q = `SELECT s.id, s.title, m.id, m.seq, m.role, m.content
			FROM message_fts f CROSS JOIN messages m ON m.id = f.rowid CROSS JOIN sessions s ON s.id = m.session_id
			WHERE message_fts MATCH ? AND s.owner_id = ? AND m.active = 1`
		args = append([]any{strings.Join(long, " AND "), owner}, args...)
	} else {
		q = `SELECT s.id, s.title, m.id, m.seq, m.role, m.content
			FROM messages m CROSS JOIN sessions s ON s.id = m.session_id
			WHERE s.owner_id = ? AND s.temporary = 0 AND m.role IN ('user', 'assistant') AND m.active = 1`
		args = append([]any{owner}, args...)
	}
	for _, c := range cond {
		q += " AND " + c
	}
	// Newest first straight off the index (or the messages table, for short words), so
	// that a common word stops at the limit instead of sorting every match; CROSS JOIN
	// keeps SQLite from starting at the owner's sessions.
	if len(long) > 0 {
		q += ` ORDER BY f.rowid DESC LIMIT ?`
	} else {
		q += ` ORDER BY m.id DESC LIMIT ?`
	}
	args = append(args, limit)

	titles, err := db.pool.QueryContext(ctx, `SELECT s.id, s.title, 0, 0, '', '' FROM sessions s
		WHERE s.owner_id = ? AND s.temporary = 0 AND `+strings.Join(titleCond, " AND ")+`
		ORDER BY s.updated_at DESC, s.id LIMIT 5`, append([]any{owner}, titleArgs...)...)
	if err != nil {
		return nil, fmt.Errorf("store: search chats: %w", err)
	}
	hits, err := scanAll(titles, scanSearchHit)
	if err != nil {
		return nil, fmt.Errorf("store: search chats: %w", err)
	}
	rows, err := db.pool.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("store: search chats: %w", err)
	}
	msgs, err := scanAll(rows, scanSearchHit)
	if err != nil {
		return nil, fmt.Errorf("store: search chats: %w", err)
	}
	return append(hits, msgs...), nil
}

var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

func scanSearchHit(r scanner) (SearchHit, error) {
	var h SearchHit
	return h, r.Scan(&h.SessionID, &h.Title, &h.MessageID, &h.Seq, &h.Role, &h.Content)
}
