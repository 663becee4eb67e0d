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
	// Starting from the index (or from every message, for short words) reads other
	// users' matches too: a user with two messages beside one with 100,000 waited
	// 80–124 ms for a search with no hits. A user with few messages is searched from
	// them instead: each looked up in the index (about half a millisecond a message),
	// or, for short words only, matched with LIKE.
	own, err := db.countMessages(ctx, owner, fewForLike)
	if err != nil {
		return nil, fmt.Errorf("store: search chats: %w", err)
	}
	// Newest first straight off the index (or the messages table, for short words), so
	// that a common word stops at the limit instead of sorting every match; CROSS JOIN
	// keeps SQLite from starting at the owner's sessions unless that is the plan.
	q, order := "", ` ORDER BY m.id DESC LIMIT ?`
	switch {
	case len(long) > 0 && own < fewForIndex:
		q = `SELECT s.id, s.title, m.id, m.seq, m.role, m.content
			FROM sessions s CROSS JOIN messages m ON m.session_id = s.id
			WHERE s.owner_id = ? AND s.temporary = 0 AND m.role IN ('user', 'assistant') AND m.active = 1
				AND EXISTS (SELECT 1 FROM message_fts WHERE message_fts MATCH ? AND rowid = m.id)`
		args = append([]any{owner, strings.Join(long, " AND ")}, args...)
	case len(long) > 0:
		order = ` ORDER BY f.rowid DESC LIMIT ?`
		q = `SELECT s.id, s.title, m.id, m.seq, m.role, m.content
			FROM message_fts f CROSS JOIN messages m ON m.id = f.rowid CROSS JOIN sessions s ON s.id = m.session_id
			WHERE message_fts MATCH ? AND s.owner_id = ? AND m.active = 1`
		args = append([]any{strings.Join(long, " AND "), owner}, args...)
	case own < fewForLike:
		q = `SELECT s.id, s.title, m.id, m.seq, m.role, m.content
			FROM sessions s CROSS JOIN messages m ON m.session_id = s.id
			WHERE s.owner_id = ? AND s.temporary = 0 AND m.role IN ('user', 'assistant') AND m.active = 1`
		args = append([]any{owner}, args...)
	default:
		q = `SELECT s.id, s.title, m.id, m.seq, m.role, m.content
			FROM messages m CROSS JOIN sessions s ON s.id = m.session_id
			WHERE s.owner_id = ? AND s.temporary = 0 AND m.role IN ('user', 'assistant') AND m.active = 1`
		args = append([]any{owner}, args...)
	}
	for _, c := range cond {
		q += " AND " + c
	}
	q += order
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

// How many messages a user may have for a search to start from their own: looked up
// in the index one by one (fewForIndex), or matched with LIKE (fewForLike).
const (
	fewForIndex = 64
	fewForLike  = 1000
)

// countMessages counts owner's messages that search reads, up to upTo.
func (db *DB) countMessages(ctx context.Context, owner int64, upTo int) (int, error) {
	var n int
	err := db.pool.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM sessions s CROSS JOIN messages m ON m.session_id = s.id
		WHERE s.owner_id = ? AND s.temporary = 0 AND m.active = 1 LIMIT ?)`, owner, upTo).Scan(&n)
	return n, err
}

var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

func scanSearchHit(r scanner) (SearchHit, error) {
	var h SearchHit
	return h, r.Scan(&h.SessionID, &h.Title, &h.MessageID, &h.Seq, &h.Role, &h.Content)
}
