package store

import (
	"context"
	"fmt"
)

// MessagesAround returns the whole turns around message seq (a turn starts at a user
// message and runs to the next one): about limit/2 messages before and after it, widened
// to turn boundaries so that no tool call is shown without its result. It reports
// whether older and newer messages exist outside the window. It is what a search result
// opens when its message is older than the chat's latest page. Limits as for
// LatestMessages; an unknown session or seq yields no messages.
func (db *DB) MessagesAround(ctx context.Context, sessionID string, seq int64, limit int) (msgs []Message, hasOlder, hasNewer bool, err error) {
	if limit <= 0 {
		limit = DefaultMessagePage
	}
	limit = min(limit, MaxMessagePage)
	half := limit / 2
	// The window starts at the turn holding the message half a page before seq and ends
	// before the first turn that starts after the one half a page after it. The bounds
	// count messages on screen, not seq numbers: versions an edit replaced leave gaps.
	rows, err := db.pool.QueryContext(ctx, `WITH
		lo AS (SELECT seq FROM messages WHERE session_id = ?1 AND active = 1 AND seq <= ?2 ORDER BY seq DESC LIMIT 1 OFFSET ?3),
		hi AS (SELECT seq FROM messages WHERE session_id = ?1 AND active = 1 AND seq >= ?2 ORDER BY seq LIMIT 1 OFFSET ?3)
		SELECT `+messageCols+` FROM messages
		WHERE session_id = ?1 AND active = 1
			AND seq >= coalesce((SELECT max(seq) FROM messages WHERE session_id = ?1 AND active = 1 AND role = 'user' AND seq <= (SELECT seq FROM lo)), 1)
			AND seq < coalesce((SELECT min(seq) FROM messages WHERE session_id = ?1 AND active = 1 AND role = 'user' AND seq > (SELECT seq FROM hi)), 9223372036854775807)
			AND EXISTS (SELECT 1 FROM messages WHERE session_id = ?1 AND active = 1 AND seq = ?2)
		ORDER BY seq LIMIT ?4`, sessionID, seq, half, MaxMessagePage)
	if err != nil {
		return nil, false, false, fmt.Errorf("store: messages around: %w", err)
	}
	if msgs, err = scanAll(rows, scanMessage); err != nil {
		return nil, false, false, fmt.Errorf("store: messages around: %w", err)
	}
	if len(msgs) == 0 {
		return nil, false, false, nil
	}
	err = db.pool.QueryRowContext(ctx, `SELECT
		EXISTS (SELECT 1 FROM messages WHERE session_id = ?1 AND active = 1 AND seq < ?2),
		EXISTS (SELECT 1 FROM messages WHERE session_id = ?1 AND active = 1 AND seq > ?3)`,
		sessionID, msgs[0].Seq, msgs[len(msgs)-1].Seq).Scan(&hasOlder, &hasNewer)
	if err != nil {
		return nil, false, false, fmt.Errorf("store: messages around: %w", err)
	}
	return msgs, hasOlder, hasNewer, nil
}

// MessagesAfterPage returns about limit messages after afterSeq, ascending, ending at a
// turn boundary (before a user message, or at the chat's end), and whether newer ones
// exist: the "Load newer" page of a chat opened at a search result. Limits as for
// LatestMessages.
func (db *DB) MessagesAfterPage(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]Message, bool, error) {
	if limit <= 0 {
		limit = DefaultMessagePage
	}
	limit = min(limit, MaxMessagePage)
	// The page ends before the first turn that starts after its limit-th message (counted
	// on screen: an edit's replaced versions leave gaps in seq), or at the chat's end.
	rows, err := db.pool.QueryContext(ctx, `WITH
		last AS (SELECT seq FROM messages WHERE session_id = ?1 AND active = 1 AND seq > ?2 ORDER BY seq LIMIT 1 OFFSET ?3 - 1)
		SELECT `+messageCols+` FROM messages
		WHERE session_id = ?1 AND active = 1 AND seq > ?2
			AND seq < coalesce((SELECT min(seq) FROM messages WHERE session_id = ?1 AND active = 1 AND role = 'user' AND seq > (SELECT seq FROM last)), 9223372036854775807)
		ORDER BY seq LIMIT ?4`, sessionID, afterSeq, limit, MaxMessagePage)
	if err != nil {
		return nil, false, fmt.Errorf("store: messages after page: %w", err)
	}
	msgs, err := scanAll(rows, scanMessage)
	if err != nil {
		return nil, false, fmt.Errorf("store: messages after page: %w", err)
	}
	last := afterSeq
	if len(msgs) > 0 {
		last = msgs[len(msgs)-1].Seq
	}
	var hasNewer bool
	if err := db.pool.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM messages WHERE session_id = ? AND active = 1 AND seq > ?)`,
		sessionID, last).Scan(&hasNewer); err != nil {
		return nil, false, fmt.Errorf("store: messages after page: %w", err)
	}
	return msgs, hasNewer, nil
}
