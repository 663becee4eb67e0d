package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"atrium/internal/errs"
)

// LastUserSeq returns the seq of the last user message of session sessionID at or
// before seq: the user turn a model step at that point of the chat answered. None
// is errs.NotFound. Ownership is the caller's check.
func (db *DB) LastUserSeq(ctx context.Context, sessionID string, seq int64) (int64, error) {
	var got int64
	err := db.pool.QueryRowContext(ctx, `SELECT seq FROM messages WHERE session_id = ? AND seq <= ? AND role = 'user'
		ORDER BY seq DESC LIMIT 1`, sessionID, seq).Scan(&got)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("store: last user message: %w", errs.E(errs.NotFound, "no user message at or before %d", seq))
	}
	if err != nil {
		return 0, fmt.Errorf("store: last user message: %w", err)
	}
	return got, nil
}

// ForkSession creates dst (its ID, title and model set by the caller; owner and
// temporary taken from the source) as a copy of owner's session srcID up to and
// including message seq upTo, in one transaction: the messages keep their seqs,
// roles, texts, tool calls and the memories they used. The source's rolling summary
// comes along when it covers no message past upTo (it summarises copied messages
// only); the task state and "undo remember" marks stay with the source, which they
// describe. A source that is missing or not owner's is errs.NotFound, as is an upTo
// with no message.
func (db *DB) ForkSession(ctx context.Context, owner int64, srcID string, upTo int64, dst *Session) error {
	src, err := db.SessionForOwner(ctx, srcID, owner)
	if err != nil {
		return fmt.Errorf("store: fork session: %w", err)
	}
	if dst.ID == "" || dst.ID == srcID {
		return fmt.Errorf("store: fork session: %w", errs.E(errs.Invalid, "the fork needs a new session id"))
	}
	dst.OwnerID, dst.Temporary, dst.State = owner, src.Temporary, []byte("{}")
	dst.SystemPrompt, dst.TitleSource = src.SystemPrompt, TitleByUser // the fork answers as the source did
	dst.Summary, dst.SummarySeq = "", 0
	if src.SummarySeq > 0 && src.SummarySeq <= upTo {
		dst.Summary, dst.SummarySeq = src.Summary, src.SummarySeq
	}
	now := ms(db.now())
	err = db.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO sessions (id, owner_id, title, model, state, summary, summary_seq, temporary, system_prompt, created_at, updated_at)
			VALUES (?, ?, ?, ?, '{}', ?, ?, ?, ?, ?, ?)`,
			dst.ID, owner, dst.Title, dst.Model, dst.Summary, dst.SummarySeq, dst.Temporary, dst.SystemPrompt, now, now); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO messages (session_id, seq, role, content, reasoning, tool_calls, tool_call_id,
				call_key, status, error, model, tokens, duration_ms, memories, saved_memories, created_at, updated_at)
			SELECT ?, seq, role, content, reasoning, tool_calls, tool_call_id, call_key, status, error, model, tokens, duration_ms,
				memories, '', created_at, ?
			FROM messages WHERE session_id = ? AND seq <= ? ORDER BY seq`, dst.ID, now, srcID, upTo)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(err, errs.E(errs.NotFound, "no messages to fork"))
		}
		// A call key names its step message by id ("atrium_<id>_<index>"), and the copies
		// have new ids: point each copied result at the copy of its step (same seq).
		_, err = tx.ExecContext(ctx, `UPDATE messages SET call_key = COALESCE('atrium_' || (
				SELECT n.id FROM messages n JOIN messages o ON o.seq = n.seq AND o.session_id = ?2
				WHERE n.session_id = ?1
					AND o.id = CAST(substr(messages.call_key, 8, instr(substr(messages.call_key, 8), '_') - 1) AS INTEGER)
			) || substr(call_key, 7 + instr(substr(call_key, 8), '_')), '')
			WHERE session_id = ?1 AND call_key LIKE 'atrium\_%' ESCAPE '\'`, dst.ID, srcID)
		return err
	})
	if isUnique(err) {
		return fmt.Errorf("store: fork session: %w", errs.Wrap(errs.Conflict, err, "session already exists"))
	}
	if err != nil {
		return fmt.Errorf("store: fork session: %w", err)
	}
	dst.CreatedAt, dst.UpdatedAt = fromMS(now), fromMS(now)
	return nil
}
