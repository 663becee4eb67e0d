package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"atrium/internal/errs"
)

// ImportedChat is one chat of an import, checked by the caller: its messages are
// stored in order with seqs 1…n and their own times.
type ImportedChat struct {
	ID           string // the new session's id (a UUID the caller makes)
	Title        string
	SystemPrompt string
	State        []byte // task state JSON; nil is {}
	Temporary    bool
	CreatedAt    time.Time
	Messages     []Message
}

// ImportChats stores chats as new sessions of owner: either every chat, message and
// attached file (Message.Attachments, with their IDs and data, checked by the caller)
// is stored or nothing is. Each chat is one transaction, so that a large import never
// holds the one writer for long (other users' replies are saved in between); when a
// chat fails, the chats stored before it are deleted again. A bad role, status or
// tool-call JSON is errs.Invalid naming the chat and message.
func (db *DB) ImportChats(ctx context.Context, owner int64, chats []ImportedChat) error {
	for i := range chats {
		for j := range chats[i].Messages {
			if err := validMessage(&chats[i].Messages[j]); err != nil {
				return fmt.Errorf("store: import chats: chat %d, message %d: %w", i+1, j+1, err)
			}
		}
	}
	now := ms(db.now())
	stored := make([]string, 0, len(chats))
	for i, c := range chats {
		err := db.inTx(ctx, func(tx *sql.Tx) error { return importChat(ctx, tx, owner, now, i, c) })
		if err != nil {
			if derr := db.deleteImported(context.WithoutCancel(ctx), owner, stored); derr != nil {
				err = errors.Join(err, derr)
			}
			return fmt.Errorf("store: import chats: %w", err)
		}
		stored = append(stored, c.ID)
	}
	return nil
}

// deleteImported takes back the chats an import stored before it failed.
func (db *DB) deleteImported(ctx context.Context, owner int64, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		st, err := tx.PrepareContext(ctx, `DELETE FROM sessions WHERE id = ? AND owner_id = ?`)
		if err != nil {
			return err
		}
		defer st.Close()
		for _, id := range ids {
			if _, err := st.ExecContext(ctx, id, owner); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("take back the chats already imported: %w", err)
	}
	return db.Checkpoint(ctx)
}

// importChat stores chat c (the i-th of its import) in tx. The inserts are prepared
// once: parsing them again for each of thousands of rows was a quarter of the time.
func importChat(ctx context.Context, tx *sql.Tx, owner, now int64, i int, c ImportedChat) error {
	insertMessage, err := tx.PrepareContext(ctx, `INSERT INTO messages (session_id, seq, role, content, reasoning, tool_calls, tool_call_id, call_key, status, error, model, tokens, duration_ms, memories, saved_memories, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, '', '', ?, ?) RETURNING id`)
	if err != nil {
		return err
	}
	defer insertMessage.Close()
	insertFile, err := tx.PrepareContext(ctx, `INSERT INTO attachments (id, owner_id, session_id, message_id, name, kind, mime, size, width, height, tokens, data, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer insertFile.Close()
	state := c.State
	if len(state) == 0 {
		state = []byte("{}")
	}
	created := ms(c.CreatedAt)
	if c.CreatedAt.IsZero() {
		created = now
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO sessions (id, owner_id, title, title_source, model, state, system_prompt, temporary, created_at, updated_at)
		VALUES (?, ?, ?, 'user', '', ?, ?, ?, ?, ?)`, c.ID, owner, c.Title, string(state), c.SystemPrompt, c.Temporary, created, now)
	if isCheck(err) {
		return errs.Wrap(errs.Invalid, err, "chat %d: the task state must be a JSON object", i+1)
	}
	if err != nil {
		return err
	}
	// Tool results are keyed to their call as the agent keys them (ToolCallKey):
	// the n-th result with a call id answers the n-th call with that id of the
	// nearest step before it.
	var step int64
	var stepCalls []string
	answered := map[string]int{}
	for j, m := range c.Messages {
		at := ms(m.CreatedAt)
		if m.CreatedAt.IsZero() {
			at = created
		}
		if m.Role == RoleTool {
			m.CallKey = ""
			n := answered[m.ToolCallID]
			for idx, id := range stepCalls {
				if id == m.ToolCallID {
					if n == 0 {
						m.CallKey = ToolCallKey(step, idx)
						break
					}
					n--
				}
			}
			answered[m.ToolCallID]++
		}
		var id int64
		err := insertMessage.QueryRowContext(ctx,
			c.ID, j+1, m.Role, m.Content, m.Reasoning, nullText(m.ToolCalls), m.ToolCallID, m.CallKey, m.Status, m.Error, m.Model,
			m.Duration.Milliseconds(), at, at).Scan(&id)
		if isCheck(err) {
			return errs.Wrap(errs.Invalid, err, "chat %d, message %d: tool calls must be a JSON list", i+1, j+1)
		}
		if err != nil {
			return err
		}
		for _, a := range m.Attachments {
			if _, err := insertFile.ExecContext(ctx, a.ID, owner, c.ID, id, a.Name, a.Kind, a.MIME, len(a.Data), a.Width, a.Height, a.Tokens, a.Data, at); err != nil {
				if isCheck(err) {
					return errs.Wrap(errs.Invalid, err, "chat %d, message %d: a file is not valid", i+1, j+1)
				}
				return err
			}
		}
		if m.Role == RoleAssistant && len(m.ToolCalls) > 0 {
			var calls []struct{ ID string }
			if err := json.Unmarshal(m.ToolCalls, &calls); err != nil {
				return errs.Wrap(errs.Invalid, err, "chat %d, message %d: tool calls must be a JSON list", i+1, j+1)
			}
			step, stepCalls, answered = id, stepCalls[:0], map[string]int{}
			for _, tc := range calls {
				stepCalls = append(stepCalls, tc.ID)
			}
		}
	}
	if err := linkBranch(ctx, tx, c.ID); err != nil {
		return err
	}
	return nil
}

// OwnerSessions returns every chat of owner, oldest first, for an export.
func (db *DB) OwnerSessions(ctx context.Context, owner int64) ([]Session, error) {
	rows, err := db.pool.QueryContext(ctx, `SELECT `+sessionCols+` FROM sessions WHERE owner_id = ? ORDER BY created_at, id`, owner)
	if err != nil {
		return nil, fmt.Errorf("store: owner sessions: %w", err)
	}
	ss, err := scanAll(rows, scanSession)
	if err != nil {
		return nil, fmt.Errorf("store: owner sessions: %w", err)
	}
	return ss, nil
}

// AllMessages returns the branch on screen of a session, in order, for an export.
func (db *DB) AllMessages(ctx context.Context, sessionID string) ([]Message, error) {
	rows, err := db.pool.QueryContext(ctx, `SELECT `+messageCols+` FROM messages WHERE session_id = ? AND active = 1 ORDER BY seq`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("store: all messages: %w", err)
	}
	ms, err := scanAll(rows, scanMessage)
	if err != nil {
		return nil, fmt.Errorf("store: all messages: %w", err)
	}
	return ms, nil
}
