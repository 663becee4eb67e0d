package contextwin

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"time"

	"atrium/internal/store"
)

// DefaultLoadMax is how many messages Load returns when max <= 0.
const DefaultLoadMax = 400

const loadQuery = `SELECT id, seq, role, content, tool_calls, tool_call_id, status, tokens, created_at, updated_at
	FROM messages WHERE session_id = ? AND seq > ? ORDER BY seq DESC LIMIT ?`

// loadStmts holds Load's prepared statement per database, so that the hot
// path does not re-parse its SQL every turn.
var loadStmts sync.Map // *sql.DB -> *sql.Stmt

// Load returns the newest max messages of the session with seq > afterSeq
// (the summary's watermark), ascending: what Assemble needs, at a cost that
// does not grow with the session (one range scan of the (session_id, seq)
// index). max <= 0 means DefaultLoadMax. Only the fields the context engine
// reads are filled: Reasoning, Error and Model are left empty, and SessionID
// is sessionID. An unknown session yields no messages; ownership is the
// caller's check. Safe for concurrent use.
func Load(ctx context.Context, db *sql.DB, sessionID string, afterSeq int64, max int) ([]store.Message, error) {
	if max <= 0 {
		max = DefaultLoadMax
	}
	st, err := loadStmt(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("contextwin: load: %w", err)
	}
	rows, err := st.QueryContext(ctx, sessionID, afterSeq, max)
	if err != nil {
		return nil, fmt.Errorf("contextwin: load: %w", err)
	}
	defer rows.Close()
	msgs := make([]store.Message, 0, min(max, 64))
	for rows.Next() {
		m := store.Message{SessionID: sessionID}
		var calls sql.NullString
		var created, updated int64
		if err := rows.Scan(&m.ID, &m.Seq, &m.Role, &m.Content, &calls, &m.ToolCallID, &m.Status, &m.Tokens, &created, &updated); err != nil {
			return nil, fmt.Errorf("contextwin: load: %w", err)
		}
		if calls.Valid {
			m.ToolCalls = []byte(calls.String)
		}
		m.CreatedAt, m.UpdatedAt = time.UnixMilli(created), time.UnixMilli(updated)
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("contextwin: load: %w", err)
	}
	slices.Reverse(msgs)
	return msgs, nil
}

func loadStmt(ctx context.Context, db *sql.DB) (*sql.Stmt, error) {
	if st, ok := loadStmts.Load(db); ok {
		return st.(*sql.Stmt), nil
	}
	st, err := db.PrepareContext(ctx, loadQuery)
	if err != nil {
		return nil, err
	}
	if prev, loaded := loadStmts.LoadOrStore(db, st); loaded {
		st.Close()
		return prev.(*sql.Stmt), nil
	}
	return st, nil
}
